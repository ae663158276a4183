// The models a rank trains. Only an MLP for now: input -> hidden x layers
// (ReLU) -> classes.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::agent {

// Checks a ModelSpec without building anything.
Status ValidateModelSpec(const v1::ModelSpec& spec);

// Builds the model with parameters drawn from an explicit generator seeded
// by `seed` (same distribution as PyTorch's nn.Linear default), so that the
// result never depends on the process-global RNG that other threads share.
StatusOr<torch::nn::Sequential> BuildModel(const v1::ModelSpec& spec, uint64_t seed);

}  // namespace firedrill::agent
