#include "faults/comm_misconfig.h"

namespace firedrill::faults {

Status CommMisconfig::Apply(Seams& s) {
  if (!s.environment) return MissingSeam("comm_misconfig", "environment");
  FD_RETURN_IF_ERROR(s.environment->Set(id_, "GLOO_SOCKET_IFNAME", ifname_));
  return s.environment->Set(id_, "NCCL_SOCKET_IFNAME", ifname_);
}

Status CommMisconfig::Recover(Seams& s) {
  if (s.environment) s.environment->Restore(id_);
  return Status::Ok();
}

Status ValidateCommMisconfig(const v1::FaultSpec& spec) {
  const std::string& n = spec.comm_misconfig().socket_ifname();
  if (n.empty() || n.size() > 15 || n.find_first_of(" /") != std::string::npos)
    return InvalidArgument("params.socket_ifname must be an interface name such as ib0, got '" + n + "'");
  return Status::Ok();
}

}  // namespace firedrill::faults
