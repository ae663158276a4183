#include "faults/grad_accumulation.h"

#include <string>

namespace firedrill::faults {

Status ValidateGradAccumulation(const v1::FaultSpec& spec) {
  const std::string& bug = spec.grad_accumulation().bug();
  if (bug != "sync_every_micro_batch" && bug != "unscaled_loss")
    return InvalidArgument("params.bug must be \"sync_every_micro_batch\" (no no_sync(): an all-reduce per "
                           "micro-batch) or \"unscaled_loss\" (micro-batch losses summed, not averaged), got \"" +
                           bug + "\"");
  return Status::Ok();
}

void ApplyGradAccumulation(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  if (fault.grad_accumulation().bug() == "sync_every_micro_batch") {
    job->mutable_comm()->set_accumulation_sync("every_micro_batch");
  } else {
    job->mutable_optim()->set_accumulation_loss("sum");
  }
}

}  // namespace firedrill::faults
