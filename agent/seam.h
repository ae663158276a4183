// The precision seam: every product with a weight matrix in the models goes
// through `linear`, the other ops that store what backward needs go through
// `op` (ReLU, GELU, LayerNorm, softmax and the attention products), and
// activations pass `boundary` between layers (block input, block output,
// final hidden state, logits). Unset members mean plain ATen (fp32; bf16,
// whose casts live in `linear`). A precision mode (agent/precision.h
// MakeSeam) installs its casts here without touching the models: fp16 keeps
// every activation in a 2-byte tensor and runs each op in fp32 on CPU, which
// has no half kernels for most of them. ATen only, so it is cheap to include.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace firedrill::agent {

// The ops besides linear a model runs through the seam. `arg` is LayerNorm's
// eps or the scores' scale; the others ignore it.
enum class SeamOp : int64_t {
  kLinear = 0,     // x, w, [b]: x w^T + b
  kRelu = 1,       // x
  kGelu = 2,       // x
  kLayerNorm = 3,  // x, w, b: over the last dim, computed in fp32 (as autocast does)
  kSoftmax = 4,    // x: over the last dim
  kScores = 5,     // q, k: q k^T * arg
  kMatmul = 6,     // a, b: a b
};

struct ComputeSeam {
  std::function<at::Tensor(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b)> linear;
  std::function<at::Tensor(const at::Tensor& x)> boundary;
  std::function<at::Tensor(SeamOp op, const std::vector<at::Tensor>& in, double arg)> op;
  // Set only while `probe activations` runs a forward pass: each named
  // point of the model (its input, each layer's output, the logits) as the
  // model computed it, in the dtype it is stored in (a forward hook).
  std::function<void(const std::string& name, const at::Tensor& value)> observe;
};

// Hands a named point to seam.observe where it is set; nothing otherwise.
inline void Watch(const ComputeSeam& seam, const std::string& name, const at::Tensor& value) {
  if (seam.observe) seam.observe(name, value);
}

// The op in plain ATen, in the inputs' dtype (LayerNorm: fp32).
at::Tensor RunOp(SeamOp op, const std::vector<at::Tensor>& in, double arg);

// y = x w^T + b (b may be undefined), through the seam.
at::Tensor Linear(const ComputeSeam& seam, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
at::Tensor Boundary(const ComputeSeam& seam, const at::Tensor& x);
// The other ops, through seam.op where it is set, else RunOp.
at::Tensor Relu(const ComputeSeam& seam, const at::Tensor& x);
at::Tensor Gelu(const ComputeSeam& seam, const at::Tensor& x);
at::Tensor LayerNorm(const ComputeSeam& seam, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                     double eps);
at::Tensor Softmax(const ComputeSeam& seam, const at::Tensor& x);
at::Tensor Scores(const ComputeSeam& seam, const at::Tensor& q, const at::Tensor& k, double scale);
at::Tensor Matmul(const ComputeSeam& seam, const at::Tensor& a, const at::Tensor& b);

}  // namespace firedrill::agent
