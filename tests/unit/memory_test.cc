// The tracking allocator (agent/memory.h). It is process-global: every test
// installs it (idempotent) and leaves the budget off and nothing allocated.
#include "agent/memory.h"

#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "agent/model.h"
#include "agent/precision.h"

namespace firedrill::agent {
namespace {

constexpr int64_t kMiB = 1024 * 1024;

class Memory : public ::testing::Test {
 protected:
  void SetUp() override {
    InstallTrackingAllocator();
    ASSERT_TRUE(TrackingAllocatorInstalled());
    SetBudget(0);
  }
  void TearDown() override {
    SetBudget(0);
    ResetPeak();
  }
};

TEST_F(Memory, InstallIsIdempotent) {
  InstallTrackingAllocator();
  InstallTrackingAllocator();
  const int64_t before = LiveBytes();
  {
    auto t = torch::empty({1024}, torch::kFloat);
    EXPECT_EQ(LiveBytes() - before, 4096) << "counted once, not once per install";
  }
  EXPECT_EQ(LiveBytes(), before);
}

TEST_F(Memory, LiveBytesRiseAndFall) {
  const int64_t before = LiveBytes();
  int64_t during = 0;
  {
    auto t = torch::empty({3, kMiB / 4}, torch::kFloat);  // 3 MiB
    during = LiveBytes();
    EXPECT_GE(during - before, static_cast<int64_t>(t.nbytes()));
    auto d = torch::zeros({1000}, torch::kDouble);
    EXPECT_GE(LiveBytes() - during, 8000);
  }
  EXPECT_EQ(LiveBytes(), before) << "freed tensors are uncounted";
  auto empty = torch::empty({0});
  EXPECT_EQ(LiveBytes(), before) << "an empty tensor holds nothing";
}

TEST_F(Memory, PeakTracksTheHighWaterMark) {
  const int64_t base = LiveBytes();
  ResetPeak();
  EXPECT_EQ(PeakBytes(), base);
  {
    auto a = torch::empty({kMiB}, torch::kFloat);          // 4 MiB
    { auto b = torch::empty({kMiB / 2}, torch::kFloat); }  // +2 MiB, freed
  }
  EXPECT_EQ(LiveBytes(), base);
  EXPECT_GE(PeakBytes() - base, 6 * kMiB);
  EXPECT_LT(PeakBytes() - base, 6 * kMiB + 4096);
  ResetPeak();
  EXPECT_EQ(PeakBytes(), base);
}

TEST_F(Memory, RawAllocateInterfaceStillWorks) {
  const int64_t before = LiveBytes();
  c10::Allocator* a = c10::GetCPUAllocator();
  void* p = a->raw_allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << "LibTorch's alignment kept";
  EXPECT_EQ(LiveBytes() - before, 1000);
  a->raw_deallocate(p);
  EXPECT_EQ(LiveBytes(), before);
}

// GELU's CPU kernel asks for 0 raw bytes and hands the nullptr back.
TEST_F(Memory, ZeroByteRawAllocationRoundTrips) {
  const int64_t before = LiveBytes();
  c10::Allocator* a = c10::GetCPUAllocator();
  void* p = a->raw_allocate(0);
  a->raw_deallocate(p);
  EXPECT_EQ(LiveBytes(), before);
  auto x = at::randn({4, 8});
  EXPECT_TRUE(at::gelu(x).isfinite().all().item<bool>());
}

TEST_F(Memory, FormatSizeLikePyTorch) {
  EXPECT_EQ(FormatSize(512), "512 bytes");
  EXPECT_EQ(FormatSize(1024), "1024 bytes");
  EXPECT_EQ(FormatSize(1536), "1.50 KiB");
  EXPECT_EQ(FormatSize(1048576), "1024.00 KiB");
  EXPECT_EQ(FormatSize(20 * kMiB), "20.00 MiB");
  EXPECT_EQ(FormatSize(3ULL << 30), "3.00 GiB");
}

TEST_F(Memory, MessageHasPyTorchsShape) {
  // The figures of the brief's example: 498.21 MiB allocated of 512 MiB.
  const int64_t allocated = 522413015;
  EXPECT_EQ(
      OutOfMemoryMessage(20 * kMiB, 512 * kMiB, allocated, 0),
      "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 512.00 MiB total capacity; "
      "498.21 MiB already allocated; 13.79 MiB free; 498.21 MiB reserved in total by PyTorch) "
      "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  "
      "See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF");
}

TEST_F(Memory, BudgetExceededThrowsCudaLikeErrorAndLeaksNothing) {
  auto keep = torch::empty({kMiB}, torch::kFloat);  // something already allocated
  const int64_t live = LiveBytes();
  const int64_t budget = live + 8 * kMiB;
  SetBudget(budget, /*device_index=*/3);
  EXPECT_EQ(Budget(), budget);
  { auto fits = torch::empty({kMiB}, torch::kFloat); }  // 4 MiB: under budget
  std::string what;
  try {
    auto t = torch::empty({5 * kMiB}, torch::kFloat);  // 20 MiB
    ADD_FAILURE() << "allocation over budget succeeded";
  } catch (const c10::OutOfMemoryError& e) {
    what = e.what_without_backtrace();
    EXPECT_EQ(std::string(e.what()).rfind(what, 0), 0u) << e.what();
  }
  EXPECT_EQ(what, OutOfMemoryMessage(20 * kMiB, budget, live, 3));
  EXPECT_NE(what.find("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 3; " + FormatSize(budget) +
                      " total capacity; " + FormatSize(live) + " already allocated; 8.00 MiB free; "),
            std::string::npos)
      << what;
  EXPECT_EQ(LiveBytes(), live) << "a refused allocation leaves no bytes behind";
  // It is a c10::Error, so ops that allocate inside LibTorch surface it too.
  EXPECT_THROW(torch::matmul(torch::ones({2048, 1}), torch::ones({1, 2048})), c10::Error);
  EXPECT_EQ(LiveBytes(), live);
  // And out of backward (the autograd engine rethrows it unchanged).
  auto w = torch::ones({1024, 1024}, torch::requires_grad());  // 4 MiB, fits
  auto y = torch::matmul(torch::ones({1, 1024}), w).sum();
  try {
    y.backward();  // the 4 MiB weight gradient does not fit any more
    ADD_FAILURE() << "backward over budget succeeded";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA out of memory. Tried to allocate 4.00 MiB"), std::string::npos)
        << e.what();
  }
  w.reset();
  y.reset();
  EXPECT_EQ(LiveBytes(), live);
  SetBudget(0);
  { auto t = torch::empty({5 * kMiB}, torch::kFloat); }
  EXPECT_EQ(LiveBytes(), live);
}

TEST_F(Memory, ConcurrentAllocationsBalance) {
  const int64_t before = LiveBytes();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([i] {
      for (int k = 0; k < 500; ++k) {
        auto t = torch::empty({(k % 7 + 1) * 1000 + i});
        auto u = t.clone();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(LiveBytes(), before);
}

TEST_F(Memory, TensorBytesCountsStoragesOnce) {
  auto flat = torch::zeros({1000});
  auto a = flat.narrow(0, 0, 400);
  auto b = flat.narrow(0, 400, 600);
  EXPECT_EQ(TensorBytes({a, b}), 4000);
  EXPECT_EQ(TensorBytes({flat, flat, a}), 4000);
  EXPECT_EQ(TensorBytes({torch::zeros({10}, torch::kDouble), at::Tensor()}), 80);
  EXPECT_EQ(TensorBytes({}), 0);
}

// One forward+backward of a small MLP: the measured activation peak must
// grow with the batch (activations are batch x width; weights are not).
int64_t ActivationPeak(int64_t batch) {
  torch::manual_seed(1);
  auto w1 = torch::randn({256, 64}, torch::requires_grad());
  auto w2 = torch::randn({256, 256}, torch::requires_grad());
  auto w3 = torch::randn({10, 256}, torch::requires_grad());
  auto x = torch::randn({batch, 64});
  auto step = [&] {
    auto h = torch::relu(torch::nn::functional::linear(x, w1));
    h = torch::relu(torch::nn::functional::linear(h, w2));
    torch::nn::functional::linear(h, w3).pow(2).mean().backward();
  };
  step();  // allocates .grad, so the probe sees activations only
  StepMemoryProbe probe;
  probe.Begin();
  step();
  return probe.End();
}

TEST_F(Memory, ActivationPeakGrowsWithBatch) {
  const int64_t small = ActivationPeak(128);
  const int64_t large = ActivationPeak(2048);
  // At batch 2048 the two hidden activations alone are 2 x 2 MiB.
  EXPECT_GE(large, 2 * 2048 * 256 * 4);
  EXPECT_GT(small, 0);
  EXPECT_GT(static_cast<double>(large) / small, 4.0) << small << " vs " << large << " for 16x the batch";
  StepMemoryProbe idle;
  idle.Begin();
  EXPECT_EQ(idle.End(), 0);
}

// One training step of `spec` in `precision` (after a first step, so .grad
// exists): what forward leaves for backward (live at the loss) and the
// step's activation peak, as the trainer's probe reports it.
struct StepBytes {
  double saved = 0, peak = 0;
};
StepBytes ModelStepBytes(const v1::ModelSpec& spec, const Batch& batch, const std::string& precision) {
  auto model = CreateModel(spec, 7);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  auto prec = Precision::FromName(precision);
  EXPECT_TRUE(prec.ok());
  (*model)->seam() = MakeSeam(*prec);
  auto first = (*model)->Loss(batch);
  EXPECT_TRUE(first.ok()) << first.status().ToString();
  first->backward();
  StepBytes bytes;
  StepMemoryProbe probe;
  probe.Begin();
  const int64_t before = LiveBytes();
  {
    auto loss = (*model)->Loss(batch);
    bytes.saved = static_cast<double>(LiveBytes() - before);
    loss->backward();
  }
  bytes.peak = static_cast<double>(probe.End());
  return bytes;
}

// bf16 and fp16 keep activations in 2-byte tensors, as on a GPU: what
// forward saves for backward halves against fp32 on the same job, and so
// does most of the step's peak. Not all of it: the 2-byte weight copies are
// new (as under autocast) and each op upcasts a piece at a time to compute
// on CPU. Measured, against fp32: mlp (6 x 512, LayerNorm, batch 1024)
// saved 0.64, peak 0.69 (bf16) and 0.72 (fp16); gpt-tiny (4 x 64, 16 x 128
// tokens) saved 0.53, peak 0.57. Both 1.0 or more if activations were fp32.
TEST_F(Memory, TwoBytePrecisionsHalveWhatForwardSaves) {
  v1::ModelSpec mlp;
  mlp.set_kind("mlp");
  mlp.set_input_dim(256);
  mlp.set_hidden(512);
  mlp.set_layers(6);
  mlp.set_num_classes(10);
  mlp.set_norm("layer");
  Batch rows;
  rows.x = torch::randn({1024, 256});
  rows.y = torch::randint(10, {1024}, torch::kLong);

  v1::ModelSpec gpt;
  gpt.set_kind("gpt-tiny");
  gpt.set_hidden(64);
  gpt.set_layers(4);
  gpt.set_heads(4);
  gpt.set_seq_len(128);
  Batch tokens;
  tokens.x = torch::randint(256, {16, 128}, torch::kLong);
  tokens.y = torch::randint(256, {16, 128}, torch::kLong);

  for (const auto& [name, spec, batch] : {std::tuple{"mlp", mlp, rows}, {"gpt-tiny", gpt, tokens}}) {
    const StepBytes fp32 = ModelStepBytes(spec, batch, "fp32");
    for (const char* low : {"bf16", "fp16"}) {
      const StepBytes b = ModelStepBytes(spec, batch, low);
      const std::string key = std::string(name) + "_" + low;
      RecordProperty(key + "_saved_vs_fp32", std::to_string(b.saved / fp32.saved));
      RecordProperty(key + "_peak_vs_fp32", std::to_string(b.peak / fp32.peak));
      EXPECT_LT(b.saved / fp32.saved, 0.7) << key << ": " << b.saved << " B against " << fp32.saved;
      EXPECT_LT(b.peak / fp32.peak, 0.8) << key << ": " << b.peak << " B against " << fp32.peak;
    }
  }
}

}  // namespace
}  // namespace firedrill::agent
