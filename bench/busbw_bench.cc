// Bus bandwidth of `firedrill probe allreduce` (the probe engine on a group
// of firedrill's collective wrapper) against the same sweep straight on
// c10d's ProcessGroupGloo, in one process with a rank per thread, over
// loopback TCP. Rounds alternate which goes first; per size it prints the
// median busbw of each and their ratio. Results in bench/RESULTS.md.
//
//   build/bin/busbw_bench --world 4 --rounds 5 --min 64K --max 16M
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "agent/comm/process_group.h"
#include "agent/probe.h"
#include "common/stats.h"

using namespace firedrill;
using namespace firedrill::agent;

namespace {

int64_t Size(const char* s) {
  char* end = nullptr;
  int64_t v = std::strtoll(s, &end, 10);
  if (*end == 'K' || *end == 'k') v <<= 10;
  if (*end == 'M' || *end == 'm') v <<= 20;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int world = 4, rounds = 5, iters = 20, warmup = 5;
  int64_t min_bytes = 64 << 10, max_bytes = 16 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--world") world = std::atoi(argv[i + 1]);
    else if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (k == "--iters") iters = std::atoi(argv[i + 1]);
    else if (k == "--min") min_bytes = Size(argv[i + 1]);
    else if (k == "--max") max_bytes = Size(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  v1::ProbeSpec spec;
  spec.set_op("allreduce");
  spec.set_min_bytes(min_bytes);
  spec.set_max_bytes(max_bytes);
  spec.set_factor(4);
  spec.set_iters(iters);
  spec.set_warmup_iters(warmup);
  const std::vector<int64_t> sizes = ProbeSizes(spec);
  // [round][size] mean over ranks of each rank's time per iteration
  std::vector<std::vector<double>> ours(rounds, std::vector<double>(sizes.size())),
      raw(rounds, std::vector<double>(sizes.size()));
  std::promise<int> port_promise;
  std::shared_future<int> port = port_promise.get_future().share();
  std::vector<std::thread> ranks;
  std::vector<std::string> errors(world);
  std::mutex mu;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      comm::GroupOptions o;
      o.rank = r;
      o.world_size = world;
      o.timeout = std::chrono::seconds(60);
      auto pg = r == 0 ? comm::ProcessGroup::HostStore(o, "127.0.0.1")
                       : comm::ProcessGroup::JoinStore(o, "127.0.0.1", port.get());
      if (!pg.ok()) {
        errors[r] = pg.status().message();
        if (r == 0) port_promise.set_value(0);
        return;
      }
      if (r == 0) port_promise.set_value((*pg)->store_port());
      if (Status s = (*pg)->Connect(); !s.ok()) {
        errors[r] = s.message();
        return;
      }
      for (int round = 0; round < rounds; ++round) {
        for (int half = 0; half < 2; ++half) {
          const bool wrapper = (round + half) % 2 == 0;
          const std::string tag = "bench/" + std::to_string(round) + "/" + std::to_string(half);
          std::vector<double> us;
          if (wrapper) {
            auto g = (*pg)->NewGroup(tag, std::chrono::seconds(60));
            v1::ProbeReport rep;
            Status s = g.ok() ? RunProbe(**g, spec, 0, &rep) : g.status();
            if (!s.ok()) {
              errors[r] = s.message();
              return;
            }
            for (const auto& row : rep.rows()) us.push_back(row.time_us());
          } else {
            auto t = (*pg)->RawGlooAllReduceUs(tag, sizes, warmup, iters);
            if (!t.ok()) {
              errors[r] = t.status().message();
              return;
            }
            us = *t;
          }
          std::lock_guard<std::mutex> lock(mu);
          auto& dst = wrapper ? ours[round] : raw[round];
          for (size_t i = 0; i < sizes.size(); ++i) dst[i] += us[i] / world;
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < world; ++r) {
    if (!errors[r].empty()) {
      std::fprintf(stderr, "rank %d: %s\n", r, errors[r].c_str());
      return 1;
    }
  }
  const double factor = 2.0 * (world - 1) / world;
  std::printf("# all-reduce busbw, world %d, %d rounds (median), %d iters after %d warm-up; GB/s\n", world, rounds,
              iters, warmup);
  std::printf("%12s %14s %14s %8s\n", "size(B)", "firedrill", "raw Gloo", "ratio");
  std::vector<double> ratios;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<double> a, b, ratio;
    for (int round = 0; round < rounds; ++round) {
      a.push_back(sizes[i] / (ours[round][i] * 1e3) * factor);
      b.push_back(sizes[i] / (raw[round][i] * 1e3) * factor);
      ratio.push_back(raw[round][i] / ours[round][i]);
    }
    ratios.push_back(Median(ratio));
    std::printf("%12lld %14.3f %14.3f %8.3f\n", static_cast<long long>(sizes[i]), Median(a), Median(b),
                Median(ratio));
  }
  std::printf("# median ratio over sizes: %.3f\n", Median(ratios));
  return 0;
}
