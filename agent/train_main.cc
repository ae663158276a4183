// firedrill-train: runs a scenario's job healthy (no faults) on this machine,
// without a controller: one thread per rank, a real TCPStore and Gloo group
// over 127.0.0.1, the same Trainer the agents run. For trying job settings
// before writing a scenario, for checkpoint/resume checks, and for tests.
//
//   firedrill-train scenarios/throughput-halved.yaml --steps 50 --set optim.lr=0.1
//   firedrill-train S.yaml --steps 100 --set checkpoint.every=50 --set checkpoint.dir=/tmp/ck
//   firedrill-train S.yaml --steps 50 --set checkpoint.dir=/tmp/ck --set checkpoint.resume_from=latest
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/memory.h"
#include "agent/trainer.h"
#include "common/log.h"
#include "controller/scenario_loader.h"

namespace {

using namespace firedrill;

void PrintStep(const v1::StepReport& r) {
  std::string line;
  char buf[96];
  std::snprintf(buf, sizeof(buf), "step %6" PRId64 " | loss %.4f | %7.1f ms | %8.1f samples/s", r.step(), r.loss(),
                r.step_ms(), r.samples_per_s());
  line += buf;
  if (r.tokens_per_s() > 0) {
    std::snprintf(buf, sizeof(buf), " | %8.0f tok/s | pad %4.1f%%", r.tokens_per_s(), 100.0 * r.padding_fraction());
    line += buf;
  }
  if (r.loss_scale() > 0) {
    std::snprintf(buf, sizeof(buf), " | scale %g%s (%" PRId64 " skipped)", r.loss_scale(), r.skipped() ? " SKIP" : "",
                  r.skipped_total());
    line += buf;
  }
  std::snprintf(buf, sizeof(buf), " | grad %.3g | lr %.3g | mem peak %s", r.grad_norm(), r.lr(),
                agent::FormatSize(static_cast<uint64_t>(r.mem_peak_bytes())).c_str());
  line += buf;
  if (r.checkpoint_ms() > 0) {
    std::snprintf(buf, sizeof(buf), " | ckpt %.0f ms", r.checkpoint_ms());
    line += buf;
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario_path, losses_path, params_path;
  std::vector<std::string> sets;
  int64_t steps = 0, seed = 1;
  int log_every = 10;
  CLI::App app{"firedrill-train: run a scenario's job (without its faults) on this machine, one thread per rank"};
  app.add_option("scenario", scenario_path, "scenario YAML file whose job to run")->required();
  app.add_option("--steps", steps, "optimiser steps to run (default: the job's steps)");
  app.add_option("--seed", seed, "session seed (model init, data order)")->capture_default_str();
  app.add_option("--set", sets, "override a job setting, key=value (as `firedrill fix --set`)");
  app.add_option("--log-every", log_every, "print rank 0's step report every N steps (0: never)")
      ->capture_default_str();
  app.add_option("--losses", losses_path, "write every rank's per-step loss (hex float) to FILE");
  app.add_option("--params", params_path, "write every rank's final parameters (raw fp32, rank order) to FILE");
  CLI11_PARSE(app, argc, argv);
  InitLogging("train");

  auto sc = controller::LoadScenarioFile(scenario_path);
  if (!sc.ok()) {
    std::fprintf(stderr, "firedrill-train: %s\n", sc.status().message().c_str());
    return 2;
  }
  v1::JobSpec job = sc->job();
  for (const auto& kv : sets) {
    const auto eq = kv.find('=');
    Status st = eq == std::string::npos
                    ? InvalidArgument("--set " + kv + ": expected key=value")
                    : controller::ApplyJobSetting(&job, kv.substr(0, eq), kv.substr(eq + 1));
    if (!st.ok()) {
      std::fprintf(stderr, "firedrill-train: --set %s: %s\n", kv.c_str(), st.message().c_str());
      return 2;
    }
  }
  if (Status st = controller::ValidateJob(job, scenario_path + ": job"); !st.ok()) {
    std::fprintf(stderr, "firedrill-train: %s\n", st.message().c_str());
    return 2;
  }

  const int world = job.world_size();
  std::promise<agent::StoreAddress> addr_promise;
  std::shared_future<agent::StoreAddress> addr = addr_promise.get_future().share();
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::vector<std::pair<int64_t, double>>> losses(world);
  std::vector<std::vector<float>> params(world);
  std::vector<Status> results(world);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      agent::TrainerOptions o;
      o.job = job;
      o.rank = r;
      o.seed = static_cast<uint64_t>(seed);
      o.max_steps = steps;
      o.store_ready = [&](const agent::StoreAddress& a) { addr_promise.set_value(a); };
      o.await_store = [&]() -> StatusOr<agent::StoreAddress> { return addr.get(); };
      auto trainer = agent::Trainer::Create(std::move(o));
      if (!trainer.ok()) {
        results[r] = trainer.status();
        if (r == 0) addr_promise.set_value({"127.0.0.1", 1});  // let the others fail fast
        stop = true;
        return;
      }
      results[r] = (*trainer)->Run(stop, [&](const v1::StepReport& rep) {
        std::lock_guard<std::mutex> lock(mu);
        losses[r].emplace_back(rep.step(), rep.loss());
        if (r == 0 && log_every > 0 && (rep.step() + 1) % log_every == 0) PrintStep(rep);
      });
      params[r] = (*trainer)->FlatParameters();
    });
  }
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  int rc = 0;
  for (int r = 0; r < world; ++r) {
    if (!results[r].ok()) {
      std::fprintf(stderr, "firedrill-train: %s\n", results[r].message().c_str());
      rc = 1;
    }
  }
  if (!losses_path.empty()) {
    std::ofstream out(losses_path, std::ios::trunc);
    for (int r = 0; r < world; ++r) {
      for (const auto& [step, loss] : losses[r]) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%d %" PRId64 " %a\n", r, step, loss);
        out << buf;
      }
    }
    if (!out) {
      std::fprintf(stderr, "firedrill-train: cannot write %s\n", losses_path.c_str());
      rc = 1;
    }
  }
  if (!params_path.empty()) {
    std::ofstream out(params_path, std::ios::binary | std::ios::trunc);
    for (const auto& p : params)
      out.write(reinterpret_cast<const char*>(p.data()), static_cast<std::streamsize>(p.size() * sizeof(float)));
    if (!out) {
      std::fprintf(stderr, "firedrill-train: cannot write %s\n", params_path.c_str());
      rc = 1;
    }
  }
  const size_t done = losses.empty() ? 0 : losses[0].size();
  std::printf("%s %zu steps on %d ranks in %.1f s\n", rc == 0 ? "finished" : "FAILED after", done, world, secs);
  return rc;
}
