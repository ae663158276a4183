// Mixed precision on CPU with fp32 master weights.
//
//   fp32 — everything in fp32; every helper below is the identity.
//   bf16 — real bf16 compute (LibTorch 1.13 runs bf16 Linear forward and
//          backward on CPU). Weight()/Input() cast with `.to(kBFloat16)`,
//          which is differentiable: its backward casts the gradient back to
//          fp32, so the fp32 master parameters get fp32 .grad — the same as
//          autocast's casts on GPU (checked in tests/unit/fp16_test.cc).
//   fp16 — LibTorch 1.13 has no fp16 matmul on CPU, so fp16 is emulated: the
//          compute is fp32, but every value that would live in fp16 memory on
//          a GPU (inputs, weights, activations at layer boundaries, and the
//          gradients flowing back through them) is rounded through IEEE half
//          by HalfBoundary. So >65504 really becomes inf and gradients below
//          ~2.98e-8 (half the smallest subnormal 2^-24) really flush to 0.
//          Weights: Weight(w) is HalfBoundary(w), NOT a plain straight-through
//          estimator: its backward rounds the weight gradient through half
//          too, because under real fp16 autocast the gradient w.r.t. the
//          fp16 weight copy is an fp16 tensor before the cast's backward
//          turns it into the fp32 master .grad. That is what makes an
//          unscaled fp16 run lose small weight gradients and a too-large
//          scale overflow them — the behaviour loss scaling exists for.
//
// How the model (agent/model.cc, agent/gpt.cc) uses it in forward:
//
//   x = prec.Input(x);                       // once, on the batch input
//   h = Linear(prec, x, lin->weight, lin->bias);   // instead of lin->forward
//   h = torch::relu(h);                      // relu/dropout/views keep
//                                            // half values half: no rounding
//   h = prec.Boundary(h + residual);         // after any op that makes new
//                                            // values stored in fp16 (adds,
//                                            // gelu, attention scores, ...)
//   logits = prec.Output(h);                 // fp32 for the loss (autocast
//                                            // runs softmax/CE in fp32)
//
// Ops autocast keeps in fp32 (layer_norm, softmax, losses) can be fed
// prec.Output(x) (fp32) and their result passed through prec.Boundary()
// / re-cast with prec.Input() before the next matmul. Embedding tables:
// use prec.Weight(table) like any weight.
//
// Loss scaling (fp16 only, see loss_scaler.h): needs_loss_scaling() says
// whether the trainer should scale the loss; UnscaleAndCheck() below is
// the unscale + inf/NaN check to run on the gradients after all-reduce.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "agent/seam.h"
#include "common/status.h"

namespace firedrill::v1 {
class JobSpec;
}

namespace firedrill::agent {

// Rounds through IEEE half in forward (x.to(kHalf).to(kFloat)) and the
// incoming gradient through half in backward. Input must be fp32; output is
// fp32 holding only half-representable values.
at::Tensor HalfBoundary(const at::Tensor& x);

class Precision {
 public:
  enum class Kind { kFp32, kBf16, kFp16 };

  // job.precision: "fp32" (also ""), "bf16" or "fp16"; anything else is
  // InvalidArgument.
  static StatusOr<Precision> FromJob(const v1::JobSpec& job);
  static StatusOr<Precision> FromName(const std::string& name);
  explicit Precision(Kind kind = Kind::kFp32) : kind_(kind) {}

  Kind kind() const { return kind_; }
  const char* name() const;
  // dtype matmuls actually run in: kFloat for fp32 and fp16 (emulated),
  // kBFloat16 for bf16.
  at::ScalarType compute_dtype() const;
  // dtype values are stored in between layers: kHalf for fp16 (emulated by
  // rounding, the tensors themselves are kFloat), else compute_dtype().
  at::ScalarType storage_dtype() const;
  // True for fp16 only: bf16 has fp32's exponent range and needs none.
  bool needs_loss_scaling() const { return kind_ == Kind::kFp16; }

  // fp32/bf16: x. fp16: HalfBoundary(x). Call after each layer's output.
  at::Tensor Boundary(const at::Tensor& x) const;
  // fp32: w. bf16: w.to(kBFloat16) (fp32 grad to the master). fp16:
  // HalfBoundary(w) (half-rounded weight, half-rounded fp32 grad).
  at::Tensor Weight(const at::Tensor& w) const;
  // The batch input (or any tensor entering a matmul): same casts as Weight.
  at::Tensor Input(const at::Tensor& x) const;
  // Back to fp32 (differentiable) for losses, norms, softmax.
  at::Tensor Output(const at::Tensor& y) const;

 private:
  Kind kind_;
};

// Reference Linear: y = Boundary(linear(Input(x), Weight(w), Weight(b))).
// `b` may be undefined. bf16 returns a bf16 tensor; fp32/fp16 an fp32 one.
at::Tensor Linear(const Precision& prec, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

// The seam a model runs `prec` through: empty for fp32 (the models' plain
// at::linear path), else Linear(prec, ...) and prec.Boundary.
ComputeSeam MakeSeam(const Precision& prec);

// GradScaler's unscale step (torch._amp_foreach_non_finite_check_and_unscale_,
// which in 1.13 has no CPU kernel): multiplies every element by
// float(inv_scale) in place, and returns true if any element was inf or NaN
// (checked before the multiply, as PyTorch does). One pass over memory for a
// contiguous fp32 tensor; other tensors fall back to ATen ops. Call it under
// no-grad on the gradients after the all-reduce, so every rank agrees.
bool UnscaleAndCheck(at::Tensor flat_grads, double inv_scale);
// The same over per-parameter gradients (undefined ones are skipped).
bool UnscaleAndCheck(const std::vector<at::Tensor>& grads, double inv_scale);

}  // namespace firedrill::agent
