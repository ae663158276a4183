#include "faults/stale_accumulation.h"

#include <string>

namespace firedrill::faults {

Status ValidateStaleAccumulation(const v1::FaultSpec& spec) {
  const int steps = spec.stale_accumulation().grad_accum_steps();
  if (steps < 1 || steps > 1024)
    return InvalidArgument("params.grad_accum_steps is " + std::to_string(steps) +
                           ": the micro-batches per optimiser step the relaunch carried over, 1 to 1024");
  // A launch command is the whole job's, from its start.
  if (!spec.target().all_ranks())
    return InvalidArgument("target must be {all_ranks: true}: the accumulation is the whole job's setting");
  if (spec.trigger().step().has_draw() || spec.trigger().step().value() != 0)
    return InvalidArgument(
        "trigger.step must be 0: the relaunch set the accumulation before the job started");
  return Status::Ok();
}

void ApplyStaleAccumulation(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  job->set_grad_accum_steps(fault.stale_accumulation().grad_accum_steps());
}

}  // namespace firedrill::faults
