// Real ranks as threads in one process for the trainer's integration tests:
// each rank has its own Trainer, TCPStore client and Gloo group over
// 127.0.0.1, joined through a promise carrying rank 0's store address (the
// controller's relay in production).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "agent/probe.h"
#include "agent/trainer.h"

namespace firedrill::agent::rank_threads {

inline v1::JobSpec SmallJob(int world) {
  v1::JobSpec job;
  job.set_world_size(world);
  auto* m = job.mutable_model();
  m->set_kind("mlp");
  m->set_input_dim(64);
  m->set_hidden(128);
  m->set_layers(2);
  m->set_num_classes(10);
  job.mutable_data()->set_batch_size(32);
  job.mutable_data()->set_num_workers(1);
  job.mutable_optim()->set_kind("sgd");
  job.mutable_optim()->set_lr(0.2);
  job.mutable_optim()->set_momentum(0.9);
  job.set_precision("fp32");
  job.set_steps(30);
  job.mutable_comm()->set_backend("gloo");
  job.mutable_comm()->set_timeout_s(2);
  job.set_threads_per_rank(1);
  return job;
}

struct RankResult {
  Status status;
  int64_t steps_done = 0;
  std::vector<v1::StepReport> reports;
  std::vector<float> params;
  Status exported;  // ExportParameters(), when RankConfig::export_path was set
};

struct RankConfig {
  int64_t max_steps = 0;
  std::vector<v1::ResolvedFault> faults;
  // Called after each step on that rank's thread; may set the rank's stop.
  std::function<void(const v1::StepReport&, std::atomic<bool>& stop)> on_step;
  // Replaces the relay for ranks > 0 when set.
  std::function<StatusOr<StoreAddress>()> await_store;
  bool shared_memory = true;  // false: gradients over Gloo
  std::shared_ptr<ProbeMailbox> probes;  // communication probes (agent/probe.h)
  std::shared_ptr<comm::FlightRecorder> recorder;  // this rank's collectives, when set
  std::string export_path;  // after the run: the parameters by name (Trainer::ExportParameters)
};

// Every rank ended without error (the message of each that did not).
inline void ExpectAllOk(const std::vector<RankResult>& res) {
  for (size_t r = 0; r < res.size(); ++r)
    ASSERT_TRUE(res[r].status.ok()) << "rank " << r << ": " << res[r].status.message();
}

// Runs one job with a rank per thread and returns each rank's outcome.
inline std::vector<RankResult> RunJob(const v1::JobSpec& job, std::vector<RankConfig> cfg) {
  const int world = job.world_size();
  cfg.resize(world);
  std::promise<StoreAddress> addr_promise;
  std::shared_future<StoreAddress> addr = addr_promise.get_future().share();
  std::vector<RankResult> results(world);
  std::vector<std::atomic<bool>> stops(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      TrainerOptions o;
      o.job = job;
      o.rank = r;
      o.seed = 42;
      o.max_steps = cfg[r].max_steps;
      o.faults = cfg[r].faults;
      o.shared_memory_allreduce = cfg[r].shared_memory;
      o.probes = cfg[r].probes;
      o.recorder = cfg[r].recorder;
      if (r == 0) {
        o.store_ready = [&](const StoreAddress& a) { addr_promise.set_value(a); };
      } else if (cfg[r].await_store) {
        o.await_store = cfg[r].await_store;
      } else {
        o.await_store = [&]() -> StatusOr<StoreAddress> {
          if (addr.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
            return Unavailable("no store address from rank 0");
          }
          return addr.get();
        };
      }
      auto& res = results[r];
      auto trainer = Trainer::Create(o);
      if (!trainer.ok()) {
        res.status = trainer.status();
        return;
      }
      res.status = (*trainer)->Run(stops[r], [&](const v1::StepReport& rep) {
        res.reports.push_back(rep);
        if (cfg[r].on_step) cfg[r].on_step(rep, stops[r]);
      });
      res.steps_done = (*trainer)->steps_done();
      res.params = (*trainer)->FlatParameters();
      if (!cfg[r].export_path.empty()) res.exported = (*trainer)->ExportParameters(cfg[r].export_path);
      // The trainer (and its process group) is destroyed here, when the
      // thread ends: a peer still training sees this rank vanish.
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace firedrill::agent::rank_threads
