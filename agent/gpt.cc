#include "agent/gpt.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace firedrill::agent {

Status ValidateGptConfig(const GptConfig& c) {
  if (c.vocab_size < 2) return InvalidArgument("model.vocab_size must be >= 2");
  if (c.seq_len < 1) return InvalidArgument("model.seq_len must be >= 1 for gpt-tiny");
  if (c.d_model < 1) return InvalidArgument("model.hidden (d_model) must be >= 1 for gpt-tiny");
  if (c.layers < 1) return InvalidArgument("model.layers must be >= 1 for gpt-tiny");
  if (c.heads < 1 || c.d_model % c.heads != 0) {
    return InvalidArgument("model.heads must be >= 1 and divide hidden (" + std::to_string(c.d_model) +
                           "), got " + std::to_string(c.heads));
  }
  if (c.mlp_ratio < 1) return InvalidArgument("model.mlp_ratio must be >= 1");
  if (c.tp_size < 1 || c.tp_rank < 0 || c.tp_rank >= c.tp_size)
    return InvalidArgument("tensor-parallel rank " + std::to_string(c.tp_rank) + " of " +
                           std::to_string(c.tp_size));
  if (c.heads % c.tp_size != 0 || (c.mlp_ratio * c.d_model) % c.tp_size != 0) {
    return InvalidArgument("parallel.tp " + std::to_string(c.tp_size) + " must divide model.heads (" +
                           std::to_string(c.heads) + ") and the MLP width (" +
                           std::to_string(c.mlp_ratio * c.d_model) +
                           "): each tensor-parallel rank holds whole heads");
  }
  const int64_t blocks = c.stage_blocks < 0 ? c.layers - c.first_block : c.stage_blocks;
  if (c.first_block < 0 || blocks < 1 || c.first_block + blocks > c.layers) {
    return InvalidArgument(
        "pipeline stage with blocks " + std::to_string(c.first_block) + " to " +
        std::to_string(c.first_block + blocks - 1) + " of a " + std::to_string(c.layers) +
        "-block model: every stage needs at least one block (parallel.pp <= model.layers)");
  }
  return Status::Ok();
}

TpSplit TpSplitOf(const std::string& name) {
  auto ends = [&](const char* s) {
    const size_t n = std::char_traits<char>::length(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  if (ends("attn.c_attn.weight") || ends("attn.c_attn.bias")) return TpSplit::kQkvRows;
  if (ends("mlp.c_fc.weight") || ends("mlp.c_fc.bias")) return TpSplit::kRows;
  if (ends("attn.c_proj.weight") || ends("mlp.c_proj.weight")) return TpSplit::kCols;
  return TpSplit::kReplicated;
}

at::Tensor TpShard(const std::string& name, const at::Tensor& full, int64_t tp_rank, int64_t tp_size) {
  if (tp_size == 1) return full;
  switch (TpSplitOf(name)) {
    case TpSplit::kQkvRows: {
      // [3d, ...] as [3, d, ...]: this rank's rows of each of q, k and v.
      std::vector<int64_t> shape{3, full.size(0) / 3};
      for (int64_t i = 1; i < full.dim(); ++i) shape.push_back(full.size(i));
      const int64_t part = shape[1] / tp_size;
      std::vector<int64_t> out{3 * part};
      for (int64_t i = 1; i < full.dim(); ++i) out.push_back(full.size(i));
      return full.view(shape).narrow(1, tp_rank * part, part).reshape(out);
    }
    case TpSplit::kRows: {
      const int64_t part = full.size(0) / tp_size;
      return full.narrow(0, tp_rank * part, part);
    }
    case TpSplit::kCols: {
      const int64_t part = full.size(1) / tp_size;
      return full.narrow(1, tp_rank * part, part);
    }
    case TpSplit::kReplicated:
      break;
  }
  return full;
}

namespace {

// Registers a parameter under a dotted name ("h.0.attn.c_attn.weight"),
// creating plain container modules on the way, so names match nanoGPT's
// state dict without a class per container.
// The whole model's parameters, names and shapes, in registration order
// (what Init draws, in this order, for any shard).
std::vector<std::pair<std::string, std::vector<int64_t>>> WholeModelParams(const GptConfig& c) {
  const int64_t d = c.d_model, hid = c.mlp_ratio * c.d_model;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out{{"wte.weight", {c.vocab_size, d}},
                                                                {"wpe.weight", {c.seq_len, d}}};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    out.push_back({h + "ln_1.weight", {d}});
    out.push_back({h + "ln_1.bias", {d}});
    out.push_back({h + "attn.c_attn.weight", {3 * d, d}});
    out.push_back({h + "attn.c_attn.bias", {3 * d}});
    out.push_back({h + "attn.c_proj.weight", {d, d}});
    out.push_back({h + "attn.c_proj.bias", {d}});
    out.push_back({h + "ln_2.weight", {d}});
    out.push_back({h + "ln_2.bias", {d}});
    out.push_back({h + "mlp.c_fc.weight", {hid, d}});
    out.push_back({h + "mlp.c_fc.bias", {hid}});
    out.push_back({h + "mlp.c_proj.weight", {d, hid}});
    out.push_back({h + "mlp.c_proj.bias", {d}});
  }
  out.push_back({"ln_f.weight", {d}});
  out.push_back({"ln_f.bias", {d}});
  if (!c.tie_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, d}});
  return out;
}

// A shard's shape of a whole parameter.
std::vector<int64_t> ShardShape(const std::string& name, std::vector<int64_t> shape, int64_t tp) {
  switch (TpSplitOf(name)) {
    case TpSplit::kQkvRows:
    case TpSplit::kRows:
      shape[0] /= tp;
      break;
    case TpSplit::kCols:
      shape[1] /= tp;
      break;
    case TpSplit::kReplicated:
      break;
  }
  return shape;
}

at::Tensor AddParam(torch::nn::Module& root, const std::string& dotted, at::IntArrayRef shape) {
  std::vector<std::string> parts;
  std::stringstream ss(dotted);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  torch::nn::Module* m = &root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    auto children = m->named_children();
    if (auto* child = children.find(parts[i])) {
      m = child->get();
    } else {
      m = m->register_module(parts[i], std::make_shared<torch::nn::Module>()).get();
    }
  }
  return m->register_parameter(parts.back(), at::empty(shape, at::kFloat));
}

}  // namespace

GptImpl::GptImpl(const GptConfig& cfg) : cfg_(cfg) {
  const int64_t d = cfg.d_model, hid = cfg.mlp_ratio * cfg.d_model;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    return AddParam(*this, name, ShardShape(name, std::move(shape), cfg.tp_size));
  };
  if (first_stage()) {
    wte_ = add("wte.weight", {cfg.vocab_size, d});
    wpe_ = add("wpe.weight", {cfg.seq_len, d});
  }
  for (int64_t l = cfg.first_block; l < cfg.first_block + stage_blocks(); ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    BlockParams p;
    p.ln1_w = add(h + "ln_1.weight", {d});
    p.ln1_b = add(h + "ln_1.bias", {d});
    p.attn_w = add(h + "attn.c_attn.weight", {3 * d, d});
    p.attn_b = add(h + "attn.c_attn.bias", {3 * d});
    p.attn_proj_w = add(h + "attn.c_proj.weight", {d, d});
    p.attn_proj_b = add(h + "attn.c_proj.bias", {d});
    p.ln2_w = add(h + "ln_2.weight", {d});
    p.ln2_b = add(h + "ln_2.bias", {d});
    p.fc_w = add(h + "mlp.c_fc.weight", {hid, d});
    p.fc_b = add(h + "mlp.c_fc.bias", {hid});
    p.mlp_proj_w = add(h + "mlp.c_proj.weight", {d, hid});
    p.mlp_proj_b = add(h + "mlp.c_proj.bias", {d});
    p.all = {p.ln1_w, p.ln1_b, p.attn_w, p.attn_b, p.attn_proj_w, p.attn_proj_b,
             p.ln2_w, p.ln2_b, p.fc_w,   p.fc_b,   p.mlp_proj_w,  p.mlp_proj_b};
    blocks_.push_back(std::move(p));
  }
  if (last_stage()) {
    lnf_w_ = add("ln_f.weight", {d});
    lnf_b_ = add("ln_f.bias", {d});
    // Tied: the head is wte itself. Registering it twice would hand the
    // optimiser and the gradient buffer the same tensor twice. A last stage
    // without the embeddings holds its own copy.
    if (!cfg.tie_embeddings) {
      head_w_ = add("lm_head.weight", {cfg.vocab_size, d});
    } else if (!first_stage()) {
      wte_ = add("wte.weight", {cfg.vocab_size, d});
    }
  }
}

void GptImpl::Init(uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard no_grad;
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg_.layers));
  // The whole model's draws in its registration order, whatever this shard
  // holds, so every shard is its part of the same model.
  auto mine = named_parameters();
  for (const auto& [name, shape] : WholeModelParams(cfg_)) {
    at::Tensor* held = mine.find(name);
    const bool whole = held != nullptr && held->sizes().vec() == shape;
    at::Tensor t = whole ? *held : at::empty(shape, at::kFloat);
    const bool is_weight = name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
    if (name.find(".ln_") != std::string::npos || name.rfind("ln_f.", 0) == 0) {
      is_weight ? t.fill_(1.0) : t.zero_();
    } else if (!is_weight) {
      t.zero_();
    } else {
      const bool residual = name.find("c_proj.weight") != std::string::npos;
      t.normal_(0.0, residual ? resid_std : 0.02, gen);
    }
    if (held != nullptr && !whole) held->copy_(TpShard(name, t, cfg_.tp_rank, cfg_.tp_size));
  }
}

// f: identity forward; backward sums the input's gradient over the TP
// group (each rank's heads or MLP columns contributed part of it).
struct CopyToTensorParallel : torch::autograd::Function<CopyToTensorParallel> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const GptImpl* model) {
    ctx->saved_data["model"] = reinterpret_cast<int64_t>(model);
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto* model = reinterpret_cast<const GptImpl*>(ctx->saved_data["model"].toInt());
    at::Tensor g = grad_out[0].to(at::kFloat).clone(at::MemoryFormat::Contiguous);
    if (Status st = model->tp.all_reduce(g); !st.ok()) throw TensorParallelError(st);
    return {g.to(grad_out[0].scalar_type()), at::Tensor()};
  }
};

// g: sums the partial outputs of a row-parallel layer over the TP group;
// its gradient passes unchanged to every rank's part.
struct ReduceFromTensorParallel : torch::autograd::Function<ReduceFromTensorParallel> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x, const GptImpl* model) {
    at::Tensor sum = x.to(at::kFloat).clone(at::MemoryFormat::Contiguous);
    if (Status st = model->tp.all_reduce(sum); !st.ok()) throw TensorParallelError(st);
    return sum.to(x.scalar_type());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grad_out) {
    return {grad_out[0], at::Tensor()};
  }
};

at::Tensor GptImpl::ColumnParallelInput(const at::Tensor& x) const {
  return cfg_.tp_size > 1 ? CopyToTensorParallel::apply(x, this) : x;
}

at::Tensor GptImpl::RowParallel(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) const {
  if (cfg_.tp_size == 1) return Linear(seam, x, w, b);
  return ReduceFromTensorParallel::apply(Linear(seam, x, w, at::Tensor()), this) + b;
}

at::Tensor GptImpl::Block(const BlockParams& p, const at::Tensor& x_in, const at::Tensor& blocked) const {
  // A tensor-parallel shard computes its own heads: nh of them, d wide.
  const int64_t b = x_in.size(0), t = x_in.size(1), hd = cfg_.d_model / cfg_.heads;
  const int64_t nh = cfg_.heads / cfg_.tp_size, d = nh * hd;
  at::Tensor x = Boundary(seam, x_in);

  // Attention: q, k, v from one fused projection, heads split to [B, H, T, hd].
  at::Tensor h = ColumnParallelInput(LayerNorm(seam, x, p.ln1_w, p.ln1_b, 1e-5));
  const auto qkv = Linear(seam, h, p.attn_w, p.attn_b).split(d, /*dim=*/-1);
  auto heads = [&](const at::Tensor& z) { return z.view({b, t, nh, hd}).transpose(1, 2); };
  const at::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  at::Tensor att = Scores(seam, q, k, 1.0 / std::sqrt(static_cast<double>(hd)));
  att = Softmax(seam, att.masked_fill(blocked, -std::numeric_limits<float>::infinity()));
  at::Tensor y = Matmul(seam, att, v).transpose(1, 2).reshape({b, t, d});
  x = x + RowParallel(y, p.attn_proj_w, p.attn_proj_b);

  h = ColumnParallelInput(LayerNorm(seam, x, p.ln2_w, p.ln2_b, 1e-5));
  h = Gelu(seam, Linear(seam, h, p.fc_w, p.fc_b));
  x = x + RowParallel(h, p.mlp_proj_w, p.mlp_proj_b);
  return Boundary(seam, x);
}

// Activation checkpointing for one block. LibTorch 1.13's C++ API has no
// torch.utils.checkpoint, so this is its reentrant variant by hand: forward
// runs the block without a graph (custom functions' forward runs with grad
// off) and keeps only the block input; backward rebuilds the block's graph
// from that input and differentiates it with respect to the input and the
// block's parameters. The parameters are inputs of the function, so their
// gradients reach their AccumulateGrad nodes (and any DDP-style hooks) as
// usual.
struct CheckpointedBlock : torch::autograd::Function<CheckpointedBlock> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& blocked, at::TensorList params, const GptImpl* model,
                            int64_t block) {
    ctx->save_for_backward({x});
    ctx->saved_data["blocked"] = blocked;
    ctx->saved_data["model"] = reinterpret_cast<int64_t>(model);
    ctx->saved_data["block"] = block;
    return model->Block(model->blocks_[block], x, blocked);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto* model = reinterpret_cast<const GptImpl*>(ctx->saved_data["model"].toInt());
    const auto& p = model->blocks_[ctx->saved_data["block"].toInt()];
    const at::Tensor blocked = ctx->saved_data["blocked"].toTensor();
    const at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor out;
    {
      torch::AutoGradMode grad_on(true);
      out = model->Block(p, x, blocked);
    }
    std::vector<at::Tensor> wrt{x};
    wrt.insert(wrt.end(), p.all.begin(), p.all.end());
    auto grads =
        torch::autograd::grad({out}, wrt, {grad_out[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);
    // One gradient per forward input: x, blocked (none), each parameter,
    // then none for the two non-tensor arguments.
    torch::autograd::variable_list result{grads[0], at::Tensor()};
    result.insert(result.end(), grads.begin() + 1, grads.end());
    result.push_back(at::Tensor());
    result.push_back(at::Tensor());
    return result;
  }
};

at::Tensor GptImpl::Logits(const at::Tensor& inputs, const at::Tensor& mask) const {
  TORCH_CHECK(first_stage() && last_stage(), "gpt-tiny: Logits() of one pipeline stage; use StageForward()");
  return StageForward(inputs, mask);
}

at::Tensor GptImpl::StageForward(const at::Tensor& in, const at::Tensor& mask) const {
  const int64_t b = in.size(0), t = in.size(1);
  TORCH_CHECK(t <= cfg_.seq_len, "gpt-tiny: sequence of ", t, " tokens exceeds seq_len ", cfg_.seq_len);
  const auto bool_opts = at::TensorOptions().dtype(at::kBool);
  // Causal: query i sees keys j <= i. With padding, keys that are padding
  // are hidden too; a query still sees itself so that a padding row never
  // has every key masked (softmax of all -inf is NaN). Real rows only ever
  // see real keys, so padding cannot change their outputs.
  at::Tensor allowed = at::ones({t, t}, bool_opts).tril().view({1, 1, t, t});
  if (mask.defined()) {
    allowed = allowed & (mask.view({b, 1, 1, t}) | at::eye(t, bool_opts).view({1, 1, t, t}));
  }
  const at::Tensor blocked = allowed.logical_not();

  at::Tensor x = in;
  if (first_stage()) {
    x = at::embedding(wte_, in) + at::embedding(wpe_, at::arange(t, at::kLong)).unsqueeze(0);
    if (seam.observe) seam.observe("embeddings", x);
  }
  const bool checkpoint = cfg_.activation_checkpointing && torch::GradMode::is_enabled();
  for (size_t l = 0; l < blocks_.size(); ++l) {
    x = checkpoint ? CheckpointedBlock::apply(x, blocked, at::TensorList(blocks_[l].all), this,
                                              static_cast<int64_t>(l))
                   : Block(blocks_[l], x, blocked);
    if (seam.observe) seam.observe("blocks." + std::to_string(cfg_.first_block + static_cast<int64_t>(l)), x);
  }
  if (!last_stage()) return x;
  x = Boundary(seam, LayerNorm(seam, x, lnf_w_, lnf_b_, 1e-5));
  x = Boundary(seam, Linear(seam, x, cfg_.tie_embeddings ? wte_ : head_w_, at::Tensor()));
  if (seam.observe) seam.observe("logits", x);
  return x;
}

at::Tensor GptImpl::Loss(const at::Tensor& inputs, const at::Tensor& targets, const at::Tensor& mask) const {
  return LossFromLogits(Logits(inputs, mask), targets);
}

at::Tensor GptImpl::LossFromLogits(const at::Tensor& logits, const at::Tensor& targets) const {
  // Loss in fp32 whatever the compute dtype: log-softmax over the vocabulary
  // is where low precision hurts most.
  return at::cross_entropy_loss(logits.reshape({-1, cfg_.vocab_size}).to(at::kFloat), targets.reshape({-1}),
                                /*weight=*/{}, at::Reduction::Mean, /*ignore_index=*/-100);
}

int64_t GptImpl::MatmulParams() const {
  const int64_t d = cfg_.d_model;
  const int64_t per_block = (3 * d * d + d * d + 2 * cfg_.mlp_ratio * d * d) / cfg_.tp_size;
  return stage_blocks() * per_block + (last_stage() ? cfg_.vocab_size * d : 0);
}

double GptImpl::TrainFlopsPerToken(int64_t context) const {
  return 6.0 * static_cast<double>(MatmulParams()) + 12.0 * static_cast<double>(stage_blocks()) *
                                                         static_cast<double>(cfg_.d_model / cfg_.tp_size) *
                                                         static_cast<double>(context);
}

StatusOr<Gpt> BuildGpt(const GptConfig& cfg, uint64_t seed) {
  FD_RETURN_IF_ERROR(ValidateGptConfig(cfg));
  try {
    Gpt model(cfg);
    model->Init(seed);
    return model;
  } catch (const c10::Error& e) {
    return Internal(std::string("building gpt-tiny failed: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Internal(std::string("building gpt-tiny failed: ") + e.what());
  }
}

}  // namespace firedrill::agent
