#include "faults/slow_link.h"

#include <cmath>
#include <string>

namespace firedrill::faults {

Status SlowLink::Apply(Seams& s) {
  if (!s.link) return MissingSeam("slow_link", "link");
  s.link->Degrade(id_, latency_us_, bandwidth_gbps_);
  return Status::Ok();
}

Status SlowLink::Recover(Seams& s) {
  if (s.link) s.link->Restore(id_);
  return Status::Ok();
}

Status ValidateSlowLink(const v1::FaultSpec& spec) {
  const auto& p = spec.slow_link();
  if (!(p.latency_us() >= 0 && p.latency_us() <= 1e6))
    return InvalidArgument("params.latency_us must be in [0, 1000000], got " + std::to_string(p.latency_us()));
  if (!(p.bandwidth_gbps() > 0 && p.bandwidth_gbps() <= 1000))
    return InvalidArgument("params.bandwidth_gbps must be in (0, 1000] (GB/s of the degraded link), got " +
                           std::to_string(p.bandwidth_gbps()));
  return Status::Ok();
}

}  // namespace firedrill::faults
