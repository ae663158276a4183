// Linux traffic control commands shared by what shapes links: a slow_link
// fault on a host's own interface (faults/shaped_link.h) and a drill's
// inter-host links on the fabric (controller/netns_fabric.h).
#pragma once

#include <string>
#include <vector>

namespace firedrill {

// `tc qdisc replace dev IFNAME root tbf ...` capping what leaves IFNAME at
// `bandwidth_gbps` (GB/s): a bucket of a few milliseconds at the rate, at
// least two 64 kB segments (veth hands over GSO super-packets), and a queue
// of a few hundred milliseconds before tbf drops (TCP then backs off, as
// behind a real bottleneck).
std::vector<std::string> TbfCommand(const std::string& ifname, double bandwidth_gbps);

}  // namespace firedrill
