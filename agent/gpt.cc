#include "agent/gpt.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>
#include <sstream>

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
  return Status::Ok();
}

namespace {

// Registers a parameter under a dotted name ("h.0.attn.c_attn.weight"),
// creating plain container modules on the way, so names match nanoGPT's
// state dict without a class per container.
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
  wte_ = AddParam(*this, "wte.weight", {cfg.vocab_size, d});
  wpe_ = AddParam(*this, "wpe.weight", {cfg.seq_len, d});
  for (int64_t l = 0; l < cfg.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    BlockParams p;
    p.ln1_w = AddParam(*this, h + "ln_1.weight", {d});
    p.ln1_b = AddParam(*this, h + "ln_1.bias", {d});
    p.attn_w = AddParam(*this, h + "attn.c_attn.weight", {3 * d, d});
    p.attn_b = AddParam(*this, h + "attn.c_attn.bias", {3 * d});
    p.attn_proj_w = AddParam(*this, h + "attn.c_proj.weight", {d, d});
    p.attn_proj_b = AddParam(*this, h + "attn.c_proj.bias", {d});
    p.ln2_w = AddParam(*this, h + "ln_2.weight", {d});
    p.ln2_b = AddParam(*this, h + "ln_2.bias", {d});
    p.fc_w = AddParam(*this, h + "mlp.c_fc.weight", {hid, d});
    p.fc_b = AddParam(*this, h + "mlp.c_fc.bias", {hid});
    p.mlp_proj_w = AddParam(*this, h + "mlp.c_proj.weight", {d, hid});
    p.mlp_proj_b = AddParam(*this, h + "mlp.c_proj.bias", {d});
    p.all = {p.ln1_w, p.ln1_b, p.attn_w, p.attn_b, p.attn_proj_w, p.attn_proj_b,
             p.ln2_w, p.ln2_b, p.fc_w,   p.fc_b,   p.mlp_proj_w,  p.mlp_proj_b};
    blocks_.push_back(std::move(p));
  }
  lnf_w_ = AddParam(*this, "ln_f.weight", {d});
  lnf_b_ = AddParam(*this, "ln_f.bias", {d});
  // Tied: the head is wte itself. Registering it twice would hand the
  // optimiser and the gradient buffer the same tensor twice.
  if (!cfg.tie_embeddings) head_w_ = AddParam(*this, "lm_head.weight", {cfg.vocab_size, d});
}

void GptImpl::Init(uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard no_grad;
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg_.layers));
  // named_parameters() is in registration order, so the draws are too.
  for (auto& np : named_parameters()) {
    const std::string& name = np.key();
    at::Tensor& t = np.value();
    const bool is_weight = name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
    if (name.find(".ln_") != std::string::npos || name.rfind("ln_f.", 0) == 0) {
      is_weight ? t.fill_(1.0) : t.zero_();
    } else if (!is_weight) {
      t.zero_();
    } else {
      const bool residual = name.find("c_proj.weight") != std::string::npos;
      t.normal_(0.0, residual ? resid_std : 0.02, gen);
    }
  }
}

at::Tensor GptImpl::Block(const BlockParams& p, const at::Tensor& x_in, const at::Tensor& blocked) const {
  const int64_t b = x_in.size(0), t = x_in.size(1), d = cfg_.d_model, nh = cfg_.heads, hd = d / nh;
  at::Tensor x = Boundary(seam, x_in);

  // Attention: q, k, v from one fused projection, heads split to [B, H, T, hd].
  at::Tensor h = LayerNorm(seam, x, p.ln1_w, p.ln1_b, 1e-5);
  const auto qkv = Linear(seam, h, p.attn_w, p.attn_b).split(d, /*dim=*/-1);
  auto heads = [&](const at::Tensor& z) { return z.view({b, t, nh, hd}).transpose(1, 2); };
  const at::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  at::Tensor att = Scores(seam, q, k, 1.0 / std::sqrt(static_cast<double>(hd)));
  att = Softmax(seam, att.masked_fill(blocked, -std::numeric_limits<float>::infinity()));
  at::Tensor y = Matmul(seam, att, v).transpose(1, 2).reshape({b, t, d});
  x = x + Linear(seam, y, p.attn_proj_w, p.attn_proj_b);

  h = LayerNorm(seam, x, p.ln2_w, p.ln2_b, 1e-5);
  h = Gelu(seam, Linear(seam, h, p.fc_w, p.fc_b));
  x = x + Linear(seam, h, p.mlp_proj_w, p.mlp_proj_b);
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
  const int64_t b = inputs.size(0), t = inputs.size(1);
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

  at::Tensor x = at::embedding(wte_, inputs) + at::embedding(wpe_, at::arange(t, at::kLong)).unsqueeze(0);
  if (seam.observe) seam.observe("embeddings", x);
  const bool checkpoint = cfg_.activation_checkpointing && torch::GradMode::is_enabled();
  for (size_t l = 0; l < blocks_.size(); ++l) {
    x = checkpoint ? CheckpointedBlock::apply(x, blocked, at::TensorList(blocks_[l].all), this,
                                              static_cast<int64_t>(l))
                   : Block(blocks_[l], x, blocked);
    if (seam.observe) seam.observe("blocks." + std::to_string(l), x);
  }
  x = Boundary(seam, LayerNorm(seam, x, lnf_w_, lnf_b_, 1e-5));
  x = Boundary(seam, Linear(seam, x, cfg_.tie_embeddings ? wte_ : head_w_, at::Tensor()));
  if (seam.observe) seam.observe("logits", x);
  return x;
}

at::Tensor GptImpl::Loss(const at::Tensor& inputs, const at::Tensor& targets, const at::Tensor& mask) const {
  const at::Tensor logits = Logits(inputs, mask);
  // Loss in fp32 whatever the compute dtype: log-softmax over the vocabulary
  // is where low precision hurts most.
  return at::cross_entropy_loss(logits.reshape({-1, cfg_.vocab_size}).to(at::kFloat), targets.reshape({-1}),
                                /*weight=*/{}, at::Reduction::Mean, /*ignore_index=*/-100);
}

int64_t GptImpl::MatmulParams() const {
  const int64_t d = cfg_.d_model;
  const int64_t per_block = 3 * d * d + d * d + 2 * cfg_.mlp_ratio * d * d;
  return cfg_.layers * per_block + cfg_.vocab_size * d;
}

double GptImpl::TrainFlopsPerToken(int64_t context) const {
  return 6.0 * static_cast<double>(MatmulParams()) + 12.0 * static_cast<double>(cfg_.layers) *
                                                         static_cast<double>(cfg_.d_model) *
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
