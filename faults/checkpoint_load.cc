#include "faults/checkpoint_load.h"

#include <string>

namespace firedrill::faults {

Status ValidateCheckpointLoad(const v1::FaultSpec& spec) {
  const std::string& load = spec.checkpoint_load().load();
  // "resharded" loads at any world size: as a fault it would change nothing.
  if (load != "per_rank")
    return InvalidArgument(
        "params.load must be \"per_rank\" (a loader that needs the world size the checkpoint was "
        "written at), got \"" +
        load + "\"");
  if (!spec.target().all_ranks())
    return InvalidArgument("target must be {all_ranks: true}: how a resume loads is the whole job's setting");
  if (spec.trigger().step().has_draw() || spec.trigger().step().value() != 0)
    return InvalidArgument("trigger.step must be 0: the job was launched with its loader");
  return Status::Ok();
}

void ApplyCheckpointLoad(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  job->mutable_checkpoint()->set_load(fault.checkpoint_load().load());
}

}  // namespace firedrill::faults
