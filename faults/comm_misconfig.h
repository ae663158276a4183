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

// Sets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME (the runbook's two names
// for the same mistake) in the host's environment; Gloo is built from it.
class CommMisconfig : public Fault {
 public:
  CommMisconfig(FaultId id, std::string ifname) : id_(id), ifname_(std::move(ifname)) {}
  Status Apply(Seams& s) override;
  Status Recover(Seams& s) override;

 private:
  FaultId id_;
  std::string ifname_;
};

Status ValidateCommMisconfig(const v1::FaultSpec& spec);

}  // namespace firedrill::faults
