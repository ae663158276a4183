#include "agent/precision.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstring>

#include "firedrill/v1/scenario.pb.h"

namespace firedrill::agent {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Round-trip through half keeping the original dtype (fp32 in practice).
at::Tensor RoundHalf(const at::Tensor& t) {
  if (t.scalar_type() == at::kHalf) return t;
  return t.to(at::kHalf).to(t.scalar_type());
}

// Forward: the activation as fp16 memory would hold it. Backward: the
// gradient as an fp16 gradient tensor would hold it. Both directions
// overflow to inf above 65504 and flush below half's subnormal range.
struct HalfBoundaryFn : public torch::autograd::Function<HalfBoundaryFn> {
  static at::Tensor forward(AutogradContext* /*ctx*/, const at::Tensor& x) { return RoundHalf(x); }
  static variable_list backward(AutogradContext* /*ctx*/, variable_list grads) {
    return {grads[0].defined() ? RoundHalf(grads[0]) : grads[0]};
  }
};

bool NonFinite(uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u; }

// The fast path: contiguous fp32 on CPU, one streaming pass. inf/NaN is
// tested on the raw bits (exponent all ones) into W independent flag lanes
// with no branch, a shape GCC vectorises at -O2 (the plain loop with one
// flag did not: ~4x slower than mul_ alone on 100 MB; this runs at mul_'s
// speed while also checking).
bool UnscaleAndCheckFloat(float* p, int64_t n, float s) {
  constexpr int W = 16;
  uint32_t lanes[W] = {};
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    for (int j = 0; j < W; ++j) {
      uint32_t u;
      std::memcpy(&u, p + i + j, sizeof(u));
      lanes[j] |= (~u & 0x7f800000u) ? 0u : 1u;
      p[i + j] = p[i + j] * s;  // PyTorch: val * inv_scale in fp32
    }
  }
  uint32_t bad = 0;
  for (int j = 0; j < W; ++j) bad |= lanes[j];
  for (; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, p + i, sizeof(u));
    bad |= NonFinite(u);
    p[i] = p[i] * s;
  }
  return bad != 0;
}

bool UnscaleAndCheckOne(at::Tensor t, float s) {
  if (!t.defined() || t.numel() == 0) return false;
  if (t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous())
    return UnscaleAndCheckFloat(t.data_ptr<float>(), t.numel(), s);
  // Other layouts/dtypes: the same semantics through ATen (two passes).
  const bool bad = !t.isfinite().all().item<bool>();
  if (s != 1.0f) t.mul_(static_cast<double>(s));
  return bad;
}

}  // namespace

at::Tensor HalfBoundary(const at::Tensor& x) { return HalfBoundaryFn::apply(x); }

StatusOr<Precision> Precision::FromName(const std::string& name) {
  if (name.empty() || name == "fp32") return Precision(Kind::kFp32);
  if (name == "bf16") return Precision(Kind::kBf16);
  if (name == "fp16") return Precision(Kind::kFp16);
  return InvalidArgument("precision must be \"fp32\", \"bf16\" or \"fp16\", got \"" + name + "\"");
}

StatusOr<Precision> Precision::FromJob(const v1::JobSpec& job) { return FromName(job.precision()); }

const char* Precision::name() const {
  switch (kind_) {
    case Kind::kFp32:
      return "fp32";
    case Kind::kBf16:
      return "bf16";
    case Kind::kFp16:
      return "fp16";
  }
  return "?";
}

at::ScalarType Precision::compute_dtype() const { return kind_ == Kind::kBf16 ? at::kBFloat16 : at::kFloat; }

at::ScalarType Precision::storage_dtype() const {
  switch (kind_) {
    case Kind::kFp32:
      return at::kFloat;
    case Kind::kBf16:
      return at::kBFloat16;
    case Kind::kFp16:
      return at::kHalf;
  }
  return at::kFloat;
}

at::Tensor Precision::Boundary(const at::Tensor& x) const {
  return kind_ == Kind::kFp16 ? HalfBoundary(x) : x;
}

at::Tensor Precision::Weight(const at::Tensor& w) const {
  if (!w.defined()) return w;
  switch (kind_) {
    case Kind::kFp32:
      return w;
    case Kind::kBf16:
      return w.to(at::kBFloat16);  // differentiable; a no-op if already bf16
    case Kind::kFp16:
      return HalfBoundary(w);
  }
  return w;
}

at::Tensor Precision::Input(const at::Tensor& x) const {
  // Integer inputs (token ids) are not cast: they index a Weight()ed table.
  if (!x.defined() || !at::isFloatingType(x.scalar_type())) return x;
  return Weight(x);
}

at::Tensor Precision::Output(const at::Tensor& y) const {
  if (!y.defined() || y.scalar_type() == at::kFloat) return y;
  return y.to(at::kFloat);
}

at::Tensor Linear(const Precision& prec, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  // In fp16 the matmul itself runs in fp32 (no CPU kernel for Half); its
  // inputs are half values and its output is rounded as a GPU's fp16 GEMM
  // output would be.
  at::Tensor y = at::linear(prec.Input(x), prec.Weight(w), prec.Weight(b));
  return prec.Boundary(y);
}

at::Tensor Linear(const ComputeSeam& seam, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (seam.linear) return seam.linear(x, w, b);
  return at::linear(x, w, b);
}

at::Tensor Boundary(const ComputeSeam& seam, const at::Tensor& x) {
  return seam.boundary ? seam.boundary(x) : x;
}

ComputeSeam MakeSeam(const Precision& prec) {
  ComputeSeam seam;
  if (prec.kind() == Precision::Kind::kFp32) return seam;
  seam.linear = [prec](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return Linear(prec, x, w, b);
  };
  seam.boundary = [prec](const at::Tensor& x) { return prec.Boundary(x); };
  return seam;
}

bool UnscaleAndCheck(at::Tensor flat_grads, double inv_scale) {
  at::NoGradGuard no_grad;
  // PyTorch multiplies by the fp32 inv_scale tensor's value.
  return UnscaleAndCheckOne(std::move(flat_grads), static_cast<float>(inv_scale));
}

bool UnscaleAndCheck(const std::vector<at::Tensor>& grads, double inv_scale) {
  at::NoGradGuard no_grad;
  bool bad = false;
  for (const auto& g : grads) bad |= UnscaleAndCheckOne(g, static_cast<float>(inv_scale));
  return bad;
}

}  // namespace firedrill::agent
