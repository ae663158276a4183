#include "faults/resume_without_state.h"

#include "common/restore_parts.h"

namespace firedrill::faults {

Status ValidateResumeWithoutState(const v1::FaultSpec& spec) {
  const std::string& r = spec.resume_without_state().restore();
  auto parts = ParseRestoreParts(r);
  if (!parts.ok()) return InvalidArgument("params.restore: " + parts.status().message());
  if (parts->All())
    return InvalidArgument("params.restore is \"" + r + "\", which restores everything: name the parts the broken "
                           "resume puts back, e.g. \"model\"");
  // The trainer draws nothing from the default generator once training
  // runs (the model's init and the data order have generators of their
  // own), so a resume that leaves out only the RNG changes nothing.
  if (parts->optim && parts->data)
    return InvalidArgument("params.restore is \"" + r + "\", which leaves out only the RNG: nothing in training here "
                           "draws from it, so the resume would lose nothing; leave out optim or data");
  return Status::Ok();
}

void ApplyResumeWithoutState(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  job->mutable_checkpoint()->set_restore(fault.resume_without_state().restore());
}

}  // namespace firedrill::faults
