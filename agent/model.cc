#include "agent/model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "agent/error_text.h"
#include "scenario/model_layers.h"

namespace firedrill::agent {

namespace {

// A simulated device budget overflow (agent/memory.h) keeps its CUDA-like
// message and becomes RESOURCE_EXHAUSTED; anything else is internal.
Status LossError(const char* model, const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return ResourceExhausted(ErrorText(e));
  if (const auto* tp = dynamic_cast<const TensorParallelError*>(&e))
    return Status(tp->status().code(), std::string(model) + " forward: " + tp->status().message());
  return Internal(std::string(model) + " loss failed: " + ErrorText(e));
}

class MlpModel final : public TrainModel {
 public:
  MlpModel(torch::nn::Sequential net, const std::set<std::string>& keep_fp32) : net_(std::move(net)) {
    for (const auto& m : net_->modules(/*include_self=*/false)) {
      if (auto* lin = m->as<torch::nn::Linear>()) linears_.push_back(lin);
      if (auto* ln = m->as<torch::nn::LayerNorm>()) norms_.push_back(ln);
    }
    for (size_t i = 0; i < linears_.size(); ++i) {
      const std::string layer =
          scenario::MlpLayerName(static_cast<int>(i), static_cast<int>(linears_.size()) - 1);
      names_.push_back({layer + ".linear", layer + ".norm"});
      keep_fp32_.push_back(keep_fp32.count(layer) > 0);
    }
  }

  const std::string& kind() const override {
    static const std::string k = "mlp";
    return k;
  }

  StatusOr<at::Tensor> Loss(const Batch& batch) override {
    try {
      // Same maths as net_->forward (nn::Linear is at::linear), spelled out
      // so every product goes through the precision seam.
      static const std::string kInput = "input";
      Watch(seam_, kInput, batch.x);
      // A layer kept in fp32 reads its input as it is (under autocast the
      // cast to 2 bytes happens inside the op it would have run).
      at::Tensor x = keep_fp32_.empty() || !keep_fp32_[0] ? Boundary(seam_, batch.x) : batch.x;
      for (size_t i = 0; i < linears_.size(); ++i) {
        const bool hidden = i + 1 < linears_.size();
        const auto& w = linears_[i]->weight;
        const auto& b = linears_[i]->bias;
        if (keep_fp32_[i]) {
          // autocast(enabled=False) around the layer: fp32 input, its fp32
          // parameters, fp32 out.
          x = at::linear(x.to(at::kFloat), w, b);
          Watch(seam_, names_[i].linear, x);
          if (i < norms_.size()) {
            x = RunOp(SeamOp::kLayerNorm, {x, norms_[i]->weight, norms_[i]->bias}, norms_[i]->options.eps());
            Watch(seam_, names_[i].norm, x);
          }
          if (hidden) {
            x = RunOp(SeamOp::kRelu, {x}, 0.0);
            // The next layer's own op casts it down, unless it is kept too.
            if (!keep_fp32_[i + 1]) x = Boundary(seam_, x);
          }
          continue;
        }
        x = Linear(seam_, x, w, b);
        Watch(seam_, names_[i].linear, x);
        if (i < norms_.size()) {
          // In fp32, as autocast runs layer_norm (a bf16 or half product comes in).
          x = LayerNorm(seam_, x, norms_[i]->weight, norms_[i]->bias, norms_[i]->options.eps());
          Watch(seam_, names_[i].norm, x);
        }
        if (hidden) x = Relu(seam_, x);
        x = Boundary(seam_, x);
      }
      at::Tensor loss = at::cross_entropy_loss(x.to(at::kFloat), batch.y);
      static const std::string kLoss = "loss";
      Watch(seam_, kLoss, loss);
      return loss;
    } catch (const std::exception& e) {
      return LossError("mlp", e);
    }
  }

  double TrainFlopsPerToken(int64_t) const override {
    double weights = 0;
    for (const auto* lin : linears_) weights += static_cast<double>(lin->weight.numel());
    return 6.0 * weights;
  }

  torch::nn::Module& module() override { return *net_; }
  const torch::nn::Module& module() const override { return *net_; }
  ComputeSeam& seam() override { return seam_; }

 private:
  struct Names {
    std::string linear, norm;
  };
  torch::nn::Sequential net_;
  std::vector<torch::nn::LinearImpl*> linears_;
  std::vector<torch::nn::LayerNormImpl*> norms_;  // one per hidden layer, or none
  std::vector<Names> names_;                      // per linear, as `probe activations` shows them
  std::vector<bool> keep_fp32_;                   // per linear: the layer runs in fp32 (model.keep_fp32)
  ComputeSeam seam_;
};

class GptModel final : public TrainModel {
 public:
  explicit GptModel(Gpt gpt) : gpt_(std::move(gpt)) {}

  const std::string& kind() const override {
    static const std::string k = "gpt-tiny";
    return k;
  }

  StatusOr<at::Tensor> Loss(const Batch& batch) override {
    if (batch.x.dim() != 2 || batch.x.scalar_type() != at::kLong) {
      return InvalidArgument("gpt-tiny needs a token batch ([B, T] int64 inputs); is data.kind tokens?");
    }
    try {
      at::Tensor loss = gpt_->Loss(batch.x, batch.y, batch.mask);
      static const std::string kLoss = "loss";
      Watch(gpt_->seam, kLoss, loss);
      return loss;
    } catch (const std::exception& e) {
      return LossError("gpt-tiny", e);
    }
  }

  double TrainFlopsPerToken(int64_t context) const override { return gpt_->TrainFlopsPerToken(context); }
  GptImpl* gpt() override { return gpt_.get(); }
  torch::nn::Module& module() override { return *gpt_; }
  const torch::nn::Module& module() const override { return *gpt_; }
  ComputeSeam& seam() override { return gpt_->seam; }

 private:
  Gpt gpt_;
};

}  // namespace

int64_t TrainModel::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

Status ValidateModelSpec(const v1::ModelSpec& spec) {
  if (auto keep = scenario::KeepFp32Layers(spec); !keep.ok())
    return InvalidArgument("model.keep_fp32: " + keep.status().message());
  if (spec.kind() == "gpt-tiny") {
    if (spec.vocab_size() < 0) return InvalidArgument("model.vocab_size must be >= 0 (0 = 256)");
    if (spec.mlp_ratio() < 0) return InvalidArgument("model.mlp_ratio must be >= 0 (0 = 4)");
    if (!spec.norm().empty() && spec.norm() != "layer")
      return InvalidArgument("gpt-tiny is pre-LN: model.norm must be \"layer\" or left out, got \"" +
                             spec.norm() + "\"");
    return ValidateGptConfig(GptConfigFromSpec(spec));
  }
  if (spec.kind() != "mlp") {
    return InvalidArgument("model.kind must be \"mlp\" or \"gpt-tiny\", got \"" + spec.kind() + "\"");
  }
  if (spec.input_dim() <= 0) return InvalidArgument("model.input_dim must be > 0");
  if (spec.num_classes() <= 1) return InvalidArgument("model.num_classes must be > 1");
  if (spec.layers() < 0) return InvalidArgument("model.layers must be >= 0");
  if (spec.layers() > 0 && spec.hidden() <= 0) return InvalidArgument("model.hidden must be > 0");
  if (!spec.norm().empty() && spec.norm() != "none" && spec.norm() != "layer")
    return InvalidArgument("model.norm must be \"none\" or \"layer\", got \"" + spec.norm() + "\"");
  return Status::Ok();
}

GptConfig GptConfigFromSpec(const v1::ModelSpec& spec) {
  GptConfig c;
  c.vocab_size = spec.vocab_size() > 0 ? spec.vocab_size() : kByteVocab;
  c.seq_len = spec.seq_len();
  c.d_model = spec.hidden();
  c.layers = spec.layers();
  c.heads = spec.heads();
  c.mlp_ratio = spec.mlp_ratio() > 0 ? spec.mlp_ratio() : 4;
  c.activation_checkpointing = spec.activation_checkpointing();
  return c;
}

StatusOr<torch::nn::Sequential> BuildModel(const v1::ModelSpec& spec, uint64_t seed) {
  FD_RETURN_IF_ERROR(ValidateModelSpec(spec));
  if (spec.kind() != "mlp")
    return InvalidArgument("BuildModel builds mlp only; use CreateModel for " + spec.kind());
  try {
    torch::nn::Sequential net;
    int64_t in = spec.input_dim();
    for (int l = 0; l < spec.layers(); ++l) {
      net->push_back(torch::nn::Linear(in, spec.hidden()));
      // LayerNorm's own init (weight 1, bias 0) draws nothing.
      if (spec.norm() == "layer")
        net->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({spec.hidden()}).eps(1e-5)));
      net->push_back(torch::nn::ReLU());
      in = spec.hidden();
    }
    net->push_back(torch::nn::Linear(in, spec.num_classes()));

    // nn::Linear's own init used the global generator; redraw from ours.
    // kaiming_uniform(a=sqrt(5)) and PyTorch's bias init both reduce to
    // U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    torch::NoGradGuard no_grad;
    for (const auto& m : net->modules(/*include_self=*/false)) {
      if (auto* lin = m->as<torch::nn::Linear>()) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(lin->options.in_features()));
        lin->weight.uniform_(-bound, bound, gen);
        lin->bias.uniform_(-bound, bound, gen);
      }
    }
    return net;
  } catch (const std::exception& e) {
    return Internal(std::string("building the model failed: ") + e.what());
  }
}

void AssignStage(int64_t layers, int stage, int stages, ModelShard* shard) {
  const int64_t base = layers / stages, extra = layers % stages;
  shard->first_block = stage * base + std::min<int64_t>(stage, extra);
  shard->stage_blocks = base + (stage < extra ? 1 : 0);
}

StatusOr<std::unique_ptr<TrainModel>> CreateModel(const v1::ModelSpec& spec, uint64_t seed) {
  return CreateModel(spec, seed, ModelShard{});
}

StatusOr<std::unique_ptr<TrainModel>> CreateModel(const v1::ModelSpec& spec, uint64_t seed,
                                                  const ModelShard& shard) {
  FD_RETURN_IF_ERROR(ValidateModelSpec(spec));
  const bool whole = shard.tp_size == 1 && shard.first_block == 0 && shard.stage_blocks < 0;
  if (!whole && spec.kind() != "gpt-tiny")
    return InvalidArgument("tensor and pipeline parallelism split gpt-tiny's blocks; model.kind is " +
                           spec.kind());
  if (spec.kind() == "gpt-tiny") {
    GptConfig cfg = GptConfigFromSpec(spec);
    cfg.tp_size = shard.tp_size;
    cfg.tp_rank = shard.tp_rank;
    cfg.first_block = shard.first_block;
    cfg.stage_blocks = shard.stage_blocks;
    auto gpt = BuildGpt(cfg, seed);
    if (!gpt.ok()) return gpt.status();
    return std::unique_ptr<TrainModel>(new GptModel(std::move(gpt).value()));
  }
  auto net = BuildModel(spec, seed);
  if (!net.ok()) return net.status();
  auto keep = scenario::KeepFp32Layers(spec);  // checked by ValidateModelSpec above
  return std::unique_ptr<TrainModel>(
      new MlpModel(std::move(net).value(), keep.ok() ? *keep : std::set<std::string>{}));
}

}  // namespace firedrill::agent
