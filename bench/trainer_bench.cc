// One rank of a firedrill training job, for the benchmarks in bench/
// (orchestrated by bench/ddp_vs_pytorch.py; see bench/RESULTS.md). Ranks are
// separate processes, as in a real run: rank 0 hosts the store and writes its
// port to --rendezvous, the others poll that file (the controller's relay in
// production). Prints one JSON line with this rank's throughput.
//
//   RANK=0 WORLD_SIZE=2 trainer_bench --rendezvous /tmp/rv --steps 60 ...
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/data.h"
#include "agent/trainer.h"

using firedrill::Status;
using firedrill::StatusOr;
using namespace firedrill::agent;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string rendezvous;
  int warmup = 10, steps = 60, batch = 64, input = 256, hidden = 1024, layers = 3, classes = 10;
  double bucket_mb = 0, first_bucket_mb = 0;
  bool flat = false, telemetry = true, idle_fault = false, shm = true;
};

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (k == "--flat") {
      a->flat = true;
    } else if (k == "--no-telemetry") {
      a->telemetry = false;
    } else if (k == "--idle-fault") {
      a->idle_fault = true;
    } else if (k == "--no-shm") {
      a->shm = false;
    } else {
      const char* v = next();
      if (!v) return false;
      if (k == "--rendezvous")
        a->rendezvous = v;
      else if (k == "--warmup")
        a->warmup = std::atoi(v);
      else if (k == "--steps")
        a->steps = std::atoi(v);
      else if (k == "--batch")
        a->batch = std::atoi(v);
      else if (k == "--input")
        a->input = std::atoi(v);
      else if (k == "--hidden")
        a->hidden = std::atoi(v);
      else if (k == "--layers")
        a->layers = std::atoi(v);
      else if (k == "--classes")
        a->classes = std::atoi(v);
      else if (k == "--bucket-mb")
        a->bucket_mb = std::atof(v);
      else if (k == "--first-bucket-mb")
        a->first_bucket_mb = std::atof(v);
      else
        return false;
    }
  }
  return !a->rendezvous.empty();
}

int EnvInt(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : dflt;
}

// CPU time of the whole process (every thread), in seconds: less disturbed
// than wall time by other work on the shared cores.
double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!Parse(argc, argv, &a)) {
    std::fprintf(
        stderr,
        "usage: RANK=r WORLD_SIZE=n trainer_bench --rendezvous FILE [--steps N] [--warmup N] [--batch N] "
        "[--input N --hidden N --layers N --classes N] [--bucket-mb X] [--first-bucket-mb X] [--flat] "
        "[--no-telemetry] [--idle-fault] [--no-shm]\n");
    return 2;
  }
  const int rank = EnvInt("RANK", 0), world = EnvInt("WORLD_SIZE", 1);

  TrainerOptions o;
  auto& job = o.job;
  job.set_world_size(world);
  auto* m = job.mutable_model();
  m->set_kind("mlp");
  m->set_input_dim(a.input);
  m->set_hidden(a.hidden);
  m->set_layers(a.layers);
  m->set_num_classes(a.classes);
  job.mutable_data()->set_batch_size(a.batch);
  job.mutable_data()->set_num_workers(0);  // batches made inline, as the PyTorch side does
  job.mutable_optim()->set_kind("sgd");
  job.mutable_optim()->set_lr(0.01);
  job.mutable_optim()->set_momentum(0.9);
  job.set_precision("fp32");
  job.set_steps(a.warmup + a.steps + 1);
  job.mutable_comm()->set_timeout_s(60);
  job.mutable_comm()->set_bucket_mb(a.bucket_mb);
  job.mutable_comm()->set_first_bucket_mb(a.first_bucket_mb);
  job.mutable_comm()->set_flat_allreduce(a.flat);
  job.set_threads_per_rank(1);
  o.rank = rank;
  o.seed = 1;
  o.telemetry = a.telemetry;
  o.shared_memory_allreduce = a.shm;
  if (a.idle_fault) {
    // Armed but never triggered: the cost of carrying a fault is the hook
    // bus's per-hook check.
    firedrill::v1::ResolvedFault f;
    f.set_kind("straggler");
    f.set_rank(rank);
    f.set_trigger_step(1'000'000'000);
    f.mutable_straggler()->set_slowdown(2.0);
    o.faults.push_back(f);
  }
  if (rank == 0) {
    o.store_ready = [&](const StoreAddress& addr) {
      const std::string tmp = a.rendezvous + ".tmp";
      std::ofstream(tmp) << addr.host << " " << addr.port << "\n";
      std::rename(tmp.c_str(), a.rendezvous.c_str());
    };
  } else {
    o.await_store = [&]() -> StatusOr<StoreAddress> {
      for (int i = 0; i < 3000; ++i) {
        std::ifstream in(a.rendezvous);
        StoreAddress addr;
        if (in >> addr.host >> addr.port) return addr;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return firedrill::Unavailable("no rendezvous file " + a.rendezvous);
    };
  }
  // The measured window runs from the first batch of step `warmup` to the
  // first batch of the last step; on_batch fires whether telemetry is on or
  // not, so both arms of the overhead benchmark are timed the same way.
  Clock::time_point t_begin, t_end;
  double cpu_begin = 0, cpu_end = 0;
  const int64_t last = a.warmup + a.steps;
  // Start of every step, to give per-step times in both arms (the reports
  // are off in one).
  std::vector<Clock::time_point> starts(static_cast<size_t>(last) + 1);
  o.on_batch = [&](int64_t step, int micro, const Batch&) {
    if (micro != 0) return;
    if (step <= last) starts[static_cast<size_t>(step)] = Clock::now();
    if (step == a.warmup) {
      t_begin = Clock::now();
      cpu_begin = CpuSeconds();
    }
    if (step == last) {
      t_end = Clock::now();
      cpu_end = CpuSeconds();
    }
  };
  // What the agent does with a report: queue it under a lock for the stream.
  std::mutex mu;
  std::vector<firedrill::v1::StepReport> reports;
  reports.reserve(job.steps());
  auto trainer = Trainer::Create(o);
  if (!trainer.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, trainer.status().ToString().c_str());
    return 1;
  }
  std::atomic<bool> stop{false};
  Status st = (*trainer)->Run(stop, [&](const firedrill::v1::StepReport& r) {
    std::lock_guard<std::mutex> lock(mu);
    reports.push_back(r);
  });
  if (!st.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, st.ToString().c_str());
    return 1;
  }
  const double s = std::chrono::duration<double>(t_end - t_begin).count();
  std::vector<double> exposed, total, step_ms, backward;
  for (const auto& r : reports) {
    if (r.step() < a.warmup || r.step() >= last) continue;
    exposed.push_back(r.comm_ms());
    total.push_back(r.comm_total_ms());
    step_ms.push_back(r.step_ms());
    backward.push_back(r.backward_ms());
  }
  // A low percentile of step times: interference from other work on the
  // shared cores comes in bursts and mostly lengthens the slow steps.
  std::vector<double> steps;
  for (int64_t k = a.warmup; k < last; ++k) {
    steps.push_back(std::chrono::duration<double, std::milli>(starts[k + 1] - starts[k]).count());
  }
  std::sort(steps.begin(), steps.end());
  const double p10 = steps.empty() ? 0 : steps[steps.size() / 10];
  std::printf(
      "{\"impl\":\"firedrill\",\"rank\":%d,\"world\":%d,\"steps\":%d,\"samples_per_s\":%.1f,\"step_ms\":%.3f,"
      "\"step_p10_ms\":%.3f,"
      "\"cpu_ms\":%.3f,\"backward_ms\":%.3f,\"comm_exposed_ms\":%.3f,\"comm_total_ms\":%.3f}\n",
      rank, world, a.steps, a.batch * a.steps / s, 1000.0 * s / a.steps, p10,
      1000.0 * (cpu_end - cpu_begin) / a.steps, Median(backward), Median(exposed), Median(total));
  return 0;
}
