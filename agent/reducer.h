// DDP-style gradient averaging: parameters are grouped into buckets, each a
// contiguous flat tensor that the parameters' .grad are views into, so that
// autograd accumulates straight into the buffer that is all-reduced. Hooks on
// each parameter's AccumulateGrad node count ready gradients; when the last
// gradient of a bucket arrives its all-reduce is started asynchronously, so
// communication overlaps the rest of backward, as in PyTorch DDP.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/status.h"

namespace firedrill::agent {

namespace comm {
class ProcessGroup;
}

// PyTorch DDP's defaults (MiB, as DDP multiplies by 1024*1024).
constexpr double kDefaultBucketMb = 25.0;
constexpr double kDefaultFirstBucketMb = 1.0;

// Megabytes from a JobSpec field to bytes: 0 selects the default; DDP's MB
// are MiB.
int64_t BucketBytes(double mb, double default_mb);

// Which parameters share a bucket, as DDP's compute_bucket_assignment_by_size
// does it: parameters are taken in reverse registration order (the order in
// which backward produces their gradients), a bucket is closed as soon as it
// holds at least its cap (so one large parameter may exceed it, and never
// shares), the first bucket's cap is `first_cap_bytes`, later ones
// `cap_bytes`. Buckets come out in launch order; the last one holds
// parameter 0. Pure, so every rank computes the same answer from the same
// model.
std::vector<std::vector<size_t>> AssignBuckets(const std::vector<int64_t>& param_bytes,
                                               int64_t first_cap_bytes, int64_t cap_bytes);

struct ReducerOptions {
  int64_t first_bucket_bytes = 1 << 20;
  int64_t bucket_bytes = 25 << 20;
  // One bucket with every gradient, all-reduced after backward returns (no
  // overlap): the simple baseline, and what a too-large bucket amounts to.
  bool flat = false;
  int world_size = 1;
  int rank = 0;  // for messages
  // On the thread running backward, just before a bucket's all-reduce starts
  // from its hook (a slowed device's sleep fallback stretches here).
  std::function<void()> before_launch;
};

struct BucketTiming {
  int64_t seq = 0;
  int64_t bytes = 0;
  std::chrono::steady_clock::time_point launched, completed;
};

// The ranks' votes ride in one float at the end of the last gradient bucket,
// all-reduced with it (each rank's value times 1/world, then summed): stop
// counts 1 and probe counts world + 1, so world x the sum says how many ranks
// voted for each. The shared compute stretch (ShareStretch()) follows it.
float EncodeVotes(bool stop, bool probe, int world);
void DecodeVotes(float reduced, int world, bool* stop, bool* probe);

struct ReduceStats {
  bool stop = false;      // some rank asked to stop (flag rides in the last bucket)
  bool probe = false;     // some rank has a communication probe waiting (same flag)
  double peer_stretch = 0;  // the mean of the stretches the ranks shared; 0: none did
  double exposed_ms = 0;  // waiting for buckets after backward returned
  double total_ms = 0;    // sum over buckets of start -> completion
  int buckets = 0;
  int64_t bytes = 0;                // all-reduced this step
  int started_in_backward = 0;      // buckets an autograd hook started (overlapped)
  std::vector<int64_t> bucket_seq;  // collective sequence number per bucket
  std::vector<BucketTiming> timings;  // per bucket, in launch order (for traces)
  std::chrono::steady_clock::time_point wait_start;  // when Finish() began waiting
};

class Reducer {
 public:
  // `params` are the model's parameters (dense, same dtype, requiring
  // grad); their .grad become views into the buckets.
  static StatusOr<std::unique_ptr<Reducer>> Create(const std::vector<at::Tensor>& params,
                                                   const ReducerOptions& opts);
  ~Reducer();

  // Once per run, after `pg` connected and before any step: moves the
  // buckets into the group's shared-memory region when every rank can map
  // one (ranks on one host), so that their all-reduces skip the network
  // stack; otherwise they stay where they are, on Gloo. Collective.
  Status Bind(comm::ProcessGroup* pg);

  // Before each micro-batch's backward. `sync` false is DDP's no_sync():
  // gradients only accumulate locally and no hook starts a collective.
  // `stop` is this rank's vote to stop and `probe` its vote to run a probe
  // after this step, both sent with the last bucket.
  void Prepare(comm::ProcessGroup* pg, int64_t step, bool sync, bool stop, bool probe = false);
  // What this rank shares with its next synchronising all-reduce: its
  // compute's stretch (faults::ThrottledCompute::SharedStretch(); 0: none,
  // as a slowed rank shares). ReduceStats::peer_stretch is their mean over
  // the ranks that shared one: what a slowed rank's governor steers by.
  void ShareStretch(double stretch);

  // After a synchronising backward: starts the buckets no hook started
  // (all of them when flat, or those holding unused parameters), waits for
  // every bucket in order, and leaves the averaged gradients in .grad.
  // Errors name rank, step, collective and bucket.
  StatusOr<ReduceStats> Finish();

  // Zeroes every gradient in place (the views stay).
  void ZeroGrad();

  // If autograd ever replaced a .grad instead of accumulating into it, copy
  // it back into the bucket and restore the view. Cheap: pointer compares.
  void RebindGrads();

  // Gradients of each bucket, the trailer (votes, shared stretch) excluded: the flat tensors the
  // optimiser and the gradient-norm pass may walk instead of per-parameter
  // views.
  const std::vector<at::Tensor>& bucket_grads() const;
  // Parameter indices per bucket, in launch order.
  const std::vector<std::vector<size_t>>& assignment() const;
  int64_t grad_bytes() const;

  struct Impl;  // opaque; public only so that reducer.cc's autograd hook can name it

 private:
  explicit Reducer(std::shared_ptr<Impl> impl);
  // Shared with the autograd hooks, which may outlive this object inside a
  // graph that was never run backward.
  std::shared_ptr<Impl> impl_;
};

}  // namespace firedrill::agent
