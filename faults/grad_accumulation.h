// grad_accumulation: a training loop that gets gradient accumulation wrong,
// in one of the two ways real loops do.
//
// "sync_every_micro_batch": the loop lost its `with model.no_sync():` (a
// refactor, a wrapper that does not forward it), so every micro-batch's
// backward all-reduces every gradient bucket, not only the last one's. The
// gradient that reaches the optimiser is the same (the average is linear),
// so the loss curve does not change; the step makes grad_accum_steps times
// the all-reduces and carries as many times the bytes, and the job slows by
// what they cost. Sets comm.accumulation_sync = every_micro_batch.
//
// "unscaled_loss": the micro-batch losses are summed instead of averaged
// (the loss is not divided by grad_accum_steps), so the gradient and its
// norm are grad_accum_steps times one large batch's; for SGD that is the
// learning rate times as much. Sets optim.accumulation_loss = sum.
//
// Job overlays only: the mechanics are the trainer's own (agent/trainer.cc).
#pragma once

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

Status ValidateGradAccumulation(const v1::FaultSpec& spec);
void ApplyGradAccumulation(const v1::ResolvedFault& fault, v1::JobSpec* job);

}  // namespace firedrill::faults
