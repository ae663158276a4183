#include "common/restore_parts.h"

#include <sstream>

namespace firedrill {

namespace {

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

void Append(std::string* out, const char* part, const char* sep) {
  if (!out->empty()) *out += sep;
  *out += part;
}

}  // namespace

std::string RestoreParts::ToString() const {
  if (All()) return "all";
  std::string out = "model";
  if (optim) Append(&out, "optim", ",");
  if (rng) Append(&out, "rng", ",");
  if (data) Append(&out, "data", ",");
  return out;
}

std::string RestoreParts::Missing() const {
  std::string out;
  if (!optim) Append(&out, "optimiser state and loss scale", ", ");
  if (!rng) Append(&out, "RNG", ", ");
  if (!data) Append(&out, "data position", ", ");
  return out;
}

StatusOr<RestoreParts> ParseRestoreParts(const std::string& text) {
  const std::string all = Trim(text);
  if (all.empty() || all == "all") return RestoreParts{};
  RestoreParts p{false, false, false};
  bool model = false;
  std::stringstream in(all);
  std::string part;
  while (std::getline(in, part, ',')) {
    part = Trim(part);
    if (part == "model") {
      model = true;
    } else if (part == "optim") {
      p.optim = true;
    } else if (part == "rng") {
      p.rng = true;
    } else if (part == "data") {
      p.data = true;
    } else {
      return InvalidArgument("\"" + part + "\" is not a part of a checkpoint: use \"all\" or a comma-separated "
                             "list of model, optim, rng, data");
    }
  }
  if (!model)
    return InvalidArgument("\"" + all + "\" leaves out model: a resume always restores the parameters (leave "
                           "checkpoint.resume_from empty to start from scratch)");
  return p;
}

}  // namespace firedrill
