#include "agent/model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

namespace firedrill::agent {

Status ValidateModelSpec(const v1::ModelSpec& spec) {
  if (spec.kind() != "mlp") return InvalidArgument("model.kind must be \"mlp\", got \"" + spec.kind() + "\"");
  if (spec.input_dim() <= 0) return InvalidArgument("model.input_dim must be > 0");
  if (spec.num_classes() <= 1) return InvalidArgument("model.num_classes must be > 1");
  if (spec.layers() < 0) return InvalidArgument("model.layers must be >= 0");
  if (spec.layers() > 0 && spec.hidden() <= 0) return InvalidArgument("model.hidden must be > 0");
  return Status::Ok();
}

StatusOr<torch::nn::Sequential> BuildModel(const v1::ModelSpec& spec, uint64_t seed) {
  FD_RETURN_IF_ERROR(ValidateModelSpec(spec));
  try {
    torch::nn::Sequential net;
    int64_t in = spec.input_dim();
    for (int l = 0; l < spec.layers(); ++l) {
      net->push_back(torch::nn::Linear(in, spec.hidden()));
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

}  // namespace firedrill::agent
