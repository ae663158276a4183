// The precision seam: every product with a weight matrix in the models goes
// through `linear`, and activations pass `boundary` between layers (block
// input, block output, final hidden state, logits). Both are
// identity/at::linear when unset (fp32); a precision mode (agent/precision.h
// MakeSeam) installs casts (bf16 compute, fp16 rounding at layer boundaries)
// here without touching the models. ATen only, so it is cheap to include.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace firedrill::agent {

struct ComputeSeam {
  std::function<at::Tensor(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b)> linear;
  std::function<at::Tensor(const at::Tensor& x)> boundary;
};

// y = x w^T + b (b may be undefined), through the seam.
at::Tensor Linear(const ComputeSeam& seam, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
at::Tensor Boundary(const ComputeSeam& seam, const at::Tensor& x);

}  // namespace firedrill::agent
