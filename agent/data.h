// Synthetic classification data, deterministic down to the bit: each batch
// is N(0,1) inputs drawn from a generator seeded by (seed, global index of
// the batch's first sample), each label the argmax of a fixed random
// "teacher" linear map, so a model can learn it and the loss visibly falls.
// A batch never depends on which thread made it or when.
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"

namespace firedrill::agent {

struct DataOptions {
  uint64_t seed = 1;
  int rank = 0;
  int world_size = 1;
  int batch_size = 32;  // per rank
  int input_dim = 64;
  int num_classes = 10;
  int num_workers = 0;      // 0: batches are made on the caller's thread
  int prefetch_depth = 2;   // batches made ahead of the consumer, all workers together
  int threads = 1;          // intra-op threads for worker threads
};

struct Batch {
  int64_t step = -1;
  at::Tensor x;  // [batch, input_dim] float
  at::Tensor y;  // [batch] int64 class index
};

// Global index of sample j of `rank`'s batch at `step`: every rank reads a
// disjoint shard, and consecutive steps never reuse a sample.
inline int64_t GlobalSampleIndex(int64_t step, int rank, int world_size, int batch_size, int j) {
  return (step * world_size + rank) * static_cast<int64_t>(batch_size) + j;
}

// Makes batches; not thread-safe (owns a generator): one per thread.
class SampleSource {
 public:
  explicit SampleSource(const DataOptions& opts);
  ~SampleSource();
  Batch Make(int64_t step);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Hands out batches for consecutive steps from `first_step`, made ahead by
// background workers into a bounded window (prefetch_depth).
class DataLoader {
 public:
  DataLoader(const DataOptions& opts, int64_t first_step);
  ~DataLoader();  // stops and joins the workers
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next step's batch; blocks while the workers are behind.
  StatusOr<Batch> Next();

 private:
  void WorkerLoop(int worker);

  DataOptions opts_;
  int depth_;
  std::unique_ptr<SampleSource> inline_source_;  // num_workers == 0
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t next_claim_;  // next step a worker will make
  int64_t next_take_;   // next step Next() returns
  std::vector<Batch> slots_;  // step % depth_
  Status error_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace firedrill::agent
