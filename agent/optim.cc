#include "agent/optim.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "agent/error_text.h"

namespace firedrill::agent {

namespace {

double Or(double v, double dflt) { return v != 0 ? v : dflt; }

// "12" -> 12; anything else (empty, sign, junk, overflow) -> false.
bool ParseIndex(const std::string& s, size_t* out) {
  if (s.empty() || s.size() > 9) return false;
  size_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<size_t>(c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

Status ValidateOptimSpec(const v1::OptimSpec& o) {
  if (o.kind() != "sgd" && o.kind() != "adamw") {
    return InvalidArgument("optim.kind must be \"sgd\" or \"adamw\", got \"" + o.kind() + "\"");
  }
  if (!(o.lr() > 0) || !std::isfinite(o.lr())) return InvalidArgument("optim.lr must be > 0");
  if (!(o.momentum() >= 0 && o.momentum() < 1)) return InvalidArgument("optim.momentum must be in [0, 1)");
  if (!(o.weight_decay() >= 0)) return InvalidArgument("optim.weight_decay must be >= 0");
  if (!(o.beta1() >= 0 && o.beta1() < 1)) return InvalidArgument("optim.beta1 must be in [0, 1) (0 = 0.9)");
  if (!(o.beta2() >= 0 && o.beta2() < 1)) return InvalidArgument("optim.beta2 must be in [0, 1) (0 = 0.999)");
  if (!(o.eps() >= 0)) return InvalidArgument("optim.eps must be >= 0 (0 = 1e-8)");
  if (o.warmup_steps() < 0) return InvalidArgument("optim.warmup_steps must be >= 0");
  const auto& s = o.lr_scaling();
  if (!s.empty() && s != "none" && s != "linear" && s != "sqrt") {
    return InvalidArgument("optim.lr_scaling must be \"none\", \"linear\" or \"sqrt\", got \"" + s + "\"");
  }
  if (o.reference_global_batch() < 0) return InvalidArgument("optim.reference_global_batch must be >= 0");
  if (o.zero_stage() != 0 && o.zero_stage() != 1)
    return InvalidArgument("optim.zero_stage must be 0 (the optimiser's state replicated) or 1 (partitioned "
                           "across the ranks), got " + std::to_string(o.zero_stage()));
  if (const auto& a = o.accumulation_loss(); !a.empty() && a != "mean" && a != "sum")
    return InvalidArgument("optim.accumulation_loss must be \"mean\" or \"sum\", got \"" + a + "\"");
  if ((s == "linear" || s == "sqrt") && o.reference_global_batch() == 0) {
    return InvalidArgument("optim.lr_scaling \"" + s +
                           "\" needs optim.reference_global_batch (the global batch optim.lr was tuned for)");
  }
  return Status::Ok();
}

double ScaledLr(const v1::OptimSpec& spec, int64_t global_batch) {
  const auto& s = spec.lr_scaling();
  if ((s != "linear" && s != "sqrt") || spec.reference_global_batch() <= 0) return spec.lr();
  const double ratio = static_cast<double>(global_batch) / spec.reference_global_batch();
  return s == "linear" ? spec.lr() * ratio : spec.lr() * std::sqrt(ratio);
}

double ScheduledLr(double target, int warmup_steps, int64_t step) {
  if (warmup_steps <= 0) return target;
  return target * std::min(1.0, static_cast<double>(step + 1) / warmup_steps);
}

double SquaredNorm(const std::vector<at::Tensor>& tensors) {
  double s = 0;
  for (const auto& t : tensors) {
    if (t.numel() == 0) continue;
    const double n = t.detach().norm().item<double>();
    s += n * n;
  }
  return s;
}

Status Optimizer::LoadState(const std::vector<std::pair<std::string, at::Tensor>>& state) {
  try {
    return LoadStateUnchecked(state);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string(kind()) + " state: " + ErrorText(e));
  }
}

int64_t Optimizer::state_bytes() const {
  int64_t b = 0;
  for (const auto& kv : State()) b += kv.second.numel() * static_cast<int64_t>(kv.second.element_size());
  return b;
}

namespace {

// One pass of SGD over one contiguous fp32 parameter, fusing what PyTorch
// does in up to four passes (weight decay, momentum mul_ and add_, param
// add_) plus the gradient norm and zero_grad. Per element and in fp32 it
// computes PyTorch's expressions: d = g + wd*p; buf = buf*m + d (or d on the
// first step); p = p + (-lr)*buf. PyTorch's AVX2 kernels may fuse a
// multiply-add that is rounded twice here (no FMA, so every x86 rank gets the
// same bits); the difference is one rounding, far below the parity test's
// 1e-5. Returns the sum of squares of the gradient.
template <bool kWd, bool kMomentum, bool kFirst, bool kZero>
double SgdKernel(float* __restrict p, float* __restrict g, float* __restrict buf, int64_t n, float lr,
                 float m, float wd) {
  int64_t i = 0;
  double sum = 0;
#if defined(__SSE2__)
  const __m128 vlr = _mm_set1_ps(-lr), vm = _mm_set1_ps(m), vwd = _mm_set1_ps(wd), zero = _mm_setzero_ps();
  // Blocks bound the float partial sums before they join the double total.
  constexpr int64_t kBlock = 4096;
  while (i + 8 <= n) {
    __m128 acc0 = zero, acc1 = zero;
    const int64_t stop = std::min(n, i + kBlock) & ~int64_t{7};
    for (; i < stop; i += 8) {
      __m128 g0 = _mm_loadu_ps(g + i), g1 = _mm_loadu_ps(g + i + 4);
      acc0 = _mm_add_ps(acc0, _mm_mul_ps(g0, g0));
      acc1 = _mm_add_ps(acc1, _mm_mul_ps(g1, g1));
      __m128 p0 = _mm_loadu_ps(p + i), p1 = _mm_loadu_ps(p + i + 4);
      if (kWd) {
        g0 = _mm_add_ps(g0, _mm_mul_ps(vwd, p0));
        g1 = _mm_add_ps(g1, _mm_mul_ps(vwd, p1));
      }
      if (kMomentum) {
        if (!kFirst) {
          g0 = _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(buf + i), vm), g0);
          g1 = _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(buf + i + 4), vm), g1);
        }
        _mm_storeu_ps(buf + i, g0);
        _mm_storeu_ps(buf + i + 4, g1);
      }
      _mm_storeu_ps(p + i, _mm_add_ps(p0, _mm_mul_ps(vlr, g0)));
      _mm_storeu_ps(p + i + 4, _mm_add_ps(p1, _mm_mul_ps(vlr, g1)));
      if (kZero) {
        _mm_storeu_ps(g + i, zero);
        _mm_storeu_ps(g + i + 4, zero);
      }
    }
    float part[4];
    _mm_storeu_ps(part, _mm_add_ps(acc0, acc1));
    sum += static_cast<double>(part[0]) + part[1] + part[2] + part[3];
  }
#endif
  for (; i < n; ++i) {
    float d = g[i];
    sum += static_cast<double>(d) * d;
    if (kWd) d = d + wd * p[i];
    if (kMomentum) {
      if (!kFirst) d = buf[i] * m + d;
      buf[i] = d;
    }
    p[i] = p[i] + (-lr) * d;
    if (kZero) g[i] = 0.0f;
  }
  return sum;
}

using KernelFn = double (*)(float*, float*, float*, int64_t, float, float, float);

template <bool kWd, bool kMomentum, bool kFirst>
KernelFn PickZero(bool zero) {
  return zero ? &SgdKernel<kWd, kMomentum, kFirst, true> : &SgdKernel<kWd, kMomentum, kFirst, false>;
}

KernelFn PickKernel(bool wd, bool momentum, bool first, bool zero) {
  if (wd) {
    if (!momentum) return PickZero<true, false, false>(zero);
    return first ? PickZero<true, true, true>(zero) : PickZero<true, true, false>(zero);
  }
  if (!momentum) return PickZero<false, false, false>(zero);
  return first ? PickZero<false, true, true>(zero) : PickZero<false, true, false>(zero);
}

bool Fusable(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat && t.is_contiguous() && !t.is_sparse();
}

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<at::Tensor> params, double momentum, double wd)
      : params_(std::move(params)), momentum_(momentum), wd_(wd), bufs_(params_.size()) {}

  double Step(double lr, bool zero_grad) override {
    at::NoGradGuard no_grad;
    double sum = 0;
    for (size_t k = 0; k < params_.size(); ++k) {
      auto& p = params_[k];
      const at::Tensor& g = p.grad();
      if (!g.defined()) continue;  // PyTorch skips parameters without .grad
      const bool first = momentum_ != 0 && !bufs_[k].defined();
      if (first) bufs_[k] = at::empty_like(p, at::MemoryFormat::Contiguous);
      if (Fusable(p) && Fusable(g) && (momentum_ == 0 || Fusable(bufs_[k]))) {
        KernelFn fn = PickKernel(wd_ != 0, momentum_ != 0, first, zero_grad);
        sum += fn(p.data_ptr<float>(), g.data_ptr<float>(),
                  momentum_ != 0 ? bufs_[k].data_ptr<float>() : nullptr, p.numel(), static_cast<float>(lr),
                  static_cast<float>(momentum_), static_cast<float>(wd_));
        continue;
      }
      // Anything else (other dtypes, strided views): PyTorch's own ops.
      const double gn = g.norm().item<double>();
      sum += gn * gn;
      at::Tensor d = wd_ != 0 ? g.add(p, wd_) : g;
      if (momentum_ != 0) {
        if (first) {
          bufs_[k].copy_(d);
        } else {
          bufs_[k].mul_(momentum_).add_(d);
        }
        d = bufs_[k];
      }
      p.add_(d, -lr);
      if (zero_grad) g.zero_();
    }
    ++steps_;
    return sum;
  }

  const char* kind() const override { return "sgd"; }
  int64_t steps() const override { return steps_; }

  std::vector<std::pair<std::string, at::Tensor>> State() const override {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (size_t k = 0; k < bufs_.size(); ++k) {
      if (bufs_[k].defined()) out.emplace_back("momentum_buffer." + std::to_string(k), bufs_[k]);
    }
    out.emplace_back("step", at::scalar_tensor(static_cast<double>(steps_), at::kDouble));
    return out;
  }

  Status LoadStateUnchecked(const std::vector<std::pair<std::string, at::Tensor>>& state) override {
    std::vector<at::Tensor> bufs(params_.size());
    int64_t steps = 0;
    for (const auto& [name, t] : state) {
      if (name == "step") {
        steps = static_cast<int64_t>(t.item<double>());
        continue;
      }
      const std::string prefix = "momentum_buffer.";
      if (name.rfind(prefix, 0) != 0) return InvalidArgument("sgd state: unknown entry \"" + name + "\"");
      size_t k = 0;
      if (!ParseIndex(name.substr(prefix.size()), &k) || k >= params_.size() ||
          !t.sizes().equals(params_[k].sizes())) {
        return InvalidArgument("sgd state: \"" + name + "\" does not match the model's parameters");
      }
      bufs[k] = t.to(params_[k].options()).clone(at::MemoryFormat::Contiguous);
    }
    bufs_ = std::move(bufs);
    steps_ = steps;
    return Status::Ok();
  }

 private:
  std::vector<at::Tensor> params_;
  double momentum_, wd_;
  std::vector<at::Tensor> bufs_;
  int64_t steps_ = 0;
};

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<at::Tensor> params, double b1, double b2, double eps, double wd)
      : params_(std::move(params)),
        b1_(b1),
        b2_(b2),
        eps_(eps),
        wd_(wd),
        m_(params_.size()),
        v_(params_.size()) {}

  // PyTorch 1.13 _single_tensor_adamw, op for op (amsgrad off). The step
  // count is shared: every parameter is stepped together here.
  double Step(double lr, bool zero_grad) override {
    at::NoGradGuard no_grad;
    double sum = 0;
    ++steps_;
    const double step =
        static_cast<double>(static_cast<float>(steps_));  // PyTorch keeps it in a float tensor
    const double bc1 = 1 - std::pow(b1_, step);
    const double bc2 = 1 - std::pow(b2_, step);
    const double step_size = lr / bc1;
    const double bc2_sqrt = std::sqrt(bc2);
    for (size_t k = 0; k < params_.size(); ++k) {
      auto& p = params_[k];
      const at::Tensor& g = p.grad();
      if (!g.defined()) continue;
      const double gn = g.norm().item<double>();
      sum += gn * gn;
      if (!m_[k].defined()) {
        m_[k] = at::zeros_like(p, at::MemoryFormat::Contiguous);
        v_[k] = at::zeros_like(p, at::MemoryFormat::Contiguous);
      }
      if (wd_ != 0) p.mul_(1 - lr * wd_);
      m_[k].mul_(b1_).add_(g, 1 - b1_);
      v_[k].mul_(b2_).addcmul_(g, g, 1 - b2_);
      at::Tensor denom = (v_[k].sqrt() / bc2_sqrt).add_(eps_);
      p.addcdiv_(m_[k], denom, -step_size);
      if (zero_grad) g.zero_();
    }
    return sum;
  }

  const char* kind() const override { return "adamw"; }
  int64_t steps() const override { return steps_; }

  std::vector<std::pair<std::string, at::Tensor>> State() const override {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (size_t k = 0; k < m_.size(); ++k) {
      if (!m_[k].defined()) continue;
      out.emplace_back("exp_avg." + std::to_string(k), m_[k]);
      out.emplace_back("exp_avg_sq." + std::to_string(k), v_[k]);
    }
    out.emplace_back("step", at::scalar_tensor(static_cast<double>(steps_), at::kDouble));
    return out;
  }

  Status LoadStateUnchecked(const std::vector<std::pair<std::string, at::Tensor>>& state) override {
    std::vector<at::Tensor> m(params_.size()), v(params_.size());
    int64_t steps = 0;
    for (const auto& [name, t] : state) {
      if (name == "step") {
        steps = static_cast<int64_t>(t.item<double>());
        continue;
      }
      const auto dot = name.rfind('.');
      const std::string field = dot == std::string::npos ? name : name.substr(0, dot);
      if (dot == std::string::npos || (field != "exp_avg" && field != "exp_avg_sq")) {
        return InvalidArgument("adamw state: unknown entry \"" + name + "\"");
      }
      size_t k = 0;
      if (!ParseIndex(name.substr(dot + 1), &k) || k >= params_.size() ||
          !t.sizes().equals(params_[k].sizes())) {
        return InvalidArgument("adamw state: \"" + name + "\" does not match the model's parameters");
      }
      (field == "exp_avg" ? m : v)[k] = t.to(params_[k].options()).clone(at::MemoryFormat::Contiguous);
    }
    for (size_t k = 0; k < params_.size(); ++k) {
      if (m[k].defined() != v[k].defined())
        return InvalidArgument("adamw state: parameter " + std::to_string(k) +
                               " has only one of exp_avg, exp_avg_sq");
    }
    m_ = std::move(m);
    v_ = std::move(v);
    steps_ = steps;
    return Status::Ok();
  }

 private:
  std::vector<at::Tensor> params_;
  double b1_, b2_, eps_, wd_;
  std::vector<at::Tensor> m_, v_;
  int64_t steps_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const v1::OptimSpec& spec,
                                                       std::vector<at::Tensor> params) {
  FD_RETURN_IF_ERROR(ValidateOptimSpec(spec));
  try {
    if (spec.kind() == "adamw") {
      return std::unique_ptr<Optimizer>(new AdamW(std::move(params), Or(spec.beta1(), 0.9),
                                                  Or(spec.beta2(), 0.999), Or(spec.eps(), 1e-8),
                                                  spec.weight_decay()));
    }
    return std::unique_ptr<Optimizer>(new Sgd(std::move(params), spec.momentum(), spec.weight_decay()));
  } catch (const std::exception& e) {
    return Internal("building the " + spec.kind() + " optimiser failed: " + ErrorText(e));
  }
}

}  // namespace firedrill::agent
