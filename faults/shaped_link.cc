#include "faults/shaped_link.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "common/subprocess.h"
#include "common/tc.h"

namespace firedrill::faults {

std::vector<std::string> ShapedLink::TbfCommand(const std::string& ifname, double bandwidth_gbps) {
  return firedrill::TbfCommand(ifname, bandwidth_gbps);
}

void ShapedLink::Degrade(FaultId id, double latency_us, double bandwidth_gbps) {
  LinkModel::Degrade(id, latency_us, bandwidth_gbps);
  Reshape();
}

void ShapedLink::Restore(FaultId id) {
  LinkModel::Restore(id);
  Reshape();
}

namespace {

// One ShapedLink at a time owns an interface of a network namespace: a lock
// file per namespace and interface, held while it lives (and dropped by the
// kernel when its process dies). >= 0: the lock's fd; -1: another one holds
// it; -2: no lock can be taken here (then nothing guards the interface).
int LockInterface(const std::string& ifname, std::string* path) {
  struct stat ns {};
  if (stat("/proc/thread-self/ns/net", &ns) != 0) return -2;  // this thread's namespace (RunIn sets a thread's)
  const std::string dir = "/run/firedrill";
  mkdir(dir.c_str(), 0700);
  *path = dir + "/link-" + std::to_string(ns.st_ino) + "-" + ifname + ".lock";
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = open(path->c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return -2;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      close(fd);
      return -1;
    }
    // The owner before us unlinks the file as it goes: a lock on a file no
    // longer at `path` guards nothing, so try the one there now.
    struct stat held {}, now {};
    if (fstat(fd, &held) == 0 && stat(path->c_str(), &now) == 0 && held.st_ino == now.st_ino) return fd;
    close(fd);
  }
  return -2;
}

}  // namespace

ShapedLink::ShapedLink(std::string ifname) : ifname_(std::move(ifname)) {
  // Two agents on one host (ranks sharing its interface) must not undo each
  // other's qdisc: the second waits its bytes out instead.
  lock_fd_ = LockInterface(ifname_, &lock_path_);
  if (lock_fd_ == -1) {
    not_owner_ = "another agent on this host shapes " + ifname_;
    return;
  }
  // What a killed run left on the interface (a remote agent's host outlives
  // its runs): our tbf, our ingress redirect and ifb. Nothing else is ours.
  auto root = RunCommand({"tc", "qdisc", "show", "dev", ifname_, "root"});
  if (root.ok() && root->exit_code == 0 && root->output.find("qdisc tbf") != std::string::npos)
    (void)RunCommand({"tc", "qdisc", "del", "dev", ifname_, "root"});
  auto ifb = RunCommand({"ip", "link", "show", IfbName()});
  if (ifb.ok() && ifb->exit_code == 0) {
    (void)RunCommand({"tc", "qdisc", "del", "dev", ifname_, "ingress"});
    (void)RunCommand({"ip", "link", "del", IfbName()});
  }
}

std::string ShapedLink::Capability(const std::string& ifname) {
  auto r = RunCommand({"tc", "qdisc", "show", "dev", ifname});
  if (!r.ok() || r->exit_code != 0)
    return "a slow link here waits out its bytes (tc on " + ifname + ": " +
           (r.ok() ? r->output : r.status().message()) + ")";
  return "a slow link here is a tc rate limit on " + ifname;
}

ShapedLink::~ShapedLink() {
  if (shaped_) Unshape();
  if (lock_fd_ >= 0) {
    unlink(lock_path_.c_str());  // before the lock goes: see LockInterface
    close(lock_fd_);
  }
}

std::string ShapedLink::IfbName() const { return ("ifb-" + ifname_).substr(0, 15); }

Status ShapedLink::ShapeIngress(double bandwidth_gbps) {
  // What arrives on the interface is redirected through an ifb device, whose
  // egress the same tbf caps: the host's link is slow both ways, as a
  // retrained or erroring port is.
  const std::string ifb = IfbName();
  if (!ingress_ready_) {
    FD_RETURN_IF_ERROR(RunChecked({"ip", "link", "add", ifb, "type", "ifb"}));
    FD_RETURN_IF_ERROR(RunChecked({"ip", "link", "set", ifb, "up"}));
    FD_RETURN_IF_ERROR(RunChecked({"tc", "qdisc", "add", "dev", ifname_, "handle", "ffff:", "ingress"}));
    FD_RETURN_IF_ERROR(RunChecked({"tc", "filter", "add", "dev", ifname_, "parent", "ffff:", "protocol", "all", "u32",
                                   "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb}));
    ingress_ready_ = true;
  }
  return RunChecked(TbfCommand(ifb, bandwidth_gbps));
}

void ShapedLink::Unshape() {
  (void)RunCommand({"tc", "qdisc", "del", "dev", ifname_, "root"});
  if (ingress_ready_) {
    (void)RunCommand({"tc", "qdisc", "del", "dev", ifname_, "ingress"});  // and its filter
    (void)RunCommand({"ip", "link", "del", IfbName()});
    ingress_ready_ = false;
  }
  shaped_ = false;
}

std::string ShapedLink::fallback() const { return fallback_; }

void ShapedLink::Reshape() {
  const double bw = SeriesBandwidthGbps();
  if (bw <= 0) {
    SetBandwidthShaped(false);
    if (shaped_) Unshape();
    return;
  }
  if (!not_owner_.empty()) {
    // The interface is another agent's to shape. While a rate limit is on
    // it (a fault of the whole host, which reached that agent too), the
    // kernel already queues this agent's bytes behind it: only the latency
    // is left to wait. Otherwise (a fault of this rank alone) the bytes are
    // waited out here.
    auto root = RunCommand({"tc", "qdisc", "show", "dev", ifname_, "root"});
    const bool limited = root.ok() && root->exit_code == 0 && root->output.find("qdisc tbf") != std::string::npos;
    fallback_ = not_owner_ + (limited ? " (its rate limit holds this agent's bytes too)" : "");
    SetBandwidthShaped(limited);
    return;
  }
  if (Status st = RunChecked(TbfCommand(ifname_, bw)); !st.ok()) {
    // LinkModel waits the bytes out instead, and nothing of ours may stay
    // on the interface to slow it twice. Not logged: only the bad host
    // would say it (Capability() speaks for every host alike).
    fallback_ = st.message();
    SetBandwidthShaped(false);
    if (shaped_) Unshape();
    return;
  }
  shaped_ = true;
  fallback_.clear();
  SetBandwidthShaped(true);
  // Egress alone still slows every ring through the host.
  if (Status st = ShapeIngress(bw); !st.ok()) ingress_fallback_ = st.message();
}

}  // namespace firedrill::faults
