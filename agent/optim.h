// Optimisers and the learning-rate rules. The update maths follow PyTorch
// 1.13's torch.optim.SGD and torch.optim.AdamW (single-tensor path) step for
// step, so that a run here and a run in PyTorch from the same weights on the
// same batches agree (tests/integration/ddp_parity_test.cc).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::agent {

// Checks an OptimSpec once; messages name the field.
Status ValidateOptimSpec(const v1::OptimSpec& spec);

// The learning rate the schedule ramps to: spec.lr, tuned at
// reference_global_batch, scaled to `global_batch` by spec.lr_scaling:
// "linear" lr*G/R (Goyal et al.), "sqrt" lr*sqrt(G/R), "none"/"" lr.
double ScaledLr(const v1::OptimSpec& spec, int64_t global_batch);

// Learning rate of optimiser step `step` (0-based) under a linear warmup of
// `warmup_steps`: target * min(1, (step+1)/warmup_steps); the target itself
// when warmup_steps is 0. This is exactly what PyTorch gives with
//   sched = LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup_steps))
// and sched.step() called after each opt.step(): step 0 already uses
// target/warmup_steps (never 0), step warmup_steps-1 and later the target.
double ScheduledLr(double target, int warmup_steps, int64_t step);

// Sum of squares of all elements (in double): the squared global L2 norm
// when the tensors are the averaged gradients.
double SquaredNorm(const std::vector<at::Tensor>& tensors);

class Optimizer {
 public:
  // `params` are updated in place from their .grad.
  static StatusOr<std::unique_ptr<Optimizer>> Create(const v1::OptimSpec& spec,
                                                     std::vector<at::Tensor> params);
  virtual ~Optimizer() = default;

  // One update with learning rate `lr`. Returns the sum of squares of the
  // gradients it read (before weight decay), so that the gradient norm costs
  // no extra pass over memory. With `zero_grad`, the gradients are zeroed in
  // the same pass (SGD) or right after (AdamW).
  virtual double Step(double lr, bool zero_grad) = 0;

  virtual const char* kind() const = 0;
  // Steps taken (restored by LoadState).
  virtual int64_t steps() const = 0;

  // State for checkpoints, named like PyTorch's state_dict entries with the
  // parameter index: "momentum_buffer.3", "exp_avg.0", "exp_avg_sq.0",
  // "step". The tensors alias the live state (copy before mutating).
  // Entries appear once they exist, as in PyTorch (no momentum buffer
  // before the first step).
  virtual std::vector<std::pair<std::string, at::Tensor>> State() const = 0;
  // Replaces the state with a previous State(); shapes must match. On error
  // the state is unchanged.
  Status LoadState(const std::vector<std::pair<std::string, at::Tensor>>& state);
  // Bytes of optimiser state currently held (`probe memory`'s OPTIM).
  virtual int64_t state_bytes() const;

 private:
  // May throw (LibTorch conversions); LoadState turns that into a Status.
  virtual Status LoadStateUnchecked(const std::vector<std::pair<std::string, at::Tensor>>& state) = 0;
};

}  // namespace firedrill::agent
