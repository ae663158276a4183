// stale_accumulation: the job was relaunched at another world size with the
// launch command of the old one, and nobody rescaled its gradient
// accumulation. The global batch is ranks x per-rank batch x accumulation
// steps, so with fewer ranks and the same accumulation each optimiser step
// averages fewer samples: at the learning rate tuned for the larger batch
// the gradient noise is larger, and the loss stays above the reference
// run's at the same step. Nothing is slowed or broken; each step is simply
// a smaller batch. The overlay sets grad_accum_steps; the mechanics are the
// trainer's own (agent/trainer.cc).
#pragma once

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

Status ValidateStaleAccumulation(const v1::FaultSpec& spec);
void ApplyStaleAccumulation(const v1::ResolvedFault& fault, v1::JobSpec* job);

}  // namespace firedrill::faults
