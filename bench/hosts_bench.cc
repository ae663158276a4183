// Hosts as network namespaces against hosts in one namespace, side by side:
// the same healthy job (a scenario with no fault) on a controller with
// --hosts loopback and on one with --hosts netns, sessions alternating
// A B A B. Per pair: training throughput over the run's last window, the
// 16 MiB `probe allreduce` busbw, and the median `probe p2p` pair
// bandwidth; then each one's ratio netns / loopback. Results in
// bench/RESULTS.md.
//
//   build/bin/hosts_bench --pairs 5
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_controller.h"
#include "cli/client.h"
#include "common/paths.h"
#include "common/stats.h"

namespace {

using namespace firedrill;

struct Sample {
  bool ok = false;
  double throughput = 0, busbw = 0, p2p = 0;
  std::string error;
};

Sample Measure(cli::DrillClient& c, const std::string& scenario, int64_t seed, int64_t steps) {
  Sample s;
  auto info = c.StartSession(scenario, seed);
  if (!info.ok()) {
    s.error = info.status().message();
    return s;
  }
  const std::string id = info->session_id();
  auto end = [&] { (void)c.EndSession(id, std::chrono::seconds(60)); };
  for (int i = 0; i < 3000; ++i) {  // 10 min
    auto st = c.GetStatus(id);
    if (st.ok() && st->session().state() == "running" && st->run().steps_done() >= steps) {
      s.throughput = st->run().throughput_samples_per_s();
      break;
    }
    if (st.ok() && st->session().state() != "created" && st->session().state() != "baseline" &&
        st->session().state() != "running") {
      s.error = "session " + st->session().state();
      end();
      return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  v1::RunProbeRequest allreduce;
  allreduce.set_session_id(id);
  allreduce.mutable_spec()->set_op("allreduce");
  allreduce.mutable_spec()->set_min_bytes(16 << 20);
  allreduce.mutable_spec()->set_max_bytes(16 << 20);
  allreduce.mutable_spec()->set_iters(20);
  allreduce.mutable_spec()->set_warmup_iters(5);
  auto ar = c.RunProbe(allreduce);
  v1::RunProbeRequest p2p;
  p2p.set_session_id(id);
  p2p.mutable_spec()->set_op("p2p");
  auto pp = c.RunProbe(p2p);
  end();
  if (!ar.ok() || ar->rows_size() == 0 || !pp.ok()) {
    s.error = !ar.ok() ? ar.status().message() : !pp.ok() ? pp.status().message() : "no allreduce row";
    return s;
  }
  s.busbw = ar->rows(ar->rows_size() - 1).busbw_gbps();
  std::vector<double> bw;
  for (const auto& p : pp->pairs()) bw.push_back(p.bw_gbps());
  s.p2p = Median(bw);
  s.ok = s.throughput > 0;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int pairs = 5;
  int64_t steps = 150, seed = 9100;
  std::string scenario = "quiet-night-page", scenario_dir = DefaultScenarioDir();
  CLI::App app{"hosts_bench: a healthy job with hosts as network namespaces against hosts in one namespace"};
  app.add_option("--pairs", pairs, "sessions per mode, alternating")->capture_default_str();
  app.add_option("--steps", steps, "main-run steps before throughput is read")->capture_default_str();
  app.add_option("--scenario", scenario, "a scenario without faults")->capture_default_str();
  app.add_option("--scenarios", scenario_dir, "scenario directory")->capture_default_str();
  app.add_option("--seed", seed, "first seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  bench::BenchController loopback(scenario_dir, {"--hosts", "loopback"});
  bench::BenchController netns(scenario_dir, {"--hosts", "netns"});
  if (!loopback.ok() || !netns.ok()) {
    std::fprintf(stderr, "hosts_bench: a controller did not start (netns needs root and iproute2); see %s and %s\n",
                 (loopback.dir() + "/controller.log").c_str(), (netns.dir() + "/controller.log").c_str());
    return 1;
  }
  cli::DrillClient a(loopback.addr(), std::chrono::seconds(60));
  cli::DrillClient b(netns.addr(), std::chrono::seconds(60));
  a.SetToken(cli::ReadOwnerToken(loopback.dir()));
  b.SetToken(cli::ReadOwnerToken(netns.dir()));
  std::vector<double> thr, bus, p2p;
  std::printf("%-5s %14s %14s %7s %12s %12s %7s %11s %11s %7s\n", "pair", "loopback s/s", "netns s/s", "ratio",
              "lo busbw", "ns busbw", "ratio", "lo p2p", "ns p2p", "ratio");
  for (int i = 0; i < pairs; ++i) {
    const Sample x = Measure(a, scenario, seed + i, steps);
    const Sample y = Measure(b, scenario, seed + i, steps);
    if (!x.ok || !y.ok) {
      std::fprintf(stderr, "pair %d failed: %s\n", i, (!x.ok ? x.error : y.error).c_str());
      continue;
    }
    thr.push_back(y.throughput / x.throughput);
    bus.push_back(y.busbw / x.busbw);
    p2p.push_back(y.p2p / x.p2p);
    std::printf("%-5d %14.0f %14.0f %7.2f %10.3f G %10.3f G %7.2f %9.3f G %9.3f G %7.2f\n", i, x.throughput,
                y.throughput, thr.back(), x.busbw, y.busbw, bus.back(), x.p2p, y.p2p, p2p.back());
    std::fflush(stdout);
  }
  if (thr.empty()) return 1;
  std::printf("median netns / loopback: throughput %.2f, allreduce busbw (16 MiB) %.2f, p2p pair bandwidth %.2f "
              "(%zu pairs)\n",
              Median(thr), Median(bus), Median(p2p), thr.size());
  return 0;
}
