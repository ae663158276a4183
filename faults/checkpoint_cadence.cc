#include "faults/checkpoint_cadence.h"

#include <string>

namespace firedrill::faults {

Status ValidateCheckpointCadence(const v1::FaultSpec& spec) {
  const int every = spec.checkpoint_cadence().every();
  if (every < 1 || every > 1000000)
    return InvalidArgument("params.every is " + std::to_string(every) +
                           ": the steps between checkpoints, 1 to 1000000 (a job that never checkpoints is "
                           "checkpoint.every 0 in the job itself)");
  // The deployed config is the whole job's, from its start.
  if (!spec.target().all_ranks())
    return InvalidArgument("target must be {all_ranks: true}: a cadence is the whole job's setting");
  if (spec.trigger().step().has_draw() || spec.trigger().step().value() != 0)
    return InvalidArgument("trigger.step must be 0: the deploy set the cadence before the job started");
  return Status::Ok();
}

void ApplyCheckpointCadence(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  job->mutable_checkpoint()->set_every(fault.checkpoint_cadence().every());
}

}  // namespace firedrill::faults
