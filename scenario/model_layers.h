// The mlp's layers by name, as `probe activations` prints them and
// model.keep_fp32 names them: one parser for the scenario validation (a
// fix is checked before any rank starts) and the agent's model (which runs
// those layers in fp32). No LibTorch here.
#pragma once

#include <set>
#include <string>

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::scenario {

// "layers.0" .. "layers.N-1" for the hidden layers, "head" last
// (i == hidden_layers).
std::string MlpLayerName(int i, int hidden_layers);

// model.keep_fp32 parsed (comma-separated, spaces around names ignored) and
// checked against the model's layers. The error says what is wrong, without
// the key's name: callers prefix where it was read.
StatusOr<std::set<std::string>> KeepFp32Layers(const v1::ModelSpec& spec);

}  // namespace firedrill::scenario
