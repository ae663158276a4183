#include "scenario/model_layers.h"

#include <sstream>

namespace firedrill::scenario {

std::string MlpLayerName(int i, int hidden_layers) {
  return i < hidden_layers ? "layers." + std::to_string(i) : "head";
}

StatusOr<std::set<std::string>> KeepFp32Layers(const v1::ModelSpec& spec) {
  std::set<std::string> out;
  if (spec.keep_fp32().empty()) return out;
  if (spec.kind() != "mlp")
    return InvalidArgument("names mlp layers (layers.0 .. layers.N-1, head); " + spec.kind() +
                           " runs every layer in the job's precision");
  std::set<std::string> known;
  std::string listed;
  for (int i = 0; i <= spec.layers(); ++i) {
    known.insert(MlpLayerName(i, spec.layers()));
    listed += (listed.empty() ? "" : ", ") + MlpLayerName(i, spec.layers());
  }
  std::stringstream in(spec.keep_fp32());
  for (std::string name; std::getline(in, name, ',');) {
    const size_t a = name.find_first_not_of(' '), z = name.find_last_not_of(' ');
    name = a == std::string::npos ? "" : name.substr(a, z - a + 1);
    if (!known.count(name))
      return InvalidArgument("no layer '" + name + "' in this mlp; its layers are " + listed +
                             " (comma-separated, as `firedrill probe activations` names them)");
    out.insert(name);
  }
  return out;
}

}  // namespace firedrill::scenario
