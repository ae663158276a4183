// ZeRO stage 1 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward
// Training Trillion Parameter Models", SC 2020): the optimiser's state is
// partitioned across the data-parallel ranks instead of replicated on each.
// With AdamW that is the two moments, 8 bytes a parameter (in fp32), of
// which each rank now keeps 1/world.
//
// How a step runs here, as PyTorch's ZeroRedundancyOptimizer runs it: the
// gradients are averaged as DDP averages them (the reducer's bucketed
// all-reduce, overlapped with backward, unchanged), so every rank holds all
// of them; each rank steps only its partition of the parameters, with
// optimiser state for that partition alone; then one all-gather puts every
// rank's updated partition into every rank's parameters. DeepSpeed's stage
// 1 reduce-scatters the gradients instead (each rank receives only the sums
// it steps: the all-gather's bytes again, no more), which this trainer
// cannot do without giving up what rides in the averaged buckets (the
// ranks' stop and probe votes, fp16's inf check on every gradient).
//
// The partition: the parameters (fp32 masters), flattened in registration
// order into one index space of N elements, cut into `world` contiguous
// chunks of ceil(N / world) elements; rank r owns [r*c, min(N, (r+1)*c)),
// the last rank's chunk padded for the all-gather. The optimiser
// (agent/optim.h) runs over one flat tensor holding this rank's chunk. Its
// update is elementwise, so a parameter's new value does not depend on
// which rank computed it: a ZeRO-1 run trains the weights of the replicated
// one (bitwise with SGD, whose kernel is ours; tests/integration/zero_test.cc).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "agent/checkpoint.h"
#include "agent/optim.h"
#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::agent {

namespace comm {
class ProcessGroup;
}

// Which elements of the flattened parameters each rank owns.
struct ZeroLayout {
  int64_t numel = 0;  // N: every parameter's elements
  int world = 1;
  int64_t chunk = 0;  // ceil(N / world)
  int64_t Begin(int rank) const { return std::min<int64_t>(numel, rank * chunk); }
  int64_t End(int rank) const { return std::min<int64_t>(numel, (rank + 1) * chunk); }
};
ZeroLayout MakeZeroLayout(int64_t numel, int world);

class ZeroOptimizer final : public Optimizer {
 public:
  // `params`: the model's fp32 parameters, in registration order.
  static StatusOr<std::unique_ptr<ZeroOptimizer>> Create(const v1::OptimSpec& spec,
                                                         std::vector<at::Tensor> params, int rank, int world);

  // Steps this rank's partition from the parameters' averaged gradients
  // (every rank holds them all) and returns the sum of squares of all of
  // them, as the replicated optimiser does. With `zero_grad` every
  // parameter's gradient is zeroed. The parameters outside the partition are
  // not touched until Gather.
  double Step(double lr, bool zero_grad) override;

  // Collective: every rank's updated partition into every rank's
  // parameters: all-gathers of at most kGatherSlice elements of each
  // rank's chunk at a time (DeepSpeed's allgather_bucket_size), so what it
  // holds at once is world x slice, not a second copy of the model.
  static constexpr int64_t kGatherSlice = int64_t{1} << 16;
  Status Gather(comm::ProcessGroup& pg, int64_t step);

  const char* kind() const override { return inner_->kind(); }
  int64_t steps() const override { return inner_->steps(); }
  // The partition's state, named as the inner optimiser names it for its
  // one flat parameter ("exp_avg.0", "momentum_buffer.0", "step"): the
  // elements [Begin(rank), End(rank)) of the flattened parameters.
  std::vector<std::pair<std::string, at::Tensor>> State() const override { return inner_->State(); }
  // The partition's state, and the flat fp32 copy of its parameters and
  // their gradients that the inner optimiser steps: 8 bytes a parameter of
  // the partition beside AdamW's 8 (parallel::PlanStrategy counts the same).
  int64_t state_bytes() const override {
    return inner_->state_bytes() + 2 * own_.numel() * static_cast<int64_t>(sizeof(float));
  }

  const ZeroLayout& layout() const { return layout_; }
  int rank() const { return rank_; }

 private:
  ZeroOptimizer(std::vector<at::Tensor> params, ZeroLayout layout, int rank);
  Status LoadStateUnchecked(const std::vector<std::pair<std::string, at::Tensor>>& state) override;
  // Copies elements [Begin, End) of the flattened tensors `from` (each the
  // same shape as its parameter) into `to` (a flat chunk), or back.
  void Slice(const std::vector<at::Tensor>& from, at::Tensor& to) const;
  // Copies `src` into the flattened parameters from element `begin`,
  // dropping what lies at or past `end` (the last chunk's padding).
  void Place(const at::Tensor& src, int64_t begin, int64_t end);

  std::vector<at::Tensor> params_;
  ZeroLayout layout_;
  int rank_ = 0;
  at::Tensor own_;  // this rank's chunk of the parameters, with .grad its gradients
  std::unique_ptr<Optimizer> inner_;
};

}  // namespace firedrill::agent

namespace firedrill::agent {

// ZeRO-1's checkpoint (format 2, agent/checkpoint.h): the map rank 0 writes
// into the manifest. Every model tensor once, in rank 0's shard (`model`:
// each parameter's checkpoint name, "model/<name>", and its elements); every
// tensor of the partitioned optimiser state (`state`: the checkpoint names
// of the inner optimiser's state of its one flat parameter, "optim/exp_avg.0",
// ..., the step count excepted) in `layout.world` chunks, rank r's in rank
// r's shard.
std::map<std::string, TensorPlacement> PlacePartitionedState(
    const std::vector<std::pair<std::string, int64_t>>& model, const std::vector<std::string>& state,
    const ZeroLayout& layout);

// This rank's state for a job of `world` ranks, from a checkpoint of either
// format. Format 1: this rank's own shard (the world size must be the
// checkpoint's). Format 2: assembled from the shards the manifest's map
// names, as torch.distributed.checkpoint's load planner reads what each
// rank needs: the model from the shard that holds it once, this rank's
// partition of every partitioned tensor cut from the chunks that cover it
// (at another world size than the checkpoint's, other chunks: a reshard),
// the rest (RNG, loss scale, step, data cursor) from this rank's own shard,
// or rank 0's for a rank the checkpoint did not have. At another world size
// than the checkpoint's, with `carry_data`, the data cursor is carried by
// the samples consumed into `job`'s micro-batches (FailedPrecondition where
// that would not name the same samples: see CarryCursor); without it the
// cursor is left as saved (a resume that does not restore the data).
// Every shard read is verified (size, SHA-256).
StatusOr<ShardData> LoadRankState(const std::string& step_dir, int rank, const v1::JobSpec& job,
                                  const LoadExpect& expect, bool carry_data = true);

}  // namespace firedrill::agent
