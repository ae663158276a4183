// The link seam on a real interface: the bad host's link is rate-limited in
// the kernel with token-bucket filters (`tc qdisc ... tbf`), on its egress
// and, through an ifb device its ingress is redirected to, on what it
// receives; so its bytes really queue and every transfer in or out of the
// host (the ring's hops through it, a p2p probe, the store) slows as it
// would behind a degraded NIC or cable. What tbf cannot add is a fixed delay (that is netem, which this
// kernel lacks): the degradation's latency stays a wait before each
// collective, as LinkModel does. Where tc refuses (no root, no tbf), the
// bandwidth falls back to LinkModel's wait too, and `fallback()` says why
// (never logged: only the bad host would say it).
//
// Only for an interface that is the host's alone (eth0 in a host's network
// namespace, see controller/netns_fabric.h): a qdisc on a shared interface
// would slow every host. Of several agents on one host (ranks sharing its
// interface), the first to make one shapes it and the others never touch
// it (fallback() says so): when one of them is degraded it waits only the
// latency while a rate limit is on the interface (the kernel queues its
// bytes too), and its bytes as well while none is (a fault of that rank
// alone), as it found the interface when its degradation changed.
#pragma once

#include <string>
#include <vector>

#include "faults/seams.h"

namespace firedrill::faults {

class ShapedLink : public LinkModel {
 public:
  // Takes off what a killed run of ours left on the interface.
  explicit ShapedLink(std::string ifname);
  ~ShapedLink() override;  // takes the qdisc off

  void Degrade(FaultId id, double latency_us, double bandwidth_gbps) override;
  void Restore(FaultId id) override;

  // Empty while tc shapes the bandwidth; otherwise why it does not.
  std::string fallback() const;
  // Empty while the ingress is shaped too; otherwise why only egress is.
  const std::string& ingress_fallback() const { return ingress_fallback_; }
  const std::string& ifname() const { return ifname_; }

  // One line for the agent's log, the same on every host: whether tc
  // answers for `ifname` here.
  static std::string Capability(const std::string& ifname);
  // The tc command that caps `ifname` at `bandwidth_gbps` GB/s (tests and
  // messages).
  static std::vector<std::string> TbfCommand(const std::string& ifname, double bandwidth_gbps);

 private:
  // Puts the qdisc that the current degradations add up to on the interface
  // (or takes it off), and tells LinkModel what is left for it to wait.
  void Reshape();
  Status ShapeIngress(double bandwidth_gbps);
  void Unshape();
  std::string IfbName() const;
  std::string ifname_;
  bool shaped_ = false;         // a tbf of ours is on the interface
  bool ingress_ready_ = false;  // the ifb and the redirect are in place
  std::string ingress_fallback_;
  std::string fallback_;  // Degrade and Restore run on one thread (the runner's)
  int lock_fd_ = -2;       // the interface's ownership lock (see the constructor)
  std::string lock_path_;
  std::string not_owner_;  // set: another ShapedLink owns the interface
};

}  // namespace firedrill::faults
