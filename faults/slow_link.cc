#include "faults/slow_link.h"

#include <cmath>
#include <string>

namespace firedrill::faults {

Nanos SlowLink::LinkDelay(const CollectiveInfo& c) const {
  // GB/s is bytes per nanosecond.
  const double ns = latency_us_ * 1e3 + static_cast<double>(c.link_bytes) / bandwidth_gbps_;
  return Nanos(static_cast<int64_t>(std::llround(ns)));
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
