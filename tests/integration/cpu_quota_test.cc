// The CPU quota a throttled host runs under (faults/cpu_quota.h), on the
// real kernel: a process in the cgroup gets a fraction of the CPU time of
// the same loop outside it (a ratio in one test, against the same loop),
// the cgroup counts the throttled periods, and nothing is left behind.
// Skipped, with the reason, where cgroups cannot be written.
#include "faults/cpu_quota.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

namespace firedrill::faults {
namespace {

// Forks a child that, once released, spins for `wall_ms` of wall time;
// `before_go` runs with the child's pid first. Returns the child's CPU
// seconds.
template <typename F>
double SpinChild(int wall_ms, F before_go) {
  int go[2];
  EXPECT_EQ(pipe(go), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    char c;
    close(go[1]);
    if (read(go[0], &c, 1) != 1) _exit(2);
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(wall_ms);
    volatile uint64_t x = 0;
    while (std::chrono::steady_clock::now() < end)
      for (int i = 0; i < 10000; ++i) x = x + i;
    _exit(0);
  }
  close(go[0]);
  before_go(pid);
  (void)!write(go[1], "g", 1);
  close(go[1]);
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

TEST(CpuQuota, AThrottledProcessGetsItsQuotaAndTheCgroupCountsIt) {
  auto q = CpuQuota::Create("test-" + std::to_string(getpid()));
  if (!q.ok()) GTEST_SKIP() << "cgroups cannot be written here: " << q.status().message();
  const std::string path = (*q)->path();
  const double free_cpu = SpinChild(400, [](pid_t) {});
  ASSERT_TRUE((*q)->Limit(0.1).ok());
  const double limited = SpinChild(400, [&](pid_t pid) { ASSERT_TRUE((*q)->Join(pid).ok()); });
  RecordProperty("limited_over_free", std::to_string(limited / free_cpu));
  EXPECT_LT(limited, 0.6 * free_cpu) << "0.1 core against an unlimited loop: " << limited << " s vs " << free_cpu
                                     << " s of CPU";
  auto st = (*q)->Stat();
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_GT(st->throttled, 0) << "the kernel throttled it";
  EXPECT_GT(st->throttled_s, 0.0);
  ASSERT_TRUE((*q)->Unlimit().ok());
  if (!(*q)->v2()) {
    std::ifstream quota(path + "/cpu.cfs_quota_us");
    int64_t v = 0;
    quota >> v;
    EXPECT_EQ(v, -1) << "recovered: no quota";
  }
  q->reset();
  EXPECT_FALSE(std::filesystem::exists(path)) << "the cgroup is removed with its owner";
}

TEST(CpuQuota, LeftoversOfAKilledProcessAreRemoved) {
  if (auto q = CpuQuota::Create("probe-" + std::to_string(getpid())); !q.ok())
    GTEST_SKIP() << "cgroups cannot be written here: " << q.status().message();
  // A child makes a cgroup and joins it, then dies without cleaning up.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto q = CpuQuota::Create("leak-" + std::to_string(getpid()));
    const bool ok = q.ok() && (*q)->Join().ok();
    const std::string path = ok ? (*q)->path() : "";
    (void)!write(ready[1], path.c_str(), path.size());
    _exit(ok ? 0 : 1);  // no destructors: what a SIGKILL leaves
  }
  close(ready[1]);
  char buf[512] = {};
  (void)!read(ready[0], buf, sizeof buf - 1);
  close(ready[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string path = buf;
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  EXPECT_GE(CpuQuota::CleanLeftovers(), 1);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(CpuQuota, RefusesNamesThatAreNotPlain) {
  EXPECT_FALSE(CpuQuota::Create("../x").ok());
  EXPECT_FALSE(CpuQuota::Create("").ok());
}

}  // namespace
}  // namespace firedrill::faults
