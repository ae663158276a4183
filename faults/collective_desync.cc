#include "faults/collective_desync.h"

#include <string>

namespace firedrill::faults {

Status ValidateCollectiveDesync(const v1::FaultSpec& spec) {
  const double t = spec.collective_desync().comm_timeout_s();
  if (!(t >= 0 && t <= 86400)) return InvalidArgument("params.comm_timeout_s must be in [0, 86400] (0 = the job's)");
  return Status::Ok();
}

void ApplyCollectiveDesync(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  job->mutable_data()->set_drop_last(false);
  if (fault.collective_desync().comm_timeout_s() > 0)
    job->mutable_comm()->set_timeout_s(fault.collective_desync().comm_timeout_s());
}

}  // namespace firedrill::faults
