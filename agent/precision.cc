#include "agent/precision.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "firedrill/v1/scenario.pb.h"

namespace firedrill::agent {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// fp16 and bf16 on CPU, stored as on a GPU: an op whose inputs are 2-byte
// activations (and the fp32 parameters autocast keeps, LayerNorm's), its
// output rounded to the 2-byte dtype. It computes in fp32, except the matrix
// products in bf16, whose CPU kernels exist (1.13 has no half kernel for
// matmul, ReLU, GELU, LayerNorm or softmax), and it upcasts a piece of rows
// at a time (at most kPieceElems values), as a GPU kernel upcasts in
// registers: the fp32 workspace stays small beside the 2-byte tensors. For
// backward it keeps what the op's own backward keeps on a GPU, in 2 bytes:
// ReLU and softmax their output, the others their inputs (LayerNorm its
// 2-byte input and its row statistics where autocast would keep an fp32
// copy, as fused LayerNorms do). So activation memory really halves.
// Backward rounds each activation gradient to the 2-byte dtype: in fp16 a
// gradient above 65504 becomes inf and one below half's subnormals flushes
// to 0, as fp16 gradient tensors do.
constexpr int64_t kPieceElems = int64_t{1} << 18;  // 1 MiB of fp32 workspace per operand

bool KeepsOutput(SeamOp op) { return op == SeamOp::kRelu || op == SeamOp::kSoftmax; }

at::ScalarType ComputeDtype(SeamOp op, at::ScalarType storage) {
  const bool product = op == SeamOp::kLinear || op == SeamOp::kScores || op == SeamOp::kMatmul;
  return product && storage == at::kBFloat16 ? at::kBFloat16 : at::kFloat;
}

// Calls f(r0, r1) over pieces [r0, r1) of n rows of `row_elems` values each.
template <typename F>
void ForPieces(int64_t n, int64_t row_elems, F f) {
  const int64_t step = std::max<int64_t>(1, kPieceElems / std::max<int64_t>(1, row_elems));
  for (int64_t r = 0; r < n; r += step) f(r, std::min(n, r + step));
}

// [..., d] as [N, d] rows; [..., m, n] as [M, m, n] matrices (a copy only if
// the view cannot be taken, e.g. the transposed heads; 2 bytes, transient).
at::Tensor Rows(const at::Tensor& t) { return t.reshape({-1, t.size(-1)}); }
at::Tensor Mats(const at::Tensor& t) { return t.reshape({-1, t.size(-2), t.size(-1)}); }

std::vector<int64_t> WithLast(at::IntArrayRef lead, std::initializer_list<int64_t> last) {
  std::vector<int64_t> shape(lead.begin(), lead.end());
  shape.insert(shape.end(), last);
  return shape;
}

struct LowOpFn : public torch::autograd::Function<LowOpFn> {
  static at::Tensor forward(AutogradContext* ctx, at::TensorList in, int64_t op_id, double arg,
                            int64_t storage_id) {
    const auto op = static_cast<SeamOp>(op_id);
    const auto storage = static_cast<at::ScalarType>(storage_id);
    const auto compute = ComputeDtype(op, storage);
    std::vector<int64_t> needs;
    for (const auto& t : in) needs.push_back(t.requires_grad() ? 1 : 0);
    auto up = [&](const at::Tensor& t) { return t.to(compute); };
    const at::Tensor& x = in[0];
    std::vector<at::Tensor> keep = in.vec();
    at::Tensor out;
    switch (op) {
      case SeamOp::kLinear: {
        const at::Tensor xr = Rows(x), w = up(in[1]), b = in.size() > 2 ? up(in[2]) : at::Tensor();
        at::Tensor o = at::empty({xr.size(0), w.size(0)}, x.options().dtype(storage));
        ForPieces(xr.size(0), std::max(xr.size(1), w.size(0)), [&](int64_t r0, int64_t r1) {
          o.slice(0, r0, r1).copy_(at::linear(up(xr.slice(0, r0, r1)), w, b));
        });
        out = o.view(WithLast(x.sizes().slice(0, x.dim() - 1), {w.size(0)}));
        break;
      }
      case SeamOp::kLayerNorm: {
        const at::Tensor xr = Rows(x);
        at::Tensor o = at::empty_like(xr, xr.options().dtype(storage));
        at::Tensor mean = at::empty({xr.size(0), 1}, xr.options().dtype(at::kFloat));
        at::Tensor rstd = at::empty_like(mean);
        ForPieces(xr.size(0), xr.size(1), [&](int64_t r0, int64_t r1) {
          auto [y, m, r] = at::native_layer_norm(up(xr.slice(0, r0, r1)), {xr.size(1)}, in[1], in[2], arg);
          o.slice(0, r0, r1).copy_(y);
          mean.slice(0, r0, r1).copy_(m);
          rstd.slice(0, r0, r1).copy_(r);
        });
        out = o.view(x.sizes());
        keep.push_back(mean);  // a float per row: backward need not recompute them
        keep.push_back(rstd);
        break;
      }
      case SeamOp::kRelu:
      case SeamOp::kGelu:
      case SeamOp::kSoftmax: {
        const at::Tensor xr = Rows(x);
        at::Tensor o = at::empty_like(xr, xr.options().dtype(storage));
        ForPieces(xr.size(0), xr.size(1), [&](int64_t r0, int64_t r1) {
          o.slice(0, r0, r1).copy_(RunOp(op, {up(xr.slice(0, r0, r1))}, arg));
        });
        out = o.view(x.sizes());
        break;
      }
      case SeamOp::kScores:
      case SeamOp::kMatmul: {
        const at::Tensor a = Mats(x), b = Mats(in[1]);
        const int64_t cols = op == SeamOp::kScores ? b.size(1) : b.size(2);
        at::Tensor o = at::empty({a.size(0), a.size(1), cols}, x.options().dtype(storage));
        ForPieces(a.size(0), a.size(1) * std::max(cols, a.size(2)), [&](int64_t r0, int64_t r1) {
          o.slice(0, r0, r1).copy_(RunOp(op, {up(a.slice(0, r0, r1)), up(b.slice(0, r0, r1))}, arg));
        });
        out = o.view(WithLast(x.sizes().slice(0, x.dim() - 2), {a.size(1), cols}));
        break;
      }
    }
    ctx->save_for_backward(KeepsOutput(op) ? std::vector<at::Tensor>{out} : keep);
    ctx->saved_data["op"] = op_id;
    ctx->saved_data["arg"] = arg;
    ctx->saved_data["storage"] = storage_id;
    ctx->saved_data["needs"] = needs;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto op = static_cast<SeamOp>(ctx->saved_data["op"].toInt());
    const auto storage = static_cast<at::ScalarType>(ctx->saved_data["storage"].toInt());
    const auto compute = ComputeDtype(op, storage);
    const auto needs = ctx->saved_data["needs"].toIntVector();
    const double arg = ctx->saved_data["arg"].toDouble();
    auto up = [&](const at::Tensor& t) { return t.to(compute); };
    const at::Tensor g = grad_out[0].to(storage);  // holds 2-byte values
    variable_list grads(needs.size());
    // The first input's gradient, 2 bytes, shaped as the input (or the output
    // for ReLU and softmax, whose input has the same shape).
    const at::Tensor& x = saved[0];
    switch (op) {
      case SeamOp::kRelu:
        // Needs no arithmetic: the gradient where the output is positive, 0
        // elsewhere (also where it is NaN, as ATen's threshold_backward).
        if (needs[0]) grads[0] = g.masked_fill(x.gt(0).logical_not(), 0);
        break;
      case SeamOp::kSoftmax:
      case SeamOp::kGelu: {
        if (!needs[0]) break;
        const at::Tensor gr = Rows(g), xr = Rows(x);
        at::Tensor d = at::empty_like(xr);
        ForPieces(xr.size(0), xr.size(1), [&](int64_t r0, int64_t r1) {
          const at::Tensor gp = up(gr.slice(0, r0, r1)), xp = up(xr.slice(0, r0, r1));
          d.slice(0, r0, r1).copy_(op == SeamOp::kGelu ? at::gelu_backward(gp, xp)
                                                       : xp * (gp - (gp * xp).sum(-1, /*keepdim=*/true)));
        });
        grads[0] = d.view(x.sizes());
        break;
      }
      case SeamOp::kLayerNorm: {
        const at::Tensor gr = Rows(g), xr = Rows(x);
        at::Tensor dx = needs[0] ? at::empty_like(xr) : at::Tensor();
        at::Tensor dw = needs[1] ? at::zeros_like(saved[1]) : at::Tensor();
        at::Tensor db = needs[2] ? at::zeros_like(saved[2]) : at::Tensor();
        ForPieces(xr.size(0), xr.size(1), [&](int64_t r0, int64_t r1) {
          auto [px, pw, pb] = at::native_layer_norm_backward(
              up(gr.slice(0, r0, r1)), up(xr.slice(0, r0, r1)), {xr.size(1)}, saved[3].slice(0, r0, r1),
              saved[4].slice(0, r0, r1), saved[1], saved[2], {needs[0] != 0, needs[1] != 0, needs[2] != 0});
          if (dx.defined()) dx.slice(0, r0, r1).copy_(px);
          if (dw.defined()) dw.add_(pw);
          if (db.defined()) db.add_(pb);
        });
        grads = {dx.defined() ? dx.view(x.sizes()) : dx, dw, db};
        break;
      }
      case SeamOp::kLinear: {
        const at::Tensor gr = Rows(g), xr = Rows(x), w = up(saved[1]);
        at::Tensor dx = needs[0] ? at::empty_like(xr) : at::Tensor();
        at::Tensor dw = needs[1] ? at::zeros(w.sizes(), w.options().dtype(at::kFloat)) : at::Tensor();
        at::Tensor db =
            saved.size() > 2 && needs[2]
                ? at::zeros({w.size(0)}, dw.defined() ? dw.options() : w.options().dtype(at::kFloat))
                : at::Tensor();
        ForPieces(xr.size(0), std::max(xr.size(1), w.size(0)), [&](int64_t r0, int64_t r1) {
          const at::Tensor gp = up(gr.slice(0, r0, r1));
          if (dx.defined()) dx.slice(0, r0, r1).copy_(gp.mm(w));
          if (dw.defined()) dw.add_(gp.t().mm(up(xr.slice(0, r0, r1))));
          if (db.defined()) db.add_(gp.sum(0));
        });
        grads[0] = dx.defined() ? dx.view(x.sizes()) : dx;
        grads[1] = dw;
        if (saved.size() > 2) grads[2] = db;
        break;
      }
      case SeamOp::kScores:
      case SeamOp::kMatmul: {
        // Scores: o = a b^T s, da = g b s, db = g^T a s. Matmul: o = a b,
        // da = g b^T, db = a^T g.
        const at::Tensor a = Mats(x), b = Mats(saved[1]), gm = Mats(g);
        at::Tensor da = needs[0] ? at::empty_like(a) : at::Tensor();
        at::Tensor db = needs[1] ? at::empty_like(b) : at::Tensor();
        const bool scores = op == SeamOp::kScores;
        ForPieces(a.size(0), a.size(1) * std::max(gm.size(2), a.size(2)), [&](int64_t r0, int64_t r1) {
          const at::Tensor ap = up(a.slice(0, r0, r1)), bp = up(b.slice(0, r0, r1)),
                           gp = up(gm.slice(0, r0, r1));
          if (da.defined()) da.slice(0, r0, r1).copy_(scores ? gp.bmm(bp) * arg : gp.bmm(bp.transpose(1, 2)));
          if (db.defined())
            db.slice(0, r0, r1).copy_(scores ? gp.transpose(1, 2).bmm(ap) * arg : ap.transpose(1, 2).bmm(gp));
        });
        grads[0] = da.defined() ? da.view(x.sizes()) : da;
        grads[1] = db.defined() ? db.view(saved[1].sizes()) : db;
        break;
      }
    }
    grads.push_back(at::Tensor());  // op
    grads.push_back(at::Tensor());  // arg
    grads.push_back(at::Tensor());  // storage
    return grads;
  }
};

at::Tensor LowOp(at::ScalarType storage, SeamOp op, const std::vector<at::Tensor>& in, double arg) {
  std::vector<at::Tensor> low;
  for (const auto& t : in) {
    // Activations enter in the 2-byte dtype; LayerNorm's parameters stay
    // fp32 (autocast runs it in fp32, its weights are the masters).
    const bool param = op == SeamOp::kLayerNorm && !low.empty();
    low.push_back(param || t.scalar_type() == storage ? t : t.to(storage));
  }
  return LowOpFn::apply(at::TensorList(low), static_cast<int64_t>(op), arg, static_cast<int64_t>(storage));
}

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
  if (kind_ == Kind::kFp32 || !x.defined() || x.scalar_type() == storage_dtype()) return x;
  return x.to(storage_dtype());  // differentiable: its backward hands an fp32 input an fp32 gradient
}

at::Tensor Precision::Weight(const at::Tensor& w) const {
  if (!w.defined()) return w;
  switch (kind_) {
    case Kind::kFp32:
      return w;
    case Kind::kBf16:
      return w.to(at::kBFloat16);  // differentiable; a no-op if already bf16
    case Kind::kFp16:
      return w.to(at::kHalf);  // the 2-byte copy autocast makes; fp32 grad to the master
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
  if (prec.kind() == Precision::Kind::kFp32) return at::linear(x, w, b);
  // 2-byte inputs and weight copies; the output rounded as a GPU's GEMM
  // output is (fp16's product runs in fp32: no CPU kernel for half in 1.13).
  std::vector<at::Tensor> in{prec.Input(x), prec.Weight(w)};
  if (b.defined()) in.push_back(prec.Weight(b));
  return LowOp(prec.storage_dtype(), SeamOp::kLinear, in, 0.0);
}

at::Tensor RunOp(SeamOp op, const std::vector<at::Tensor>& in, double arg) {
  switch (op) {
    case SeamOp::kLinear:
      return at::linear(in[0], in[1], in.size() > 2 ? in[2] : at::Tensor());
    case SeamOp::kRelu:
      return at::relu(in[0]);
    case SeamOp::kGelu:
      return at::gelu(in[0]);
    case SeamOp::kLayerNorm:
      return at::layer_norm(in[0].to(at::kFloat), {in[0].size(-1)}, in[1], in[2], arg);
    case SeamOp::kSoftmax:
      return at::softmax(in[0], -1);
    case SeamOp::kScores:
      return at::matmul(in[0], in[1].transpose(-2, -1)) * arg;
    case SeamOp::kMatmul:
      return at::matmul(in[0], in[1]);
  }
  TORCH_CHECK(false, "unknown seam op ", static_cast<int64_t>(op));
  return at::Tensor();
}

at::Tensor Linear(const ComputeSeam& seam, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (seam.linear) return seam.linear(x, w, b);
  return at::linear(x, w, b);
}

at::Tensor Boundary(const ComputeSeam& seam, const at::Tensor& x) {
  return seam.boundary ? seam.boundary(x) : x;
}

namespace {
at::Tensor Op(const ComputeSeam& seam, SeamOp op, const std::vector<at::Tensor>& in, double arg = 0.0) {
  return seam.op ? seam.op(op, in, arg) : RunOp(op, in, arg);
}
}  // namespace

at::Tensor Relu(const ComputeSeam& seam, const at::Tensor& x) { return Op(seam, SeamOp::kRelu, {x}); }
at::Tensor Gelu(const ComputeSeam& seam, const at::Tensor& x) { return Op(seam, SeamOp::kGelu, {x}); }
at::Tensor LayerNorm(const ComputeSeam& seam, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                     double eps) {
  return Op(seam, SeamOp::kLayerNorm, {x, w, b}, eps);
}
at::Tensor Softmax(const ComputeSeam& seam, const at::Tensor& x) { return Op(seam, SeamOp::kSoftmax, {x}); }
at::Tensor Scores(const ComputeSeam& seam, const at::Tensor& q, const at::Tensor& k, double scale) {
  return Op(seam, SeamOp::kScores, {q, k}, scale);
}
at::Tensor Matmul(const ComputeSeam& seam, const at::Tensor& a, const at::Tensor& b) {
  return Op(seam, SeamOp::kMatmul, {a, b});
}

ComputeSeam MakeSeam(const Precision& prec) {
  ComputeSeam seam;
  if (prec.kind() == Precision::Kind::kFp32) return seam;
  seam.linear = [prec](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return Linear(prec, x, w, b);
  };
  seam.boundary = [prec](const at::Tensor& x) { return prec.Boundary(x); };
  seam.op = [storage = prec.storage_dtype()](SeamOp op, const std::vector<at::Tensor>& in, double arg) {
    return LowOp(storage, op, in, arg);
  };
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
