#include "faults/device_memory.h"

#include <cmath>
#include <string>

namespace firedrill::faults {

Status ValidateDeviceMemory(const v1::FaultSpec& spec) {
  const double mb = spec.device_memory().budget_mb();
  if (!(mb >= 1) || !std::isfinite(mb))
    return InvalidArgument("params.budget_mb must be >= 1 (the new devices' memory, in MiB), got " + std::to_string(mb));
  return Status::Ok();
}

void ApplyDeviceMemory(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  job->mutable_memory()->set_device_budget_mb(fault.device_memory().budget_mb());
}

}  // namespace firedrill::faults
