// What the collective decorators cost when no fault is active: all-reduces
// through a group with the flight recorder and the link-fault decorator
// (a healthy link) against the same all-reduces through a bare group, on
// Gloo and on shared memory, in one process with a rank per thread. Each
// round times both, alternating which goes first; per path and size it
// prints the median time per all-reduce of each and the median of the
// per-round ratios (decorated / bare). Then the decorators' own cost, free
// of the transports' noise: the same stack around a backend whose works are
// finished at once, against that backend alone (ns per collective).
// Results in bench/RESULTS.md.
//
//   build/bin/decorator_bench --world 2 --rounds 9 --iters 200
#include <array>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "agent/comm/decorators.h"
#include "agent/comm/process_group.h"
#include "common/stats.h"
#include "faults/seams.h"

using namespace firedrill;
using namespace firedrill::agent;

namespace {

struct Path {
  const char* name;
  bool shm;
  int64_t bytes;
};

// One rank's two groups (bare, decorated), each over its own store.
struct RankGroups {
  std::unique_ptr<comm::ProcessGroup> g[2];
};

// Finished as soon as it is posted: what is left of a collective's cost is
// the stack's.
class DoneWork : public comm::Work {
 public:
  bool Wait(std::chrono::milliseconds, Status* result) override {
    *result = Status::Ok();
    return true;
  }
  std::chrono::steady_clock::time_point completed() const override { return {}; }
};

class NullBackend : public comm::Backend {
 public:
  const char* name() const override { return "null"; }
  bool Supports(const comm::Op&) const override { return true; }
  StatusOr<comm::WorkPtr> Post(const comm::Op&) override { return comm::WorkPtr(std::make_shared<DoneWork>()); }
};

// Mean ns per Post + Wait through `b`.
double NsPerCollective(comm::Backend& b, int n) {
  comm::Op op;
  op.info.op = "allreduce";
  op.info.bytes = op.info.link_bytes = 1 << 20;
  Status s;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    op.info.seq = i + 1;
    auto w = b.Post(op);
    (*w)->Wait(comm::kNoWaitLimit, &s);
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
}

}  // namespace

int main(int argc, char** argv) {
  int world = 2, rounds = 9, iters = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--world") world = std::atoi(argv[i + 1]);
    else if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (k == "--iters") iters = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s (flags: --world N --rounds N --iters N)\n", k.c_str());
      return 2;
    }
  }
  const std::vector<Path> paths = {{"gloo", false, 4 << 10}, {"gloo", false, 1 << 20}, {"gloo", false, 8 << 20},
                                   {"shm", true, 4 << 10},   {"shm", true, 1 << 20},   {"shm", true, 8 << 20}};
  // us[path][round][which]: mean over ranks of the time per all-reduce
  std::vector<std::vector<std::array<double, 2>>> us(paths.size(),
                                                     std::vector<std::array<double, 2>>(rounds, {0, 0}));
  std::promise<int> ports[2];
  std::shared_future<int> port[2] = {ports[0].get_future().share(), ports[1].get_future().share()};
  std::vector<std::string> errors(world);
  std::mutex mu;
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      faults::LinkModel healthy;  // no fault degrades it
      RankGroups rg;
      for (int which = 0; which < 2; ++which) {
        comm::GroupOptions o;
        o.rank = r;
        o.world_size = world;
        o.timeout = std::chrono::seconds(60);
        if (which == 1) {
          o.recorder = std::make_shared<comm::FlightRecorder>();
          o.link = &healthy;
        }
        auto pg = r == 0 ? comm::ProcessGroup::HostStore(o, "127.0.0.1")
                         : comm::ProcessGroup::JoinStore(o, "127.0.0.1", port[which].get());
        if (!pg.ok()) {
          errors[r] = pg.status().message();
          if (r == 0) ports[which].set_value(0);
          return;
        }
        if (r == 0) ports[which].set_value((*pg)->store_port());
        rg.g[which] = std::move(pg).value();
        Status s = rg.g[which]->Connect();
        auto on = s.ok() ? rg.g[which]->EnableSharedMemory(32 << 20) : StatusOr<bool>(s);
        if (!on.ok() || !*on) {
          errors[r] = on.ok() ? "shared memory refused" : on.status().message();
          return;
        }
      }
      for (size_t p = 0; p < paths.size(); ++p) {
        at::Tensor t[2];
        for (int which = 0; which < 2; ++which) {
          const int64_t numel = paths[p].bytes / 4;
          t[which] = paths[p].shm ? *rg.g[which]->AllocateShared(numel) : at::zeros({numel});
        }
        for (int round = 0; round < rounds; ++round) {
          for (int half = 0; half < 2; ++half) {
            const int which = (round + half) % 2;
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < iters; ++i) {
              auto w = rg.g[which]->StartAllReduceSum(t[which], i, 1.0 / world);
              Status s = w.ok() ? rg.g[which]->Wait(*w) : w.status();
              if (!s.ok()) {
                errors[r] = s.message();
                return;
              }
            }
            const double per = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                                   .count() / iters;
            std::lock_guard<std::mutex> lock(mu);
            us[p][round][which] += per / world;
          }
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
  std::printf("# all-reduce (sum, fp32), world %d, %d rounds (median), %d all-reduces per round and group\n", world,
              rounds, iters);
  std::printf("%-6s %10s %12s %14s %8s %10s\n", "path", "size(B)", "bare(us)", "decorated(us)", "ratio",
              "cost(us)");
  for (size_t p = 0; p < paths.size(); ++p) {
    std::vector<double> bare, dec, ratio, cost;
    for (int round = 0; round < rounds; ++round) {
      bare.push_back(us[p][round][0]);
      dec.push_back(us[p][round][1]);
      ratio.push_back(us[p][round][1] / us[p][round][0]);
      cost.push_back(us[p][round][1] - us[p][round][0]);
    }
    std::printf("%-6s %10lld %12.1f %14.1f %8.3f %10.2f\n", paths[p].name, static_cast<long long>(paths[p].bytes),
                Median(bare), Median(dec), Median(ratio), Median(cost));
  }
  // The stack alone.
  faults::LinkModel healthy;
  auto null = std::make_shared<NullBackend>();
  auto stack = comm::WithFlightRecorder(comm::WithLinkFaults(null, &healthy, std::make_shared<comm::LinkQueue>()),
                                        std::make_shared<comm::FlightRecorder>());
  std::vector<double> bare_ns, stack_ns;
  for (int round = 0; round < rounds; ++round) {
    bare_ns.push_back(NsPerCollective(*null, 200000));
    stack_ns.push_back(NsPerCollective(*stack, 200000));
  }
  std::printf("# the decorators alone (flight recorder + link faults, healthy link) around a backend that finishes "
              "at once, %d rounds of 200000\n",
              rounds);
  std::printf("bare %.0f ns, decorated %.0f ns per collective: the decorators cost %.0f ns\n", Median(bare_ns),
              Median(stack_ns), Median(stack_ns) - Median(bare_ns));
  return 0;
}
