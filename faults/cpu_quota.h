// A CPU bandwidth limit on one process, as a thermally throttled or
// power-capped host imposes: a cgroup of the cpu controller with a quota per
// period (v1: cpu.cfs_quota_us / cpu.cfs_period_us; v2: cpu.max), which the
// process joins with all its threads. The kernel then throttles it: it
// really runs slower, its gradient buckets really launch late, and the
// cgroup's cpu.stat counts the throttled periods as a throttled device's
// counters would. Meant to stand behind the agent's compute seam where
// cgroups can be written (sleeps where not).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace firedrill::faults {

struct CpuStat {
  int64_t periods = 0;    // enforcement periods that had runnable threads
  int64_t throttled = 0;  // of those, periods the quota ran out
  double throttled_s = 0; // total time throttled
};

// The CPU bandwidth limit over the calling thread and its cgroup's
// throttling counters, as `cat cpu.max cpu.stat` (or v1's cpu.cfs_quota_us,
// cpu.cfs_period_us, cpu.stat) in its cgroup would show them: a host's
// counterpart of nvidia-smi's clock event reasons. The thread's own cgroup:
// under v1 a thread may sit in another than its process.
struct CpuLimit {
  bool v2 = false;
  int64_t quota_us = -1;  // per period; -1: no limit
  int64_t period_us = 0;  // 0 without a limit
  CpuStat stat;
  double cores() const { return quota_us > 0 && period_us > 0 ? double(quota_us) / double(period_us) : 0.0; }
};
StatusOr<CpuLimit> ReadThreadCpuLimit();
// The counters in `dir`/cpu.stat of a cgroup of the cpu controller.
StatusOr<CpuStat> ReadCpuStat(const std::string& dir);

class CpuQuota {
 public:
  // Where the cpu controller is mounted and writable: makes
  // <mount>/firedrill/<name> (unlimited). The error says why not.
  static StatusOr<std::unique_ptr<CpuQuota>> Create(const std::string& name);
  // Moves what joined back to where it was and removes the cgroup.
  ~CpuQuota();

  // Moves process `pid` (0: this one), every thread, into the cgroup.
  Status Join(pid_t pid = 0);
  // Moves the calling thread alone (cgroup v1's `tasks`; v2 needs a threaded
  // subtree, so there it is an error and the caller joins the process).
  Status JoinThisThread();
  // At most `cores` CPUs' worth of time per period (e.g. 0.25): a quota of
  // `quota_us` (at least the kernel's 1 ms) in the period that holds the
  // fraction. The default is why in cpu_quota.cc; bench/quota_bench
  // compares others.
  static constexpr int64_t kQuotaUs = 4000;
  Status Limit(double cores, int64_t quota_us = kQuotaUs);
  Status Unlimit();
  StatusOr<CpuStat> Stat() const;
  const std::string& path() const { return path_; }
  bool v2() const { return v2_; }

  // Removes empty <mount>/firedrill/* cgroups that a killed process left;
  // returns how many. One named <anything>-<pid> for a live pid is kept (it
  // may be made and not joined yet): name cgroups so.
  static int CleanLeftovers();

 private:
  CpuQuota() = default;
  std::string path_;      // our cgroup
  std::string previous_;  // where the joined process was (its cgroup.procs)
  pid_t joined_ = -1;
  bool joined_thread_ = false;  // joined_ is a thread id (v1 tasks)
  bool v2_ = false;
  int64_t period_us_ = 10000;    // while unlimited
  int64_t v1_period_us_ = -1;    // what cpu.cfs_period_us holds (v1), -1: unknown
};

}  // namespace firedrill::faults
