#include "faults/comm_misconfig.h"

namespace firedrill::faults {

Status ValidateCommMisconfig(const v1::FaultSpec& spec) {
  const std::string& n = spec.comm_misconfig().socket_ifname();
  if (n.empty() || n.size() > 15 || n.find_first_of(" /") != std::string::npos)
    return InvalidArgument("params.socket_ifname must be an interface name such as ib0, got '" + n + "'");
  return Status::Ok();
}

}  // namespace firedrill::faults
