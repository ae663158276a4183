// How close a CPU quota's slowdown comes to its nominal 1/cores, by the
// quota per period (faults/cpu_quota.h): the thread that runs this joins a
// cgroup of its own and runs steps of fixed CPU work, each throttled step
// followed by an unthrottled one, so the ratio of their medians compares
// the same work side by side in one run, whatever the host's speed does
// meanwhile. Results in bench/RESULTS.md ("CPU quota periods").
//
//   build/bin/quota_bench --rounds 9
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "faults/cpu_quota.h"

namespace {

// One step: a fixed amount of CPU work (tens of milliseconds, as a
// training step's compute is).
double StepMs(int64_t iters) {
  const auto t0 = std::chrono::steady_clock::now();
  volatile uint64_t x = 0;
  for (int64_t i = 0; i < iters; ++i) x = x + static_cast<uint64_t>(i);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU quota: measured slowdown against 1/cores, by quota per period"};
  std::vector<double> limits{0.2, 0.333, 0.5, 0.8, 1.0};
  std::vector<int64_t> quotas{1000, 4000, 8000};
  int rounds = 9;
  int64_t iters = 100000000;
  app.add_option("--limits", limits, "CPU limits in cores");
  app.add_option("--quotas-us", quotas, "quota per period, microseconds");
  app.add_option("--rounds", rounds, "throttled/unthrottled step pairs per cell")->check(CLI::Range(1, 100));
  app.add_option("--iters", iters, "loop iterations per step")->check(CLI::Range(int64_t{1000}, int64_t{10000000000}));
  CLI11_PARSE(app, argc, argv);

  auto q = firedrill::faults::CpuQuota::Create("quota-bench-" + std::to_string(getpid()));
  if (!q.ok()) {
    std::fprintf(stderr, "quota_bench: %s\n", q.status().message().c_str());
    return 1;
  }
  if (auto st = (*q)->JoinThisThread(); !st.ok()) {
    std::fprintf(stderr, "quota_bench: cannot join the cgroup: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("| cores | nominal |");
  for (int64_t us : quotas) std::printf(" %lld us quota |", static_cast<long long>(us));
  std::printf("\n|---|---|");
  for (size_t i = 0; i < quotas.size(); ++i) std::printf("---|");
  std::printf("\n");
  double healthy_all = 0;
  int healthy_n = 0;
  for (double cores : limits) {
    std::printf("| %.3f | %.2fx |", cores, 1.0 / std::min(cores, 1.0));
    for (int64_t us : quotas) {
      std::vector<double> ratio;
      for (int r = 0; r < rounds; ++r) {
        if (auto st = (*q)->Limit(cores, us); !st.ok()) {
          std::fprintf(stderr, "quota_bench: %s\n", st.message().c_str());
          return 1;
        }
        const double slowed = StepMs(iters);
        if (auto st = (*q)->Unlimit(); !st.ok()) {
          std::fprintf(stderr, "quota_bench: %s\n", st.message().c_str());
          return 1;
        }
        const double healthy = StepMs(iters);
        healthy_all += healthy;
        ++healthy_n;
        ratio.push_back(slowed / healthy);
      }
      std::sort(ratio.begin(), ratio.end());
      std::printf(" %.2fx (%.2f-%.2f) |", Median(ratio), ratio.front(), ratio.back());
      std::fflush(stdout);
    }
    std::printf("\n");
  }
  std::printf("\nmedian of throttled/unthrottled step pairs (min-max over %d), unthrottled step %.1f ms on average\n",
              rounds, healthy_all / std::max(1, healthy_n));
  return 0;
}
