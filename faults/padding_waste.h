// padding_waste: the deploy batches variable-length sequences at random and
// pads every row to the longest row of its batch, so much of the compute goes
// to padding (attention and MLP run on it; the loss ignores it). A job
// overlay only: the padding is real, made by the loader (agent/data.h), and
// data.sampler=length_bucketed removes most of it.
#pragma once

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

Status ValidatePaddingWaste(const v1::FaultSpec& spec);
void ApplyPaddingWaste(const v1::ResolvedFault& fault, v1::JobSpec* job);

}  // namespace firedrill::faults
