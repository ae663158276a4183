#include "faults/checkpoint_cadence.h"

#include <string>

namespace firedrill::faults {

Status ValidateCheckpointCadence(const v1::FaultSpec& spec) {
  const int every = spec.checkpoint_cadence().every();
  if (every < 1 || every > 1000000)
    return InvalidArgument("params.every is " + std::to_string(every) +
                           ": the steps between checkpoints, 1 to 1000000 (a job that never checkpoints is "
                           "checkpoint.every 0 in the job itself)");
  return Status::Ok();
}

void ApplyCheckpointCadence(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  job->mutable_checkpoint()->set_every(fault.checkpoint_cadence().every());
}

}  // namespace firedrill::faults
