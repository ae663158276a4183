#include "faults/cpu_quota.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace firedrill::faults {

namespace {

namespace fs = std::filesystem;

Status WriteFile(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  if (!out) return Unavailable("cannot open " + path + ": " + std::strerror(errno));
  out << value;
  out.flush();
  if (!out) return Unavailable("writing '" + value + "' to " + path + " failed: " + std::strerror(errno));
  return Status::Ok();
}

struct Mount {
  std::string dir;   // where the hierarchy is mounted ("" if none)
  std::string root;  // which of its cgroups is mounted there ("/" normally)
  bool v2 = false;
};

// The cpu controller's mount, from /proc/self/mountinfo.
Mount CpuMount() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  Mount v2;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, dev, root, mount, opts, field;
    f >> id >> parent >> dev >> root >> mount >> opts;
    while (f >> field && field != "-") {
    }
    std::string type, source, super;
    f >> type >> source >> super;
    if (type == "cgroup") {
      std::istringstream o(super);
      std::string opt;
      while (std::getline(o, opt, ','))
        if (opt == "cpu") return Mount{mount, root, false};
    } else if (type == "cgroup2" && v2.dir.empty()) {
      std::ifstream ctl(mount + "/cgroup.controllers");
      std::string c;
      while (ctl >> c)
        if (c == "cpu") v2 = Mount{mount, root, true};
    }
  }
  return v2;
}

bool HasWord(const std::string& path, const std::string& word) {
  std::ifstream in(path);
  std::string w;
  while (in >> w)
    if (w == word) return true;
  return false;
}

// This process's (or, from /proc/thread-self/cgroup, this thread's) cgroup
// under the cpu controller, relative to the hierarchy's root.
std::string OwnCgroup(bool v2, const char* file = "/proc/self/cgroup") {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string ctrls = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (v2 && ctrls.empty()) return path;
    std::istringstream c(ctrls);
    std::string one;
    while (std::getline(c, one, ','))
      if (!v2 && one == "cpu") return path;
  }
  return "/";
}

}  // namespace

StatusOr<std::unique_ptr<CpuQuota>> CpuQuota::Create(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    return InvalidArgument("cgroup name '" + name + "' is not a plain name");
  const Mount m = CpuMount();
  if (m.dir.empty()) return Unavailable("no cgroup cpu controller is mounted");
  std::unique_ptr<CpuQuota> q(new CpuQuota());
  q->v2_ = m.v2;
  const std::string parent = m.dir + "/firedrill";
  auto fail = [&](Status st) {
    rmdir(parent.c_str());  // when it is ours and empty
    return st;
  };
  q->path_ = parent + "/" + name;
  // The parent is shared: another process's quota, going away, may remove it
  // between our steps, so it is set up again (v2's controller included)
  // whenever our cgroup cannot be made in it.
  int err = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST)
      return Unavailable("cannot create " + parent + ": " + std::strerror(errno));
    // v2: the cpu controller must be enabled down to our cgroups; enabled
    // only where it is not (the mount's own setting is the machine's).
    if (m.v2) {
      for (const std::string& dir : {m.dir, parent}) {
        if (HasWord(dir + "/cgroup.subtree_control", "cpu")) continue;
        if (Status st = WriteFile(dir + "/cgroup.subtree_control", "+cpu"); !st.ok())
          return fail(Unavailable("the cpu controller cannot be enabled for " + dir + ": " + st.message()));
      }
    }
    err = mkdir(q->path_.c_str(), 0755) == 0 || errno == EEXIST ? 0 : errno;
    if (err != ENOENT) break;
  }
  if (err != 0) return fail(Unavailable("cannot create " + q->path_ + ": " + std::strerror(err)));
  // /proc/self/cgroup names the cgroup from the hierarchy's root; the mount
  // may show only part of it (a container's).
  std::string own = OwnCgroup(m.v2);
  if (m.root != "/" && own.rfind(m.root, 0) == 0) own = own.substr(m.root.size());
  q->previous_ = m.dir + (own.empty() ? "/" : own);
  if (Status st = q->Unlimit(); !st.ok()) {
    rmdir(q->path_.c_str());
    q->path_.clear();
    return fail(st);
  }
  return q;
}

CpuQuota::~CpuQuota() {
  if (path_.empty()) return;
  (void)Unlimit();  // first: if moving back fails, the process is at least not throttled
  if (joined_ >= 0)
    (void)WriteFile(previous_ + (joined_thread_ ? "/tasks" : "/cgroup.procs"), std::to_string(joined_));
  // Empty now unless a joined process forked children into it; rmdir then
  // fails and CleanLeftovers takes it later.
  rmdir(path_.c_str());
  rmdir(fs::path(path_).parent_path().c_str());  // firedrill/, when it was the last
}

Status CpuQuota::JoinThisThread() {
  if (v2_) return FailedPrecondition("cgroup v2 moves threads only within a threaded subtree; join the process");
  // The thread's own cgroup, which may differ from its process's.
  std::ifstream in("/proc/thread-self/cgroup");
  std::string line, own = "/";
  while (std::getline(in, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::istringstream c(line.substr(a + 1, b - a - 1));
    for (std::string one; std::getline(c, one, ',');)
      if (one == "cpu") own = line.substr(b + 1);
  }
  const Mount m = CpuMount();
  if (m.root != "/" && own.rfind(m.root, 0) == 0) own = own.substr(m.root.size());
  const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
  FD_RETURN_IF_ERROR(WriteFile(path_ + "/tasks", std::to_string(tid)));
  previous_ = m.dir + (own.empty() ? "/" : own);
  joined_ = tid;
  joined_thread_ = true;
  return Status::Ok();
}

Status CpuQuota::Join(pid_t pid) {
  const pid_t p = pid == 0 ? getpid() : pid;
  FD_RETURN_IF_ERROR(WriteFile(path_ + "/cgroup.procs", std::to_string(p)));
  joined_ = p;
  return Status::Ok();
}

Status CpuQuota::Limit(double cores, int64_t quota_us) {
  if (!(cores > 0)) return InvalidArgument("a CPU limit must be > 0 cores");
  // The shortest period whose quota is still `quota_us` (the kernel's
  // ceiling is a 1 s period): a short period spreads the throttling over a
  // step's compute instead of stalling it once for most of a long period,
  // but the kernel charges a busy thread's time at its scheduler tick (4 ms
  // at this kernel's HZ=250), so a quota shorter than a tick is overspent
  // and repaid unevenly. With 1-2 ms quotas a core's limit slowed a step
  // 1.8x and 0.8 of a core 1.5-2.1x (a governor steering on that ran away:
  // CI saw 7.9x asked 3x, on 1.07 cores); with 4 ms each limit from 0.2 to
  // 1 core lands within 11% of its nominal 1/cores, with 8 ms up to 20%
  // short (bench/RESULTS.md, "CPU quota periods").
  const double q = static_cast<double>(std::max<int64_t>(1000, quota_us));
  const int64_t period = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(q / cores)), 1000, 1000000);
  const int64_t quota = std::max<int64_t>(1000, static_cast<int64_t>(std::llround(cores * period)));
  if (v2_) return WriteFile(path_ + "/cpu.max", std::to_string(quota) + " " + std::to_string(period));
  if (period != v1_period_us_) {
    FD_RETURN_IF_ERROR(WriteFile(path_ + "/cpu.cfs_period_us", std::to_string(period)));
    v1_period_us_ = period;
  }
  return WriteFile(path_ + "/cpu.cfs_quota_us", std::to_string(quota));
}

Status CpuQuota::Unlimit() {
  if (v2_) return WriteFile(path_ + "/cpu.max", "max " + std::to_string(period_us_));
  FD_RETURN_IF_ERROR(WriteFile(path_ + "/cpu.cfs_quota_us", "-1"));
  FD_RETURN_IF_ERROR(WriteFile(path_ + "/cpu.cfs_period_us", std::to_string(period_us_)));
  v1_period_us_ = period_us_;
  return Status::Ok();
}

StatusOr<CpuStat> CpuQuota::Stat() const { return ReadCpuStat(path_); }

StatusOr<CpuLimit> ReadThreadCpuLimit() {
  static const Mount m = CpuMount();  // read once: trainers call this every step
  if (m.dir.empty()) return Unavailable("no cgroup cpu controller is mounted");
  std::string rel = OwnCgroup(m.v2, "/proc/thread-self/cgroup");
  // A mount of a sub-hierarchy (a container's) shows paths below its root.
  if (m.root != "/" && rel.rfind(m.root, 0) == 0) rel = rel.substr(m.root.size());
  const std::string dir = m.dir + (rel == "/" ? "" : rel);
  CpuLimit l;
  l.v2 = m.v2;
  if (m.v2) {
    std::ifstream max(dir + "/cpu.max");  // "max 100000" or "25000 100000"; absent at the root
    std::string quota;
    if (max >> quota >> l.period_us && quota != "max") l.quota_us = std::atoll(quota.c_str());
  } else {
    std::ifstream quota(dir + "/cpu.cfs_quota_us"), period(dir + "/cpu.cfs_period_us");
    quota >> l.quota_us;
    period >> l.period_us;
    if (l.quota_us <= 0) l.quota_us = -1;
  }
  // The period means nothing without a quota, and ours differs from the
  // kernel's default: shown, it would mark a rank that was ever slowed.
  if (l.quota_us <= 0) l.period_us = 0;
  auto st = ReadCpuStat(dir);
  // Without the path: it would name the rank's cgroup.
  if (!st.ok()) return Unavailable("cannot read cpu.stat of the training thread's cgroup");
  l.stat = *st;
  return l;
}

StatusOr<CpuStat> ReadCpuStat(const std::string& dir) {
  std::ifstream in(dir + "/cpu.stat");
  if (!in) return Unavailable("cannot read " + dir + "/cpu.stat");
  CpuStat s;
  std::string key;
  int64_t v = 0;
  while (in >> key >> v) {
    if (key == "nr_periods") s.periods = v;
    if (key == "nr_throttled") s.throttled = v;
    if (key == "throttled_time") s.throttled_s = v / 1e9;  // v1: ns
    if (key == "throttled_usec") s.throttled_s = v / 1e6;  // v2
  }
  return s;
}

namespace {

// When process `pid` started (seconds since the epoch; 0 if unknown), from
// its start in clock ticks since boot (/proc/PID/stat) and the boot time
// (/proc/stat btime, whole seconds: good to about a second).
double ProcessStartUnix(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const auto close = line.rfind(')');  // the command may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream f(line.substr(close + 2));
  std::string field;
  for (int i = 3; i < 22 && f >> field; ++i) {
  }
  long long ticks = 0;
  if (!(f >> ticks)) return 0;  // field 22: starttime
  std::ifstream boot("/proc/stat");
  std::string key;
  long long btime = 0;
  while (boot >> key) {
    if (key == "btime") {
      boot >> btime;
      break;
    }
    std::getline(boot, line);
  }
  const long hz = sysconf(_SC_CLK_TCK);
  return btime > 0 && hz > 0 ? double(btime) + double(ticks) / double(hz) : 0;
}

// Whether the live process `pid` can be the one that made `dir`: a process
// that started after the directory last changed reuses a dead owner's pid.
bool MayOwn(pid_t pid, const fs::path& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return true;
  const double started = ProcessStartUnix(pid);
  return started == 0 || started <= double(st.st_ctim.tv_sec) + 2.0;  // 2 s: btime's rounding
}

}  // namespace

int CpuQuota::CleanLeftovers() {
  const Mount m = CpuMount();
  if (m.dir.empty()) return 0;
  std::error_code ec;
  int n = 0;
  // rmdir(2) removes only cgroups with no process left in them; one named
  // for a live process (<name>-<pid>) may be about to be joined: left alone,
  // unless that process started after the cgroup was made (a reused pid).
  static const std::regex owned(".*-([0-9]{1,10})");
  for (const auto& e : fs::directory_iterator(m.dir + "/firedrill", ec)) {
    if (!e.is_directory()) continue;
    std::smatch pid;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, pid, owned)) {
      const auto p = static_cast<pid_t>(std::stoll(pid[1].str()));
      if ((kill(p, 0) == 0 || errno == EPERM) && MayOwn(p, e.path())) continue;
    }
    if (rmdir(e.path().c_str()) == 0) ++n;
  }
  rmdir((m.dir + "/firedrill").c_str());
  return n;
}

}  // namespace firedrill::faults
