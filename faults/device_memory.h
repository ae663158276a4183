// device_memory: the job moved to devices with less memory (GPUs split into
// MIG slices, an older card generation, a pool shared with inference).
// The overlay sets memory.device_budget_mb: the trainer's tracked
// allocator (agent/memory.h) refuses an allocation past it with the error
// PyTorch's CUDA caching allocator raises ("CUDA out of memory. Tried to
// allocate ..."), so a job whose peak (parameters, gradients, optimiser
// state and the activations of one micro-batch) no longer fits fails at
// its first step on every rank. Nothing else changes: the model, the batch
// and the data are the job's own.
#pragma once

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

Status ValidateDeviceMemory(const v1::FaultSpec& spec);
void ApplyDeviceMemory(const v1::ResolvedFault& fault, v1::JobSpec* job);

}  // namespace firedrill::faults
