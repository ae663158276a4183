// The CPU quota a throttled host runs under (faults/cpu_quota.h), on the
// real kernel: a process in the cgroup gets a fraction of the CPU time of
// the same loop outside it (a ratio in one test, against the same loop),
// the cgroup counts the throttled periods, and nothing is left behind.
// Skipped, with the reason, where cgroups cannot be written.
#include "faults/cpu_quota.h"
#include "faults/throttled_compute.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

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

// Runs `body` in a forked child (a process of its own, so its quota is its
// own) and returns what it returned; empty if the child failed.
std::string InChild(const std::function<std::string()>& body) {
  int out[2];
  if (pipe(out) != 0) return "";
  const pid_t pid = fork();
  if (pid < 0) return "";
  if (pid == 0) {
    close(out[0]);
    const std::string r = body();  // its objects are gone before _exit
    (void)!write(out[1], r.data(), r.size());
    _exit(0);
  }
  close(out[1]);
  char buf[256] = {};
  (void)!read(out[0], buf, sizeof buf - 1);
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? std::string(buf) : "";
}

// One "step": `units` of the same CPU work (one is tens of milliseconds,
// as a training step's compute is; a quota acts per period, a few
// milliseconds), in wall time and the thread's CPU time.
struct Work {
  double wall_ms = 0, cpu_ms = 0;
};
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
}
Work DoWork(double units = 1.0) {
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = ThreadCpuMs();
  volatile uint64_t x = 0;
  const auto n = static_cast<int64_t>(units * 1e8);
  for (int64_t i = 0; i < n; ++i) x = x + i;
  return {std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
          ThreadCpuMs() - c0};
}

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A straggler on the quota (faults/throttled_compute.h): a child runs
// steps of fixed CPU work, healthy, then slowed 3x; the governor steers its
// quota until a step takes about three times the healthy one. Without the
// quota the steps would stay as they were (the margin fails then: the child
// is a process of its own, nothing sleeps).
struct Straggler {
  double healthy = 0, slowed = 0, cores = 0;
  long long throttled = 0;
  bool quota_ok = false;
  std::string said;
  // The governor's outcome: the slowdown near the 3x asked, on less than a core.
  bool Converged() const {
    return quota_ok && slowed > 2.0 * healthy && slowed < 4.5 * healthy && throttled > 0 && cores > 0 && cores <= 1.0;
  }
};

Straggler SlowedThreeTimes() {
  Straggler r;
  r.said = InChild([] {
    ThrottledCompute c("gov-" + std::to_string(getpid()));
    std::vector<double> healthy, slowed;
    for (int step = 0; step < 26; ++step) {
      if (step == 5) c.Slow(0, 3.0);
      const Work w = DoWork();
      const double ms = w.wall_ms;
      c.OnStep(w.wall_ms, w.cpu_ms);
      if (step >= 1 && step < 5) healthy.push_back(ms);
      if (step >= 16) slowed.push_back(ms);
    }
    char buf[256];
    std::snprintf(buf, sizeof buf, "%f %f %lld %f %d", MedianOf(healthy), MedianOf(slowed),
                  static_cast<long long>(c.Stat().throttled), c.limit_cores(), c.fallback().empty() ? 1 : 0);
    return std::string(buf);
  });
  int ok = 0;
  if (std::sscanf(r.said.c_str(), "%lf %lf %lld %lf %d", &r.healthy, &r.slowed, &r.throttled, &r.cores, &ok) != 5)
    r.said = "the child said '" + r.said + "'";
  r.quota_ok = ok == 1;
  return r;
}

// Up to three tries: this VM's host now and then stalls the vCPUs for
// several healthy steps at a time (a 34 ms step measured 34-166 ms with
// no quota at all), and a stall while the healthy time is measured skews
// the governor's target. Each try is recorded; one that converges passes.
// A missing mechanism fails all three: without the quota the steps stay
// at 1x, and a governor that runs away (CI once saw 7.9x on 1.07 cores,
// with 1 ms quotas) lands outside the bounds each time.
TEST(ThrottledCompute, TheQuotaMakesAStepTakeTheSlowdownTimesItsHealthyTime) {
  if (auto q = CpuQuota::Create("probe-" + std::to_string(getpid())); !q.ok())
    GTEST_SKIP() << "cgroups cannot be written here: " << q.status().message();
  Straggler r;
  std::string tries;
  for (int attempt = 1; attempt <= 3 && !r.Converged(); ++attempt) {
    r = SlowedThreeTimes();
    ASSERT_TRUE(r.quota_ok) << "the quota fell back to sleeping; " << r.said;
    char line[160];
    std::snprintf(line, sizeof line, "try %d: %.1f ms healthy, %.1f ms slowed (%.2fx), %.3f cores, %lld throttled; ",
                  attempt, r.healthy, r.slowed, r.slowed / r.healthy, r.cores, r.throttled);
    tries += line;
    RecordProperty("try" + std::to_string(attempt) + "_slowed_over_healthy", std::to_string(r.slowed / r.healthy));
    RecordProperty("try" + std::to_string(attempt) + "_limit_cores", std::to_string(r.cores));
  }
  // The limit the governor settles on is not held to a third of a core
  // (the kernel's enforcement is coarser than the nominal fraction), only
  // to less than one: a limit of a core or more cannot slow one thread.
  // The slowdown and the throttled periods are the mechanism's signature.
  EXPECT_TRUE(r.Converged()) << "asked for 3x on under a core: " << tries;
}

// A straggler whose steps do different amounts of work (a drill's batches
// of variable-length text, bucketed by length: one step 4 times another),
// slowed from its first step, as a verification run arms a host's fault,
// and its first steps the short ones. Each kind of step must take about
// three times its own healthy time: a governor that steered the wall time
// to three times the first steps' (the short ones') left the long steps,
// which carry the job's time, unslowed (1x; a drill's wrong fix passed on
// it), and one that steered them all to one time would slow the short
// steps far more than 3x.
struct MixedSteps {
  double healthy_long = 0, healthy_short = 0, slowed_long = 0, slowed_short = 0;
  bool quota_ok = false;
  std::string said;
  bool Slowed() const {
    return quota_ok && healthy_long > 0 && healthy_short > 0 && slowed_long > 2.0 * healthy_long &&
           slowed_long < 4.5 * healthy_long && slowed_short > 1.5 * healthy_short &&
           slowed_short < 6.0 * healthy_short;
  }
};

MixedSteps SlowedMixed() {
  MixedSteps r;
  r.said = InChild([] {
    // The healthy times first, with no governor at all.
    std::vector<double> hl, hs, sl, ss;
    for (int i = 0; i < 6; ++i) {
      hl.push_back(DoWork(1.0).wall_ms);
      hs.push_back(DoWork(0.25).wall_ms);
    }
    ThrottledCompute c("mixed-" + std::to_string(getpid()));
    c.Slow(0, 3.0);
    // Four short steps (the governor measures on the first three after
    // its warm-up step), then long and short ones mixed. Each kind's mean
    // over many steps, not its median: the governor steers several steps
    // together, and a short step may run whole inside one quota period.
    for (int step = 0; step < 64; ++step) {
      const bool is_long = step >= 4 && step % 3 != 0;
      const Work w = DoWork(is_long ? 1.0 : 0.25);
      c.OnStep(w.wall_ms, w.cpu_ms);
      if (step >= 16) (is_long ? sl : ss).push_back(w.wall_ms);
    }
    const auto mean = [](const std::vector<double>& v) {
      double sum = 0;
      for (double x : v) sum += x;
      return v.empty() ? 0 : sum / static_cast<double>(v.size());
    };
    char buf[256];
    std::snprintf(buf, sizeof buf, "%f %f %f %f %d", MedianOf(hl), MedianOf(hs), mean(sl), mean(ss),
                  c.fallback().empty() ? 1 : 0);
    return std::string(buf);
  });
  int ok = 0;
  if (std::sscanf(r.said.c_str(), "%lf %lf %lf %lf %d", &r.healthy_long, &r.healthy_short, &r.slowed_long,
                  &r.slowed_short, &ok) != 5)
    r.said = "the child said '" + r.said + "'";
  r.quota_ok = ok == 1;
  return r;
}

TEST(ThrottledCompute, StepsOfDifferentWorkEachTakeTheSlowdownTimesTheirHealthyTime) {
  if (auto q = CpuQuota::Create("probe-" + std::to_string(getpid())); !q.ok())
    GTEST_SKIP() << "cgroups cannot be written here: " << q.status().message();
  // Up to three tries, as above (each recorded).
  MixedSteps r;
  std::string tries;
  for (int attempt = 1; attempt <= 3 && !r.Slowed(); ++attempt) {
    r = SlowedMixed();
    ASSERT_TRUE(r.quota_ok) << "the quota fell back to sleeping; " << r.said;
    char line[200];
    std::snprintf(line, sizeof line, "try %d: long steps %.2fx their healthy time, short ones %.2fx; ", attempt,
                  r.slowed_long / r.healthy_long, r.slowed_short / r.healthy_short);
    tries += line;
    const std::string n = "try" + std::to_string(attempt);
    RecordProperty(n + "_long_over_healthy", std::to_string(r.slowed_long / r.healthy_long));
    RecordProperty(n + "_short_over_healthy", std::to_string(r.slowed_short / r.healthy_short));
  }
  EXPECT_TRUE(r.Slowed()) << "asked for 3x: " << tries;
}

// Totals over as many steps, healthy (or unslowed) and slowed, from a child.
struct Totals {
  double healthy_ms = 0, slowed_ms = 0;
  bool quota_ok = false;
  std::string said;
  double Ratio() const { return healthy_ms > 0 ? slowed_ms / healthy_ms : 0; }
  // 1.8x asked: what the job feels is the total.
  bool Slowed() const { return quota_ok && Ratio() > 1.5 && Ratio() < 2.3; }
};

Totals TotalsInChild(const std::function<std::string()>& body) {
  Totals r;
  r.said = InChild(body);
  int ok = 0;
  if (std::sscanf(r.said.c_str(), "%lf %lf %d", &r.healthy_ms, &r.slowed_ms, &ok) != 3)
    r.said = "the child said '" + r.said + "'";
  r.quota_ok = ok == 1;
  return r;
}

std::string SayTotals(double healthy, double slowed, const ThrottledCompute& c) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%f %f %d", healthy, slowed, c.fallback().empty() ? 1 : 0);
  return buf;
}

// Up to three tries (each recorded; see above), `name` in the properties.
void ExpectSlowed(const std::function<Totals()>& play, const char* what) {
  Totals r;
  std::string tries;
  for (int attempt = 1; attempt <= 3 && !r.Slowed(); ++attempt) {
    r = play();
    ASSERT_TRUE(r.quota_ok) << "the quota fell back to sleeping; " << r.said;
    char line[160];
    std::snprintf(line, sizeof line, "try %d: %.0f ms %s, %.0f ms slowed (%.2fx); ", attempt, r.healthy_ms, what,
                  r.slowed_ms, r.Ratio());
    tries += line;
    testing::Test::RecordProperty("try" + std::to_string(attempt) + "_slowed_over_" + what, std::to_string(r.Ratio()));
  }
  EXPECT_TRUE(r.Slowed()) << "asked for 1.8x: " << tries;
}

// A straggler whose steps are shorter than the quota's bursts (a drill's
// small MLP: about 4 ms of compute a step, against a 4 ms quota): one step
// runs whole inside its quota, the next waits out a period, so step by step
// the slowdown reads 1 or several times the one asked. What the job feels
// is the total: the slowed steps together must take about the slowdown
// times their healthy total. A governor that steered on the median step
// read the unthrottled steps and left the limit wandering between 0.055
// and 0.61 cores (4 ms steps asked 1.8x took 2.6x-6.6x, alone here).
TEST(ThrottledCompute, ShortStepsTogetherTakeTheSlowdownTimesTheirHealthyTotal) {
  if (auto q = CpuQuota::Create("probe-" + std::to_string(getpid())); !q.ok())
    GTEST_SKIP() << "cgroups cannot be written here: " << q.status().message();
  ExpectSlowed(
      [] {
        return TotalsInChild([] {
          constexpr double kUnits = 0.1;  // about 4 ms here
          ThrottledCompute c("short-" + std::to_string(getpid()));
          double healthy = 0, slowed = 0;
          for (int step = 0; step < 50; ++step) {
            const Work w = DoWork(kUnits);
            c.OnStep(w.wall_ms, w.cpu_ms);
            if (step >= 10) healthy += w.wall_ms;  // 40 steps
          }
          c.Slow(0, 1.8);
          for (int step = 0; step < 120; ++step) {
            const Work w = DoWork(kUnits);
            c.OnStep(w.wall_ms, w.cpu_ms);
            if (step >= 80) slowed += w.wall_ms;  // 40 steps
          }
          return SayTotals(healthy, slowed, c);
        });
      },
      "healthy");
}

// A straggler and a healthy peer on one core (a drill's ranks share the
// host's cores), the straggler's slowdown taken hold while it was alone.
// The peer reports its compute's stretch, as ranks do with their gradients
// (OnPeers); slowed, the straggler's step must take about the slowdown
// times the peer's, over the same seconds. A governor that steered to the
// slowdown times the straggler's own stretch measured while it was alone
// (1.0) read the sharing as the slowdown: the straggler got more of the
// core than its peer (thermal-throttle's straggler was barely slower than
// its peers under the burner, and its wrong fix verified).
TEST(ThrottledCompute, AStragglerIsTheSlowdownTimesSlowerThanAPeerSharingItsCore) {
  if (auto q = CpuQuota::Create("probe-" + std::to_string(getpid())); !q.ok())
    GTEST_SKIP() << "cgroups cannot be written here: " << q.status().message();
  ExpectSlowed(
      [] {
        return TotalsInChild([] {
          // One core (the first this process may use), for the straggler and, later, its peer.
          cpu_set_t allowed, one;
          if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return std::string("sched_getaffinity failed");
          int cpu = 0;
          while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed)) ++cpu;
          CPU_ZERO(&one);
          CPU_SET(cpu, &one);
          if (sched_setaffinity(0, sizeof one, &one) != 0) return std::string("sched_setaffinity failed");
          struct Shared {
            std::atomic<double> stretch{0};
            std::atomic<int64_t> steps{0};
            std::atomic<bool> go{false}, stop{false};
          };
          // Shared across fork: only lock-free atomics work there.
          static_assert(std::atomic<double>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free);
          void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
          if (mem == MAP_FAILED) return std::string("mmap failed");
          auto* shared = new (mem) Shared;
          constexpr double kUnits = 0.1;  // about 4 ms here, as a drill's step
          // Forked before the straggler's thread joins its quota's cgroup (a
          // child starts in its parent's).
          const pid_t peer = fork();
          if (peer == 0) {  // the healthy peer: the same steps once told, bounded (30 s)
            const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
            while (!shared->go.load() && std::chrono::steady_clock::now() < end) usleep(1000);
            std::deque<Work> last;
            while (!shared->stop.load() && std::chrono::steady_clock::now() < end) {
              last.push_back(DoWork(kUnits));
              if (last.size() > 5) last.pop_front();
              double wall = 0, cpu = 0;
              for (const Work& w : last) wall += w.wall_ms, cpu += w.cpu_ms;
              shared->stretch.store(cpu > 0 ? wall / cpu : 0);
              shared->steps.fetch_add(1);
            }
            _exit(0);
          }
          ThrottledCompute c("peers-" + std::to_string(getpid()));
          for (int step = 0; step < 12; ++step) {  // alone on the core: its own reference, 1.0
            const Work w = DoWork(kUnits);
            c.OnStep(w.wall_ms, w.cpu_ms);
          }
          c.Slow(0, 1.8);
          shared->go.store(true);
          const auto step_until = [&](std::chrono::steady_clock::time_point until) {
            int64_t n = 0;
            while (std::chrono::steady_clock::now() < until) {
              const Work w = DoWork(kUnits);
              c.OnPeers(shared->stretch.load());
              c.OnStep(w.wall_ms, w.cpu_ms);
              ++n;
            }
            return n;
          };
          const auto t0 = std::chrono::steady_clock::now();
          step_until(t0 + std::chrono::milliseconds(1500));  // the governor finds the peer
          const int64_t peer0 = shared->steps.load();
          const auto t1 = std::chrono::steady_clock::now();
          const int64_t own = step_until(t1 + std::chrono::milliseconds(2500));
          const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
          const int64_t peers = shared->steps.load() - peer0;
          shared->stop.store(true);
          waitpid(peer, nullptr, 0);
          munmap(mem, sizeof(Shared));
          // A step's time, each: the peer's (healthy) and the straggler's.
          return SayTotals(peers > 0 ? ms / peers : 0, own > 0 ? ms / own : 0, c);
        });
      },
      "peer");
}

// A flapping straggler (faults/runner.h): slowed, recovered, slowed again.
// While recovered its steps are healthy again; slowed again, the quota
// resumes where it was instead of measuring from scratch.
struct Flapping {
  double healthy = 0, on1 = 0, off = 0, on2 = 0;
  std::string said;
  // Slowed and slowed again against the unslowed steps (the healthy ones,
  // or the recovered ones where the host stalled the healthy phase: under
  // ASan a healthy phase once read 1.5x the recovered one), and recovered
  // clearly faster than slowed. Asked 3x; a governor that does not act
  // reads 1x, one that never lifts the quota reads off as slow as on1.
  bool Flapped() const {
    const double unslowed = std::min(healthy, off);
    return unslowed > 0 && on1 > 1.5 * unslowed && on2 > 1.3 * unslowed && off < on1 / 1.5;
  }
};

Flapping FlapOnce() {
  Flapping r;
  r.said = InChild([] {
    ThrottledCompute c("flap-" + std::to_string(getpid()));
    std::vector<double> healthy, on1, off, on2;
    for (int step = 0; step < 48; ++step) {
      if (step == 9 || step == 34) c.Slow(0, 3.0);
      if (step == 26) c.Restore(0);
      const Work w = DoWork();
      const double ms = w.wall_ms;
      c.OnStep(w.wall_ms, w.cpu_ms);
      if (step >= 1 && step < 9) healthy.push_back(ms);
      if (step >= 18 && step < 26) on1.push_back(ms);
      if (step >= 27 && step < 34) off.push_back(ms);
      if (step >= 35) on2.push_back(ms);  // from its first step back
    }
    char buf[256];
    std::snprintf(buf, sizeof buf, "%f %f %f %f", MedianOf(healthy), MedianOf(on1), MedianOf(off), MedianOf(on2));
    return std::string(buf);
  });
  if (std::sscanf(r.said.c_str(), "%lf %lf %lf %lf", &r.healthy, &r.on1, &r.off, &r.on2) != 4)
    r.said = "the child said '" + r.said + "'";
  return r;
}

TEST(ThrottledCompute, AFlappingSlowdownLiftsAndResumes) {
  if (auto q = CpuQuota::Create("probe-" + std::to_string(getpid())); !q.ok())
    GTEST_SKIP() << "cgroups cannot be written here: " << q.status().message();
  // Up to three tries, as above. Measured (1 ms quotas) on1 2.9-5.4x and
  // on2 2.1-3.0x, with one on2 of 1.35x in about twenty runs; the bounds sit
  // below the lowest seen, and well above the 1x of a governor that does
  // not act.
  Flapping r;
  std::string tries;
  for (int attempt = 1; attempt <= 3 && !r.Flapped(); ++attempt) {
    r = FlapOnce();
    char line[200];
    std::snprintf(line, sizeof line, "try %d: healthy %.1f ms, slowed %.1f, recovered %.1f, slowed again %.1f; ",
                  attempt, r.healthy, r.on1, r.off, r.on2);
    tries += line;
    const std::string n = "try" + std::to_string(attempt);
    RecordProperty(n + "_on_over_healthy", std::to_string(r.on1 / r.healthy));
    RecordProperty(n + "_off_over_healthy", std::to_string(r.off / r.healthy));
    RecordProperty(n + "_again_over_healthy", std::to_string(r.on2 / r.healthy));
  }
  EXPECT_TRUE(r.Flapped()) << tries;
}

// Two slowdowns on one host at once (a hot device and a power cap): the
// governor steers to their product, and when one recovers, back to the
// other's alone.
struct TwoSlowdowns {
  double healthy = 0, one = 0, both = 0, other = 0, t1 = 0, t2 = 0, t3 = 0;
  bool quota_ok = false;
  std::string said;
  // Slowed (2x asked: one measured 1.81-2.14x healthy), compounded (both
  // clearly slower than one alone) and recovered (the other alone clearly
  // faster than both: other/both measured 0.23-0.63). A governor that
  // ignored the second slowdown would measure both/one near 1, one that
  // missed the recovery other/both near 1.
  bool Steered() const { return quota_ok && one > 1.4 * healthy && both > 1.25 * one && other < 0.85 * both; }
};

TwoSlowdowns SlowedTwice() {
  TwoSlowdowns r;
  r.said = InChild([] {
    ThrottledCompute c("two-" + std::to_string(getpid()));
    std::vector<double> healthy, one, both, other;
    double target_one = 0, target_both = 0, target_other = 0;
    // Eight healthy steps (the governor's healthy time is their median, so
    // one step stalled by the host does not move it), then phases of 16
    // steps (four rounds of the governor), the last 5 of each measured.
    for (int step = 0; step < 57; ++step) {
      if (step == 9) c.Slow(0, 2.0);
      if (step == 25) c.Slow(1, 2.0);
      if (step == 41) c.Restore(0);
      const Work w = DoWork();
      const double ms = w.wall_ms;
      c.OnStep(w.wall_ms, w.cpu_ms);
      if (step >= 1 && step < 9) healthy.push_back(ms);
      if (step >= 20 && step < 25) one.push_back(ms);
      if (step >= 36 && step < 41) both.push_back(ms);
      if (step >= 52) other.push_back(ms);
      if (step == 24) target_one = c.factor();
      if (step == 40) target_both = c.factor();
      if (step == 56) target_other = c.factor();
    }
    char buf[320];
    std::snprintf(buf, sizeof buf, "%f %f %f %f %d %f %f %f", MedianOf(healthy), MedianOf(one), MedianOf(both),
                  MedianOf(other), c.fallback().empty() ? 1 : 0, target_one, target_both, target_other);
    return std::string(buf);
  });
  int ok = 0;
  if (std::sscanf(r.said.c_str(), "%lf %lf %lf %lf %d %lf %lf %lf", &r.healthy, &r.one, &r.both, &r.other, &ok,
                  &r.t1, &r.t2, &r.t3) != 8)
    r.said = "the child said '" + r.said + "'";
  r.quota_ok = ok == 1;
  return r;
}

TEST(ThrottledCompute, TwoSlowdownsAtOnceCompoundAndOneRecovers) {
  if (auto q = CpuQuota::Create("probe-" + std::to_string(getpid())); !q.ok())
    GTEST_SKIP() << "cgroups cannot be written here: " << q.status().message();
  // Up to four tries (each is recorded): three phases to steer through,
  // each a chance for the host to stall the vCPUs. Measured with 4 ms
  // quotas over 11 runs: a try passed 7 times in 9 on a noisy afternoon
  // (one 1.07-2.18x healthy, both 1.42-3.07x one, other/both 0.48-1.06);
  // with the 1 ms quotas before, both/one ranged 0.74-3.8 and nothing was
  // asserted.
  TwoSlowdowns r;
  std::string tries;
  for (int attempt = 1; attempt <= 4 && !r.Steered(); ++attempt) {
    r = SlowedTwice();
    ASSERT_TRUE(r.quota_ok) << "the quota fell back to sleeping; " << r.said;
    // What the governor steers the one quota to: the product of the
    // slowdowns holding it, and the other's alone once one recovers.
    EXPECT_DOUBLE_EQ(r.t1, 2.0);
    EXPECT_DOUBLE_EQ(r.t2, 4.0) << "2x on top of 2x";
    EXPECT_DOUBLE_EQ(r.t3, 2.0) << "the other slowdown holds alone";
    char line[200];
    std::snprintf(line, sizeof line, "try %d: one %.2fx healthy, both %.2fx one, the other alone %.2fx one; ",
                  attempt, r.one / r.healthy, r.both / r.one, r.other / r.one);
    tries += line;
    const std::string n = "try" + std::to_string(attempt);
    RecordProperty(n + "_one_over_healthy", std::to_string(r.one / r.healthy));
    RecordProperty(n + "_both_over_one", std::to_string(r.both / r.one));
    RecordProperty(n + "_other_over_one", std::to_string(r.other / r.one));
  }
  EXPECT_TRUE(r.Steered()) << tries;
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
  // One named for a live process may be about to be joined: it stays.
  auto live = CpuQuota::Create("live-" + std::to_string(getpid()));
  ASSERT_TRUE(live.ok()) << live.status().message();
  EXPECT_GE(CpuQuota::CleanLeftovers(), 1);
  EXPECT_FALSE(std::filesystem::exists(path)) << "the killed process's";
  EXPECT_TRUE(std::filesystem::exists((*live)->path())) << "a live process's";
}

// What `firedrill node` shows comes from here: the limit over the calling
// thread and its cgroup's counters. A thread that joined a quota reads the
// quota and counts throttled periods; another thread of the same process
// (v1: threads join alone) reads no limit.
TEST(CpuQuota, AThreadReadsTheLimitAndCountersOfItsOwnCgroup) {
  auto q = CpuQuota::Create("probe-" + std::to_string(getpid()));
  if (!q.ok()) GTEST_SKIP() << "cgroups cannot be written here: " << q.status().message();
  const bool v2 = (*q)->v2();
  q->reset();
  const std::string got = InChild([v2] {
    auto before = ReadThreadCpuLimit();
    // A thread that exists before the join (a new thread starts in its
    // creator's cgroup): it reads once the training thread has joined.
    std::promise<void> joined_promise;
    StatusOr<CpuLimit> other = InvalidArgument("not read");
    std::thread reader([&, joined = joined_promise.get_future()]() mutable {
      joined.wait();
      other = ReadThreadCpuLimit();
    });
    auto c = CpuQuota::Create("probe-" + std::to_string(getpid()));
    Status joined = !before.ok() || !c.ok()      ? Internal("setup failed")
                    : !(*c)->Limit(0.2).ok() ? Internal("limit failed")
                    : v2                     ? (*c)->Join()
                                             : (*c)->JoinThisThread();
    joined_promise.set_value();
    reader.join();
    if (!joined.ok()) return joined.message();
    auto start = ReadThreadCpuLimit();  // the new cgroup's counters, before any work
    DoWork();
    auto after = ReadThreadCpuLimit();
    if (!start.ok()) return std::string("read failed");
    if (!after.ok() || !other.ok()) return std::string("read failed");
    char buf[200];
    std::snprintf(buf, sizeof buf, "%lld %.3f %lld %lld %.3f %lld", static_cast<long long>(before->quota_us),
                  after->cores(), static_cast<long long>(after->stat.throttled - start->stat.throttled),
                  static_cast<long long>(after->stat.periods), after->stat.throttled_s,
                  static_cast<long long>(other->quota_us));
    return std::string(buf);
  });
  long long before_quota = 0, throttled = 0, periods = 0, other_quota = 0;
  double cores = 0, throttled_s = 0;
  ASSERT_EQ(std::sscanf(got.c_str(), "%lld %lf %lld %lld %lf %lld", &before_quota, &cores, &throttled, &periods,
                        &throttled_s, &other_quota), 6)
      << got;
  if (before_quota != -1) std::printf("this test runs under a CPU limit of its own (quota %lld us)\n", before_quota);
  EXPECT_NEAR(cores, 0.2, 0.01);
  EXPECT_GT(throttled, 0) << "a busy thread under 0.2 CPU is throttled";
  EXPECT_GE(periods, throttled);
  EXPECT_GT(throttled_s, 0);
  if (!v2) {
    EXPECT_EQ(other_quota, before_quota) << "the thread that did not join keeps the limit it had";
  }
}

TEST(CpuQuota, RefusesNamesThatAreNotPlain) {
  EXPECT_FALSE(CpuQuota::Create("../x").ok());
  EXPECT_FALSE(CpuQuota::Create("").ok());
}

}  // namespace
}  // namespace firedrill::faults
