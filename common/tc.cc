#include "common/tc.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace firedrill {

std::vector<std::string> TbfCommand(const std::string& ifname, double bandwidth_gbps) {
  const double bytes_per_s = bandwidth_gbps * 1e9;
  const auto burst = static_cast<int64_t>(std::max(bytes_per_s * 0.004, 131072.0));
  return {"tc",
          "qdisc",
          "replace",
          "dev",
          ifname,
          "root",
          "tbf",
          "rate",
          std::to_string(static_cast<int64_t>(std::llround(bytes_per_s * 8))) + "bit",
          "burst",
          std::to_string(burst),
          "latency",
          "400ms"};
}

}  // namespace firedrill
