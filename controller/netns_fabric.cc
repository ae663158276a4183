#include "controller/netns_fabric.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "common/subprocess.h"
#include "common/tc.h"

namespace firedrill::controller {

namespace {

std::string RandomTag() {
  std::random_device rd;
  char buf[8];
  std::snprintf(buf, sizeof buf, "%06x", static_cast<unsigned>(rd()) & 0xffffffu);
  return buf;
}

// Only names this code makes are ever deleted, whatever a ledger says:
// fd-<tag>-<n> and fd-probe-<pid> namespaces; fdb<tag> bridges,
// fdv<tag><n> veths (and the probe's fdv<tag>p), fdi<tag><n> ifb devices
// (a shaped host's traffic into the bridge).
bool Ours(const std::string& kind, const std::string& name) {
  static const std::regex netns("fd-([0-9a-f]{6}-[0-9]{1,3}|probe-[0-9]{1,10})");
  static const std::regex link("fd(b[0-9a-f]{6}|v[0-9a-f]{6}([0-9]{1,3}|p)|i[0-9a-f]{6}[0-9]{1,3})");
  if (kind == "netns") return std::regex_match(name, netns);
  if (kind == "link") return std::regex_match(name, link);
  return false;
}

Status Remove(const std::string& kind, const std::string& name) {
  if (!Ours(kind, name)) return InvalidArgument("refusing to remove " + kind + " '" + name + "': not one of ours");
  auto r = kind == "netns" ? RunCommand({"ip", "netns", "del", name}) : RunCommand({"ip", "link", "del", name});
  if (!r.ok()) return r.status();
  // Already gone is fine: a host's veth goes with its namespace.
  if (r->exit_code != 0 && r->output.find("No such") == std::string::npos &&
      r->output.find("Cannot find") == std::string::npos && r->output.find("does not exist") == std::string::npos)
    return Internal("removing " + kind + " " + name + ": " + r->output);
  return Status::Ok();
}

// The /24s of 198.18.0.0/15 some interface here already uses.
std::set<int> UsedSubnets() {
  std::set<int> used;
  auto r = RunCommand({"ip", "-o", "-4", "addr", "show"});
  if (!r.ok()) return used;
  for (int k = 0; k < 512; ++k) {
    const std::string p = (k < 256 ? "198.18." + std::to_string(k) : "198.19." + std::to_string(k - 256)) + ".";
    if (r->output.find(" " + p) != std::string::npos) used.insert(k);
  }
  return used;
}

}  // namespace

std::string NetnsFabric::NetnsPath(const std::string& netns) { return "/run/netns/" + netns; }

Status NetnsFabric::Available() {
  if (geteuid() != 0) return FailedPrecondition("network namespaces need root (running as uid " + std::to_string(geteuid()) + ")");
  // A slow link's ingress is shaped through an ifb device in the host's
  // namespace; loaded with its defaults, the module would also make ifb0
  // and ifb1 in the machine's own namespace, which is not ours to change.
  (void)RunCommand({"modprobe", "ifb", "numifbs=0"});
  const std::string ns = "fd-probe-" + std::to_string(getpid());
  const std::string veth = "fdv" + RandomTag() + "p";
  FD_RETURN_IF_ERROR(RunChecked({"ip", "netns", "add", ns}));
  Status st = RunChecked({"ip", "link", "add", veth, "type", "veth", "peer", "name", veth + "x"});
  if (st.ok()) st = RunChecked({"ip", "link", "set", veth + "x", "netns", ns});
  (void)Remove("link", veth);
  (void)Remove("netns", ns);
  return st;
}

Status NetnsFabric::Record(const std::string& kind, const std::string& name) {
  std::lock_guard<std::mutex> lock(ledger_mu_);
  std::ofstream out(ledger_, std::ios::app);
  out << kind << " " << name << "\n";
  out.flush();
  if (!out) return Internal("writing the network ledger " + ledger_ + " failed");
  return Status::Ok();
}

Status NetnsFabric::Forget(const std::string& kind, const std::string& name) {
  std::lock_guard<std::mutex> lock(ledger_mu_);
  std::ifstream in(ledger_);
  std::vector<std::string> keep;
  std::string line;
  while (std::getline(in, line))
    if (line != kind + " " + name) keep.push_back(line);
  in.close();
  const std::string tmp = ledger_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& l : keep) out << l << "\n";
    out.flush();
    if (!out) return Internal("rewriting the network ledger " + ledger_ + " failed");
  }
  if (std::rename(tmp.c_str(), ledger_.c_str()) != 0)
    return Internal("replacing the network ledger " + ledger_ + ": " + std::strerror(errno));
  return Status::Ok();
}

Status NetnsFabric::Make(const std::string& kind, const std::string& name, const std::vector<std::string>& argv) {
  FD_RETURN_IF_ERROR(Record(kind, name));
  Status st = RunChecked(argv);
  if (!st.ok()) (void)Forget(kind, name);
  return st;
}

StatusOr<std::unique_ptr<NetnsFabric>> NetnsFabric::Create(const std::string& ledger) {
  std::unique_ptr<NetnsFabric> f(new NetnsFabric());
  f->ledger_ = ledger;
  f->tag_ = RandomTag();
  const std::string bridge = "fdb" + f->tag_;
  // Fabrics made at the same time must not pick the same /24.
  const int lock_fd = open("/run/firedrill-fabric.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd >= 0) flock(lock_fd, LOCK_EX);
  struct Unlock {
    int fd;
    ~Unlock() {
      if (fd >= 0) close(fd);  // releases the flock
    }
  } unlock{lock_fd};
  const std::set<int> used = UsedSubnets();
  int k = 0;
  while (k < 512 && used.count(k)) ++k;
  if (k == 512) return ResourceExhausted("every /24 of 198.18.0.0/15 is in use on this machine");
  f->prefix_ = (k < 256 ? "198.18." + std::to_string(k) : "198.19." + std::to_string(k - 256)) + ".";
  f->gateway_ = f->prefix_ + "1";
  FD_RETURN_IF_ERROR(f->Make("link", bridge, {"ip", "link", "add", bridge, "type", "bridge"}));
  f->bridge_ = bridge;  // ours from here on: the destructor removes it
  // Bridged frames skip iptables where br_netfilter is loaded (a FORWARD
  // DROP policy, as Docker sets, would drop them); best effort.
  (void)RunCommand({"ip", "link", "set", bridge, "type", "bridge", "nf_call_iptables", "0", "nf_call_ip6tables", "0",
                    "nf_call_arptables", "0"});
  FD_RETURN_IF_ERROR(RunChecked({"ip", "addr", "add", f->gateway_ + "/24", "dev", bridge}));
  FD_RETURN_IF_ERROR(RunChecked({"ip", "link", "set", bridge, "up"}));
  return f;
}

NetnsFabric::~NetnsFabric() {
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, h] : hosts_) names.push_back(name);
  }
  bool clean = true;
  for (const auto& n : names) clean = RemoveHost(n).ok() && clean;
  if (!bridge_.empty()) {
    if (Remove("link", bridge_).ok()) (void)Forget("link", bridge_);
    else clean = false;
  }
  // What could not be removed stays listed for the next CleanLeftovers.
  if (clean) std::remove(ledger_.c_str());
}

StatusOr<NetnsHost> NetnsFabric::AddHost(const std::string& host_name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (hosts_.count(host_name)) return AlreadyExists("host " + host_name + " already has a namespace");
  // Indices (and with them addresses) are reused round-robin, so a freed one
  // comes back as late as possible; a host's MAC follows its index, so a
  // peer's neighbour cache holding a reused address still points right.
  std::set<int> taken = stuck_;
  for (const auto& [n, other] : hosts_) taken.insert(other.index);
  int idx = -1;
  for (int k = 0; k < kMaxHosts; ++k) {
    const int c = (next_index_ + k) % kMaxHosts;
    if (!taken.count(c)) {
      idx = c;
      break;
    }
  }
  if (idx < 0) return ResourceExhausted("a fabric holds at most " + std::to_string(kMaxHosts) + " hosts at once");
  next_index_ = (idx + 1) % kMaxHosts;
  NetnsHost h;
  h.index = idx;
  h.name = host_name;
  h.netns = "fd-" + tag_ + "-" + std::to_string(idx);
  h.address = prefix_ + std::to_string(idx + 2);
  h.ifname = "eth0";
  h.host_veth = "fdv" + tag_ + std::to_string(idx);
  char mac[32];
  std::snprintf(mac, sizeof mac, "02:fd:%s:%s:%s:%02x", tag_.substr(0, 2).c_str(), tag_.substr(2, 2).c_str(),
                tag_.substr(4, 2).c_str(), idx);  // locally administered, unicast
  const std::string peer = "fdp" + tag_ + std::to_string(idx);
  const std::string ns = h.netns;
  FD_RETURN_IF_ERROR(Make("netns", ns, {"ip", "netns", "add", ns}));
  if (Status st = Make("link", h.host_veth, {"ip", "link", "add", h.host_veth, "type", "veth", "peer", "name", peer});
      !st.ok()) {
    if (Remove("netns", ns).ok()) (void)Forget("netns", ns);
    return Status(st.code(), "host " + host_name + ": " + st.message());
  }
  const std::vector<std::vector<std::string>> steps = {
      {"ip", "link", "set", peer, "netns", ns},
      {"ip", "-n", ns, "link", "set", peer, "name", h.ifname},
      {"ip", "-n", ns, "link", "set", h.ifname, "address", mac},
      {"ip", "-n", ns, "addr", "add", h.address + "/24", "dev", h.ifname},
      {"ip", "-n", ns, "link", "set", h.ifname, "up"},
      {"ip", "-n", ns, "link", "set", "lo", "up"},
      {"ip", "link", "set", h.host_veth, "master", bridge_},
      {"ip", "link", "set", h.host_veth, "up"},
  };
  for (const auto& cmd : steps) {
    if (Status st = RunChecked(cmd); !st.ok()) {
      if (Remove("netns", ns).ok()) (void)Forget("netns", ns);
      if (Remove("link", h.host_veth).ok()) (void)Forget("link", h.host_veth);
      return Status(st.code(), "host " + host_name + ": " + st.message());
    }
  }
  hosts_[host_name] = h;
  return h;
}

Status NetnsFabric::ShapeHost(const std::string& host_name, double bandwidth_gbps) {
  if (!(bandwidth_gbps > 0)) return InvalidArgument("a host's link needs a bandwidth > 0 GB/s");
  // One shaping at a time: a host's ifb is made once.
  std::lock_guard<std::mutex> shaping(shape_mu_);
  NetnsHost h;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = hosts_.find(host_name);
    if (it == hosts_.end()) return NotFound("no namespace for host " + host_name);
    h = it->second;
  }
  // Toward the host: the bridge's port to it.
  FD_RETURN_IF_ERROR(RunChecked(TbfCommand(h.host_veth, bandwidth_gbps)));
  if (h.ifb.empty()) {
    // From the host: what arrives on that port goes out through the ifb.
    const std::string ifb = "fdi" + tag_ + std::to_string(h.index);
    FD_RETURN_IF_ERROR(Make("link", ifb, {"ip", "link", "add", ifb, "type", "ifb"}));
    const std::vector<std::vector<std::string>> steps = {
        {"ip", "link", "set", ifb, "up"},
        {"tc", "qdisc", "add", "dev", h.host_veth, "handle", "ffff:", "ingress"},
        {"tc",    "filter", "add", "dev", h.host_veth, "parent", "ffff:",  "protocol", "all", "u32",
         "match", "u32",    "0",   "0",   "action",    "mirred", "egress", "redirect", "dev", ifb},
    };
    for (const auto& cmd : steps) {
      if (Status st = RunChecked(cmd); !st.ok()) {
        (void)RunCommand({"tc", "qdisc", "del", "dev", h.host_veth, "ingress"});  // and its filter, if made
        if (Remove("link", ifb).ok()) (void)Forget("link", ifb);
        return Status(st.code(),
                      "host " + host_name +
                          ": shaping its link (a kernel without ifb devices cannot): " + st.message());
      }
    }
    h.ifb = ifb;
    bool gone = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = hosts_.find(host_name);
      gone = it == hosts_.end();
      if (!gone) it->second.ifb = ifb;
    }
    if (gone) {  // removed meanwhile: nothing would remove its ifb
      if (Remove("link", ifb).ok()) (void)Forget("link", ifb);
      return NotFound("host " + host_name + " was removed while its link was being shaped");
    }
  }
  return RunChecked(TbfCommand(h.ifb, bandwidth_gbps));
}

Status NetnsFabric::RemoveHost(const std::string& host_name) {
  NetnsHost h;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = hosts_.find(host_name);
    if (it == hosts_.end()) return NotFound("no namespace for host " + host_name);
    h = it->second;
    hosts_.erase(it);
  }
  Status st = Remove("netns", h.netns);  // takes eth0 and, with it, its veth peer
  if (st.ok()) (void)Forget("netns", h.netns);
  Status l = Remove("link", h.host_veth);
  if (l.ok()) (void)Forget("link", h.host_veth);
  if (!h.ifb.empty() && l.ok()) {
    l = Remove("link", h.ifb);
    if (l.ok()) (void)Forget("link", h.ifb);
  }
  if (!st.ok() || !l.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    stuck_.insert(h.index);  // its names are still taken: never handed out again
  }
  return st.ok() ? l : st;
}

StatusOr<NetnsHost> NetnsFabric::Host(const std::string& host_name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hosts_.find(host_name);
  if (it == hosts_.end()) return NotFound("no namespace for host " + host_name);
  return it->second;
}

Status NetnsFabric::CleanLeftovers(const std::string& ledger, std::string* report) {
  std::ifstream in(ledger);
  if (!in) return Status::Ok();  // nothing was left
  std::vector<std::pair<std::string, std::string>> objs;
  std::string kind, name;
  while (in >> kind >> name) objs.emplace_back(kind, name);
  in.close();
  Status first = Status::Ok();
  // Namespaces first: their veths go with them; then the bridges.
  for (const char* want : {"netns", "link"}) {
    for (const auto& [k, n] : objs) {
      if (k != want) continue;
      Status st = Remove(k, n);
      if (report) *report += (st.ok() ? "removed " : "could not remove ") + k + " " + n + "\n";
      if (!st.ok() && first.ok()) first = st;
    }
  }
  if (first.ok()) std::remove(ledger.c_str());
  return first;
}

Status NetnsFabric::RunIn(const std::string& netns, const std::function<void()>& fn) {
  Status result = Status::Ok();
  std::thread t([&] {
    const int fd = open(NetnsPath(netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      result = NotFound("namespace " + netns + ": " + std::strerror(errno));
      return;
    }
    const int rc = setns(fd, CLONE_NEWNET);
    close(fd);
    if (rc != 0) {
      result = Internal("setns " + netns + ": " + std::strerror(errno));
      return;
    }
    fn();
  });
  t.join();
  return result;
}

}  // namespace firedrill::controller
