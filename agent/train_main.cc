// firedrill-train: runs a scenario's job healthy (no faults) on this machine,
// without a controller: one process per rank, a real TCPStore and Gloo group
// over 127.0.0.1, the same Trainer the agents run. For trying job settings
// before writing a scenario, for checkpoint/resume checks, and for tests.
//
//   firedrill-train scenarios/throughput-halved.yaml --steps 50 --set optim.lr=0.1
//   firedrill-train S.yaml --steps 100 --set checkpoint.every=50 --set checkpoint.dir=/tmp/ck
//   firedrill-train S.yaml --steps 50 --set checkpoint.dir=/tmp/ck --set checkpoint.resume_from=latest
//   firedrill-train --job job.txtpb --steps 20     a JobSpec in protobuf text form (the resume probe's)
#include <CLI/CLI.hpp>
#include <google/protobuf/text_format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/memory.h"
#include "agent/trainer.h"
#include "common/log.h"
#include "scenario/loader.h"

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
  if (r.loss_scaling() || r.loss_scale() > 0) {
    std::snprintf(buf, sizeof(buf), " | scale %g%s (%" PRId64 " skipped)", r.loss_scale(), r.skipped() ? " SKIP" : "",
                  r.skipped_total());
    line += buf;
  }
  if (r.mesh().pp_size() > 1) {
    std::snprintf(buf, sizeof(buf), " | bubble %4.1f%%", 100.0 * r.pp_bubble_fraction());
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

// One rank, in its own process: trains, then writes its per-step losses
// (hex floats) and final parameters into `work`. Rank 0 writes its store's
// address to `addr_out`; the others read it from `addr_in`.
bool checkpoint_at_start = false;

int RunRank(const v1::JobSpec& job, int rank, int64_t seed, int64_t steps, int log_every, const std::string& work,
            int addr_out, int addr_in) {
  agent::TrainerOptions o;
  o.checkpoint_at_start = checkpoint_at_start;
  o.job = job;
  o.rank = rank;
  o.seed = static_cast<uint64_t>(seed);
  o.max_steps = steps;
  o.shared_memory_allreduce = agent::SharedMemoryAllReduce(job, /*ranks_share_host=*/true);  // one host: this one
  o.store_ready = [&](const agent::StoreAddress& a) {
    const std::string line = a.host + " " + std::to_string(a.port) + "\n";
    if (rank == 0) (void)!write(addr_out, line.data(), line.size());
  };
  o.await_store = [&]() -> StatusOr<agent::StoreAddress> {
    std::string line;
    char c;
    while (read(addr_in, &c, 1) == 1 && c != '\n') line += c;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) return Unavailable("rank 0 did not start its store (see its error above)");
    return agent::StoreAddress{line.substr(0, sp), std::atoi(line.c_str() + sp + 1)};
  };
  if (rank != 0) close(addr_out);
  std::atomic<bool> stop{false};
  auto trainer = agent::Trainer::Create(std::move(o));
  if (!trainer.ok()) {
    std::fprintf(stderr, "firedrill-train: rank %d: %s\n", rank, trainer.status().message().c_str());
    return 1;
  }
  std::ofstream losses(work + "/losses-" + std::to_string(rank), std::ios::trunc);
  const Status st = (*trainer)->Run(stop, [&](const v1::StepReport& rep) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%" PRId64 " %a\n", rep.step(), rep.loss());
    losses << buf;
    if (rank == 0 && log_every > 0 && (rep.step() + 1) % log_every == 0) PrintStep(rep);
  });
  losses.close();
  const std::vector<float> params = (*trainer)->FlatParameters();
  std::ofstream out(work + "/params-" + std::to_string(rank), std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(params.data()), static_cast<std::streamsize>(params.size() * sizeof(float)));
  if (!st.ok()) {
    std::fprintf(stderr, "firedrill-train: rank %d: %s\n", rank, st.message().c_str());
    return 1;
  }
  return out && losses ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario_path, job_path, losses_path, params_path;
  std::vector<std::string> sets;
  int64_t steps = 0, seed = 1;
  int log_every = 10;
  CLI::App app{"firedrill-train: run a scenario's job (without its faults) on this machine, one process per rank"};
  auto* from_scenario = app.add_option("scenario", scenario_path, "scenario YAML file whose job to run");
  auto* from_job = app.add_option("--job", job_path, "a JobSpec in protobuf text form to run instead of a scenario's job");
  from_scenario->excludes(from_job);
  app.add_option("--steps", steps, "optimiser steps to run (default: the job's steps)");
  app.add_option("--seed", seed, "session seed (model init, data order)")->capture_default_str();
  app.add_option("--set", sets, "override a job setting, key=value (as `firedrill fix --set`)");
  app.add_option("--log-every", log_every, "print rank 0's step report every N steps (0: never)")
      ->capture_default_str();
  app.add_option("--losses", losses_path, "write every rank's per-step loss (hex float) to FILE");
  app.add_option("--params", params_path, "write every rank's final parameters (raw fp32, rank order) to FILE");
  app.add_flag("--checkpoint-at-start", checkpoint_at_start,
               "also checkpoint the state as the run starts (resumed or not), before its first step");
  CLI11_PARSE(app, argc, argv);
  InitLogging("train");

  if (scenario_path.empty() && job_path.empty()) {
    std::fprintf(stderr, "firedrill-train: give a scenario file or --job FILE\n");
    return 2;
  }
  v1::JobSpec job;
  if (!job_path.empty()) {
    std::ifstream in(job_path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "firedrill-train: cannot read %s\n", job_path.c_str());
      return 2;
    }
    if (!google::protobuf::TextFormat::ParseFromString(text, &job)) {
      std::fprintf(stderr, "firedrill-train: %s is not a JobSpec in protobuf text form\n", job_path.c_str());
      return 2;
    }
    scenario_path = job_path;  // what errors name
  } else {
    auto sc = scenario::LoadScenarioFile(scenario_path);
    if (!sc.ok()) {
      std::fprintf(stderr, "firedrill-train: %s\n", sc.status().message().c_str());
      return 2;
    }
    job = sc->job();
  }
  for (const auto& kv : sets) {
    const auto eq = kv.find('=');
    Status st = eq == std::string::npos
                    ? InvalidArgument("--set " + kv + ": expected key=value")
                    : scenario::ApplyJobSetting(&job, kv.substr(0, eq), kv.substr(eq + 1));
    if (!st.ok()) {
      std::fprintf(stderr, "firedrill-train: --set %s: %s\n", kv.c_str(), st.message().c_str());
      return 2;
    }
  }
  if (Status st = scenario::ValidateJob(job, scenario_path + ": job"); !st.ok()) {
    std::fprintf(stderr, "firedrill-train: %s\n", st.message().c_str());
    return 2;
  }

  // One process per rank, as on a cluster: each has its own tracking
  // allocator (memory peaks, budgets and the peak reset are per rank, as on
  // a device), its own RNG and thread pools. Forked before LibTorch has
  // started a thread; rank 0's store address reaches the others through
  // pipes, and each rank's losses and parameters come back through files.
  const int world = job.world_size();
  // Under $TMPDIR where the caller names one (the controller's probe runs
  // keep theirs in a scratch directory it removes, however they end).
  const char* tmpdir = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmpdir != nullptr && tmpdir[0] == '/' ? tmpdir : "/tmp") + "/firedrill-train-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "firedrill-train: cannot make a temporary directory (%s): %s\n", tmpl.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const std::string work = tmpl;
  int addr_pipe[2];  // rank 0 -> parent
  std::vector<std::array<int, 2>> to_rank(world);  // parent -> rank r
  if (pipe(addr_pipe) != 0) return 1;
  for (auto& p : to_rank)
    if (pipe(p.data()) != 0) return 1;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids(world, -1);
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "firedrill-train: fork: %s\n", std::strerror(errno));
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      close(addr_pipe[0]);
      for (int k = 0; k < world; ++k) {
        close(to_rank[k][1]);
        if (k != r) close(to_rank[k][0]);
      }
      const int in = to_rank[r][0];
      std::_Exit(RunRank(job, r, seed, steps, log_every, work, addr_pipe[1], in));
    }
    pids[r] = pid;
  }
  close(addr_pipe[1]);
  for (auto& p : to_rank) close(p[0]);
  // Relay rank 0's store address to the others (or nothing, if rank 0 died
  // first: their reads then see end of file and they fail fast).
  std::string line;
  {
    char c;
    while (read(addr_pipe[0], &c, 1) == 1 && c != '\n') line += c;
    close(addr_pipe[0]);
  }
  for (int r = 0; r < world; ++r) {
    if (r > 0 && !line.empty()) (void)!write(to_rank[r][1], (line + "\n").data(), line.size() + 1);
    close(to_rank[r][1]);
  }
  // A rank that fails leaves its peers waiting in a collective: give them a
  // moment to notice, then stop them.
  int rc = 0;
  int left = world;
  std::vector<bool> done_rank(world, false);
  auto failed_at = std::chrono::steady_clock::time_point::max();
  while (left > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < world; ++r) {
        if (pids[r] != pid) continue;
        done_rank[r] = true;
        --left;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
          rc = 1;
          if (failed_at == std::chrono::steady_clock::time_point::max()) failed_at = std::chrono::steady_clock::now();
          if (!WIFEXITED(status)) std::fprintf(stderr, "firedrill-train: rank %d was killed by signal %d\n", r, WTERMSIG(status));
        }
      }
      continue;
    }
    if (std::chrono::steady_clock::now() - failed_at > std::chrono::seconds(5)) {
      for (int r = 0; r < world; ++r)
        if (!done_rank[r]) kill(pids[r], SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<std::vector<std::pair<int64_t, double>>> losses(world);
  for (int r = 0; r < world; ++r) {
    std::ifstream in(work + "/losses-" + std::to_string(r));
    for (std::string l; std::getline(in, l);) {
      int64_t step = 0;
      double loss = 0;
      if (std::sscanf(l.c_str(), "%" SCNd64 " %la", &step, &loss) == 2) losses[r].emplace_back(step, loss);
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
    for (int r = 0; r < world; ++r) {
      std::ifstream in(work + "/params-" + std::to_string(r), std::ios::binary);
      out << in.rdbuf();
    }
    if (!out) {
      std::fprintf(stderr, "firedrill-train: cannot write %s\n", params_path.c_str());
      rc = 1;
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(work, ec);
  const size_t done = losses.empty() ? 0 : losses[0].size();
  std::printf("%s %zu steps on %d ranks in %.1f s\n", rc == 0 ? "finished" : "FAILED after", done, world, secs);
  return rc;
}
