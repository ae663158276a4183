// Simulated hosts as Linux network namespaces on one machine: each host is a
// namespace whose only interface, eth0, is one end of a veth pair; the other
// end hangs on a bridge in the root namespace. Ranks on different hosts then
// talk real TCP through the kernel (veth, bridge), and a link can be shaped
// with a queueing discipline on its veth. Addresses come from the
// benchmarking range 198.18.0.0/15 (RFC 2544), one /24 per fabric, picked
// free at creation; no namespace gets a default route, so nothing inside can
// reach anything but its peers and the bridge, and no interface of the
// machine itself is touched.
//
// Everything a fabric creates is written to its ledger file before it is
// created; a controller that crashed leaves a ledger, and the next one with
// the same state directory removes what it lists (CleanLeftovers).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace firedrill::controller {

struct NetnsHost {
  std::string name;       // the session's host name ("node-3")
  std::string netns;      // "fd-1a2b3c-4": ip netns exec <netns> ...
  std::string address;    // its eth0 address ("198.18.7.6")
  std::string ifname;     // "eth0", inside the namespace
  std::string host_veth;  // the bridge side, in the root namespace ("fdv1a2b3c4")
  std::string ifb;        // where its traffic into the bridge is shaped (ShapeHost); "" if it is not
  int index = 0;          // its place in the fabric: address .index+2, MAC 02:fd:<tag>:<index>
};

class NetnsFabric {
 public:
  // OK if this machine lets us (root, iproute2, namespaces, veth, bridges):
  // a probe namespace and veth pair are made and removed. The error says
  // what refused.
  static Status Available();
  // A bridge with the fabric's .1 address; `ledger` is where its objects are
  // recorded (its directory must exist).
  static StatusOr<std::unique_ptr<NetnsFabric>> Create(const std::string& ledger);
  ~NetnsFabric();  // removes every host, the bridge and the ledger

  // A new namespace for `host_name` (a name may be added once).
  StatusOr<NetnsHost> AddHost(const std::string& host_name);
  // Caps everything `host_name` sends to and receives from the other hosts
  // at `bandwidth_gbps` (GB/s), both ways, as a host behind a slower link
  // than the ones inside it: a tc tbf on the bridge's port to it, and one
  // on an ifb device its traffic into the bridge is redirected through.
  // Its own eth0 is left alone (a slow_link fault's agent shapes that),
  // and what its ranks send each other never leaves its namespace.
  Status ShapeHost(const std::string& host_name, double bandwidth_gbps);
  Status RemoveHost(const std::string& host_name);
  StatusOr<NetnsHost> Host(const std::string& host_name) const;

  const std::string& bridge() const { return bridge_; }
  // The root namespace's address on the fabric: what agents inside dial.
  const std::string& gateway() const { return gateway_; }
  const std::string& tag() const { return tag_; }

  // Removes whatever `ledger` lists (a crashed controller's leftovers) and
  // the ledger itself; `report` gets one line per object removed.
  static Status CleanLeftovers(const std::string& ledger, std::string* report);

  // /run/netns/<netns>: a child process opens it and setns(2)es into it
  // before exec (see Launcher).
  static std::string NetnsPath(const std::string& netns);
  // Runs `fn` on a thread that joined `netns` (tests: a socket in a host).
  static Status RunIn(const std::string& netns, const std::function<void()>& fn);

 private:
  NetnsFabric() = default;
  // The ledger: a line per object, written before the object is made and
  // dropped once it is gone (rewritten whole, then renamed into place).
  Status Record(const std::string& kind, const std::string& name);
  Status Forget(const std::string& kind, const std::string& name);
  // Records `name`, runs `argv` to make it; if that fails nothing was made,
  // so the line is dropped and nothing is removed (it may be someone else's).
  Status Make(const std::string& kind, const std::string& name, const std::vector<std::string>& argv);

  std::string ledger_, tag_, bridge_, gateway_, prefix_;  // prefix_: "198.18.7."
  mutable std::mutex mu_;         // hosts_, stuck_, next_index_
  mutable std::mutex ledger_mu_;  // the ledger file
  std::mutex shape_mu_;           // ShapeHost, one at a time
  static constexpr int kMaxHosts = 253;  // .2 to .254 of the fabric's /24
  std::map<std::string, NetnsHost> hosts_;
  std::set<int> stuck_;  // indices whose objects could not be removed
  int next_index_ = 0;
};

}  // namespace firedrill::controller
