#include "agent/data.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "common/rng.h"

namespace firedrill::agent {

namespace {

uint64_t SampleSeed(uint64_t seed, int64_t index) {
  return SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(index) + 0x5851F42D4C957F2DULL));
}

}  // namespace

struct SampleSource::Impl {
  DataOptions opts;
  at::Generator gen;
  at::Tensor teacher;  // [input_dim, num_classes]
};

SampleSource::SampleSource(const DataOptions& opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = opts;
  // Explicit generators: the global one is shared by every trainer in the
  // process (tests run ranks as threads), so it cannot give determinism.
  impl_->gen = at::make_generator<at::CPUGeneratorImpl>(SplitMix64(opts.seed ^ HashLabel("data.teacher")));
  impl_->teacher = at::empty({opts.input_dim, opts.num_classes}, at::kFloat);
  impl_->teacher.normal_(0.0, 1.0, impl_->gen);
}

SampleSource::~SampleSource() = default;

Batch SampleSource::Make(int64_t step) {
  const auto& o = impl_->opts;
  Batch b;
  b.step = step;
  // One stream per batch, keyed by the batch's first global sample index:
  // a single vectorised normal_ is ~5x cheaper than reseeding per sample,
  // and data generation shares the cores with the ranks' compute.
  const int64_t first = GlobalSampleIndex(step, o.rank, o.world_size, o.batch_size, 0);
  {
    std::lock_guard<std::mutex> lock(impl_->gen.mutex());
    impl_->gen.set_current_seed(SampleSeed(o.seed, first));
  }
  b.x = at::empty({o.batch_size, o.input_dim}, at::kFloat);
  b.x.normal_(0.0, 1.0, impl_->gen);
  b.y = at::matmul(b.x, impl_->teacher).argmax(1);
  return b;
}

DataLoader::DataLoader(const DataOptions& opts, int64_t first_step)
    : opts_(opts), depth_(std::max(1, opts.prefetch_depth)), next_claim_(first_step), next_take_(first_step) {
  if (opts_.num_workers <= 0) {
    inline_source_ = std::make_unique<SampleSource>(opts_);
    return;
  }
  slots_.resize(depth_);
  for (int w = 0; w < opts_.num_workers; ++w) workers_.emplace_back([this, w] { WorkerLoop(w); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void DataLoader::WorkerLoop(int worker) {
  std::unique_ptr<SampleSource> source;
  try {
    at::set_num_threads(std::max(1, opts_.threads));
    source = std::make_unique<SampleSource>(opts_);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = Internal("data worker " + std::to_string(worker) + " failed to start: " + e.what());
    cv_.notify_all();
    return;
  }
  while (true) {
    int64_t step;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // The window bounds memory and keeps workers from racing far ahead of
      // a stalled trainer.
      cv_.wait(lock, [&] { return stop_ || next_claim_ < next_take_ + depth_; });
      if (stop_) return;
      step = next_claim_++;
    }
    Batch b;
    Status err;
    try {
      b = source->Make(step);
    } catch (const std::exception& e) {
      err = Internal("data worker " + std::to_string(worker) + " failed on step " + std::to_string(step) + ": " +
                     e.what());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!err.ok()) {
        if (error_.ok()) error_ = err;
      } else {
        slots_[step % depth_] = std::move(b);
      }
    }
    cv_.notify_all();
    if (!err.ok()) return;
  }
}

StatusOr<Batch> DataLoader::Next() {
  if (inline_source_) {
    try {
      return inline_source_->Make(next_take_++);
    } catch (const std::exception& e) {
      return Internal("data for step " + std::to_string(next_take_ - 1) + " failed: " + e.what());
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  Batch* slot = &slots_[next_take_ % depth_];
  cv_.wait(lock, [&] { return slot->step == next_take_ || !error_.ok(); });
  if (slot->step != next_take_) return error_;
  Batch b = std::move(*slot);
  *slot = Batch{};
  ++next_take_;
  lock.unlock();
  cv_.notify_all();
  return b;
}

}  // namespace firedrill::agent
