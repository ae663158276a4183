// comm_misconfig: a node's environment points Gloo at a network interface it
// does not have (GLOO_SOCKET_IFNAME=ib0 left in a node image, the classic
// NCCL_SOCKET_IFNAME mistake). That rank cannot create its transport device
// and fails with Gloo's own error; its peers wait in the rendezvous until
// the timeout. Host-scoped: a fresh node, or the job setting the interface
// explicitly (comm.socket_ifname), fixes it.
#pragma once

#include <string>

#include "faults/fault.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

class CommMisconfig : public Fault {
 public:
  explicit CommMisconfig(std::string ifname) : ifname_(std::move(ifname)) {}
  std::string SocketIfname() const override { return ifname_; }

 private:
  std::string ifname_;
};

Status ValidateCommMisconfig(const v1::FaultSpec& spec);

}  // namespace firedrill::faults
