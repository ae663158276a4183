// lr_rule: a launcher's learning-rate policy. The deploy derives the
// job's learning rate from the global batch its optim.lr was tuned at
// (`reference_global_batch`) by `rule`, and sets the warm-up to
// `warmup_steps`. Goyal et al.'s linear rule holds for SGD up to a critical
// batch; for Adam-style optimisers the update's size does not shrink with
// the gradient noise the way SGD's does, and the rule that keeps the
// training dynamics (Malladi et al., the SDE view) is the square root. A job
// whose global batch is 32 times its reference gets 32 times its learning
// rate under the linear rule instead of 5.7 times: the loss spikes in the
// first steps and stays far above the healthy job's; a warm-up removes the
// spike but not the learning rate it ramps to. A job overlay only: the
// learning rate is the trainer's own (agent/optim.h ScaledLr and
// ScheduledLr). Remedies: the square-root rule, with or without a warm-up.
#pragma once

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

Status ValidateLrRule(const v1::FaultSpec& spec);
void ApplyLrRule(const v1::ResolvedFault& fault, v1::JobSpec* job);

}  // namespace firedrill::faults
