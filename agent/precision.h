// Mixed precision on CPU with fp32 master weights.
//
//   fp32 — everything in fp32; every helper below is the identity.
//   bf16, fp16 — stored as on a GPU: every activation between ops is a
//          2-byte tensor (kBFloat16, kHalf), and so is the weight copy each
//          Linear uses (Weight(w) = w.to(dtype), autocast's cast, which is
//          differentiable: its backward hands the fp32 master an fp32 .grad,
//          holding a 2-byte value). Each op runs on CPU where 1.13 has a
//          kernel for it (bf16 matrix products) and in fp32 where it has none
//          (every fp16 op; ReLU, GELU, LayerNorm and softmax in bf16), its
//          output rounded to the 2-byte dtype (LowOp in precision.cc). It
//          keeps what a GPU op keeps for backward, in 2 bytes, and rounds
//          each activation gradient to the 2-byte dtype. So activation memory
//          really halves (the memory probe measures it); in fp16 >65504
//          really becomes inf in forward and in backward, and gradients below
//          ~2.98e-8 (half the smallest subnormal 2^-24) really flush to 0: an
//          unscaled fp16 run loses small weight gradients and a too-large
//          scale overflows them, the behaviour loss scaling exists for.
//          bf16 has fp32's exponent range and needs no scaling.
//
// How the model (agent/model.cc, agent/gpt.cc) uses it in forward:
//
//   x = prec.Input(x);                       // once, on the batch input
//   h = Linear(prec, x, lin->weight, lin->bias);   // instead of lin->forward
//   h = Relu(seam, h);                       // ReLU, GELU, LayerNorm, softmax,
//                                            // attention products: agent/seam.h
//   h = prec.Boundary(h + residual);         // half + half stays half
//   logits = prec.Output(h);                 // fp32 for the loss (autocast
//                                            // runs softmax/CE in fp32)
//
// Embedding lookups read the fp32 table (autocast leaves them in the
// table's dtype); Boundary() stores their sum in half.
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
  // dtype matrix products run in: kBFloat16 for bf16, else kFloat (fp16 has
  // no CPU matmul kernel).
  at::ScalarType compute_dtype() const;
  // dtype activations and weight copies are stored in: kFloat, kBFloat16,
  // kHalf.
  at::ScalarType storage_dtype() const;
  // True for fp16 only: bf16 has fp32's exponent range and needs none.
  bool needs_loss_scaling() const { return kind_ == Kind::kFp16; }

  // fp32: x. bf16/fp16: x as a tensor of storage_dtype() (a no-op if it is one).
  at::Tensor Boundary(const at::Tensor& x) const;
  // fp32: w. bf16: w.to(kBFloat16), fp16: w.to(kHalf); both differentiable,
  // so the fp32 master gets an fp32 grad (holding a 2-byte value).
  at::Tensor Weight(const at::Tensor& w) const;
  // The batch input (or any tensor entering a matmul): same casts as Weight.
  at::Tensor Input(const at::Tensor& x) const;
  // Back to fp32 (differentiable) for losses, norms, softmax.
  at::Tensor Output(const at::Tensor& y) const;

 private:
  Kind kind_;
};

// Reference Linear: y = linear(Input(x), Weight(w), Weight(b)), in bf16 and
// fp16 run as described above. `b` may be undefined. Returns a tensor of the storage
// dtype (fp32, bf16 or half).
at::Tensor Linear(const Precision& prec, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

// The seam a model runs `prec` through: empty for fp32 (the models' plain
// ATen path), else Linear(prec, ...), prec.Boundary and every other seam op
// as described above.
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
