// slow_link: one host's interconnect path is degraded (a node whose GPUs fell
// back from NVLink to PCIe, an InfiniBand port that retrained at a lower rate
// or keeps taking symbol errors). Every collective this host's rank takes
// part in costs a fixed latency plus the bytes the rank moves over its link
// at the capped bandwidth. The delay is taken inside the collective layer
// (before the rank hands its part to the transport; for the gradient
// all-reduces on a launch thread, so backward is not held up), so the
// collective completes late on every rank: communication
// time rises everywhere, compute stays normal, and only a probe that isolates
// pairs of ranks points at the host.
#pragma once

#include "faults/fault.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

class SlowLink : public Fault {
 public:
  SlowLink(FaultId id, double latency_us, double bandwidth_gbps)
      : id_(id), latency_us_(latency_us), bandwidth_gbps_(bandwidth_gbps) {}
  Status Apply(Seams& s) override;
  Status Recover(Seams& s) override;

 private:
  FaultId id_;
  double latency_us_;
  double bandwidth_gbps_;
};

Status ValidateSlowLink(const v1::FaultSpec& spec);

}  // namespace firedrill::faults
