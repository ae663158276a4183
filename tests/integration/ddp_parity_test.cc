// firedrill's Trainer against PyTorch DDP on the same job: world 2, gradient
// accumulation 2 (DDP's no_sync() on the first micro-batch), SGD with
// momentum, weight decay, warmup and linear LR scaling. firedrill runs first
// (ranks as threads) and exports its initial weights and every batch each
// rank trained on; tests/python/ddp_reference.py then trains the same thing
// in two Python processes (launched by hand: Debian's torchrun is broken),
// and per-step losses and final parameters must agree to 1e-5 relative.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "agent/data.h"
#include "agent/trainer.h"

namespace firedrill::agent {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";
constexpr int kWorld = 2, kAccum = 2, kSteps = 8, kBatch = 16;

v1::JobSpec ParityJob() {
  v1::JobSpec job;
  job.set_world_size(kWorld);
  auto* m = job.mutable_model();
  m->set_kind("mlp");
  m->set_input_dim(32);
  m->set_hidden(64);
  m->set_layers(2);
  m->set_num_classes(5);
  job.mutable_data()->set_batch_size(kBatch);
  job.mutable_data()->set_seed(7);
  auto* o = job.mutable_optim();
  o->set_kind("sgd");
  o->set_lr(0.05);
  o->set_momentum(0.9);
  o->set_weight_decay(1e-3);
  o->set_warmup_steps(3);
  o->set_lr_scaling("linear");
  o->set_reference_global_batch(32);  // global batch 16 x 2 x 2 = 64: lr x2
  job.set_grad_accum_steps(kAccum);
  job.set_precision("fp32");
  job.set_steps(kSteps);
  job.mutable_comm()->set_timeout_s(10);
  // Small buckets: several all-reduces started from hooks, not one.
  job.mutable_comm()->set_bucket_mb(0.005);
  job.mutable_comm()->set_first_bucket_mb(0.002);
  job.set_threads_per_rank(1);
  return job;
}

bool PythonHasTorch() {
  const std::string cmd = std::string(kPython) + " -c 'import torch, torch.distributed' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

void Save(const c10::Dict<std::string, at::Tensor>& d, const fs::path& path) {
  const auto bytes = torch::pickle_save(c10::IValue(d));
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<double> ReadNumbers(const fs::path& path) {
  std::vector<double> out;
  std::ifstream in(path);
  double v;
  while (in >> v) out.push_back(v);
  return out;
}

struct Rank {
  Status status;
  std::vector<v1::StepReport> reports;
  std::vector<float> params;
  c10::Dict<std::string, at::Tensor> batches;
};

TEST(DdpParityTest, MatchesPyTorchDdpWithAccumulationAndMomentum) {
  if (!PythonHasTorch()) {
    GTEST_SKIP() << kPython
                 << " cannot import torch: install Debian's python3-torch (scripts/bootstrap.sh does) "
                 << "to compare against PyTorch DDP";
  }
  const auto job = ParityJob();
  const fs::path dir = fs::temp_directory_path() / ("fd_parity_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);

  // firedrill, ranks as threads.
  std::promise<StoreAddress> addr_promise;
  auto addr = addr_promise.get_future().share();
  std::vector<Rank> ranks(kWorld);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      TrainerOptions o;
      o.job = job;
      o.rank = r;
      o.seed = 11;
      if (r == 0) {
        o.store_ready = [&](const StoreAddress& a) { addr_promise.set_value(a); };
      } else {
        o.await_store = [&]() -> StatusOr<StoreAddress> {
          if (addr.wait_for(std::chrono::seconds(20)) != std::future_status::ready)
            return Unavailable("no store");
          return addr.get();
        };
      }
      auto& res = ranks[r];
      o.on_batch = [&res](int64_t step, int micro, const Batch& b) {
        const auto i = std::to_string(step * kAccum + micro);
        res.batches.insert("x." + i, b.x.clone());
        res.batches.insert("y." + i, b.y.clone());
      };
      auto trainer = Trainer::Create(o);
      if (!trainer.ok()) {
        res.status = trainer.status();
        return;
      }
      if (r == 0) {
        res.status = (*trainer)->ExportParameters((dir / "init.pt").string());
        if (!res.status.ok()) return;
      }
      res.status = (*trainer)->Run(stop, [&res](const v1::StepReport& rep) { res.reports.push_back(rep); });
      res.params = (*trainer)->FlatParameters();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(ranks[r].status.ok()) << ranks[r].status.ToString();
    ASSERT_EQ(ranks[r].reports.size(), static_cast<size_t>(kSteps));
    Save(ranks[r].batches, dir / ("batches_rank" + std::to_string(r) + ".pt"));
  }
  const auto& rep0 = ranks[0].reports;
  EXPECT_EQ(rep0[0].micro_batches(), kAccum);
  EXPECT_EQ(rep0[0].global_batch(), kBatch * kAccum * kWorld);
  EXPECT_GT(rep0[0].grad_norm(), 0);
  EXPECT_GT(rep0[0].collective_seq(), 2) << "expected several buckets per step";
  const double lr = 0.05 * (kBatch * kAccum * kWorld) / 32.0;
  EXPECT_DOUBLE_EQ(rep0[0].lr(), lr / 3);
  EXPECT_DOUBLE_EQ(rep0[2].lr(), lr);

  // PyTorch DDP, two processes.
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string script = std::string(FIREDRILL_SOURCE_DIR) + "/tests/python/ddp_reference.py";
  char args[512];
  std::snprintf(args, sizeof args,
                "--dir %s --input 32 --hidden 64 --layers 2 --classes 5 --steps %d --accum %d --lr %.17g "
                "--momentum 0.9 --weight-decay 0.001 --warmup 3",
                dir.c_str(), kSteps, kAccum, lr);
  std::string cmd = "cd " + dir.string() +
                    " && export MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                    " WORLD_SIZE=2 OMP_NUM_THREADS=1; ";
  for (int r = 0; r < kWorld; ++r) {
    cmd += "RANK=" + std::to_string(r) + " timeout 120 " + kPython + " " + script + " " + args + " > rank" +
           std::to_string(r) + ".log 2>&1 & p" + std::to_string(r) + "=$!; ";
  }
  cmd += "wait $p0; s0=$?; wait $p1; s1=$?; exit $((s0 | s1))";
  const int rc = std::system(("bash -c '" + cmd + "'").c_str());
  if (rc != 0) {
    std::ifstream log(dir / "rank0.log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    FAIL() << "PyTorch reference failed (rc " << rc << "); rank 0 log:\n" << text;
  }

  double worst_loss = 0, worst_param = 0;
  for (int r = 0; r < kWorld; ++r) {
    const auto want = ReadNumbers(dir / ("losses_rank" + std::to_string(r) + ".txt"));
    ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
    for (int s = 0; s < kSteps; ++s) {
      const double got = ranks[r].reports[s].loss();
      const double rel = std::abs(got - want[s]) / std::abs(want[s]);
      worst_loss = std::max(worst_loss, rel);
      EXPECT_LE(rel, 1e-5) << "rank " << r << " step " << s << ": firedrill " << got << " PyTorch "
                           << want[s];
    }
    const auto params = ReadNumbers(dir / ("params_rank" + std::to_string(r) + ".txt"));
    ASSERT_EQ(params.size(), ranks[r].params.size());
    // Relative to the parameter's scale, so that elements that happen to
    // sit near zero do not demand more than fp32 can give.
    double scale = 0;
    for (double v : params) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < params.size(); ++i) {
      const double rel =
          std::abs(ranks[r].params[i] - params[i]) / std::max(std::abs(params[i]), 1e-2 * scale);
      worst_param = std::max(worst_param, rel);
      if (rel > 1e-5) {
        ADD_FAILURE() << "rank " << r << " parameter element " << i << ": firedrill " << ranks[r].params[i]
                      << " PyTorch " << params[i];
        break;
      }
    }
  }
  std::printf("firedrill vs PyTorch DDP: worst relative difference %.3g in losses, %.3g in parameters\n",
              worst_loss, worst_param);
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace firedrill::agent
