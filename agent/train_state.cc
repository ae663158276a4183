#include "agent/train_state.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "agent/loss_scaler.h"
#include "agent/model.h"
#include "agent/optim.h"

namespace firedrill::agent {

namespace {

constexpr const char* kOptimPrefix = "optim/";
constexpr const char* kRngKey = "rng/cpu";

std::string Shape(at::IntArrayRef sizes) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  os << "]";
  return os.str();
}

uint64_t Fnv1a(uint64_t h, std::string_view s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string What(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

}  // namespace

std::string ConfigHash(const TrainModel& model, const std::string& optim_kind) {
  uint64_t h = Fnv1a(0xcbf29ce484222325ULL, "fd-train-config/1;optim=" + optim_kind);
  for (const auto& kv : model.module().named_parameters()) {
    h = Fnv1a(h, ";" + kv.key() + Shape(kv.value().sizes()) + c10::toString(kv.value().scalar_type()));
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, h);
  return buf;
}

ShardData CaptureTrainState(const TrainModel& model, const Optimizer& optim, const LossScaler& scaler,
                            const DataCursor& cursor, int64_t step, const v1::JobSpec& job) {
  at::NoGradGuard no_grad;
  ShardData d;
  for (const auto& kv : model.module().named_parameters())
    d.tensors[kModelTensorPrefix + kv.key()] = kv.value().detach().clone();
  for (const auto& [name, t] : optim.State()) d.tensors[kOptimPrefix + name] = t.detach().clone();
  d.tensors[kRngKey] = at::detail::getDefaultCPUGenerator().get_state();
  d.blobs["step"] = std::to_string(step);
  d.blobs["loss_scaler"] = scaler.state().Serialize();
  d.blobs["data_cursor"] = cursor.Serialize();
  d.blobs["job"] = job.DebugString();
  return d;
}

StatusOr<RestoredState> RestoreTrainState(const ShardData& shard, TrainModel& model, Optimizer& optim,
                                          LossScaler& scaler) {
  auto blob = [&](const char* key) -> StatusOr<std::string> {
    auto it = shard.blobs.find(key);
    if (it == shard.blobs.end()) return DataLoss(std::string("no \"") + key + "\" entry in the shard");
    return it->second;
  };
  RestoredState out;
  // Parse everything first: nothing changes unless all of it fits.
  auto step_text = blob("step");
  if (!step_text.ok()) return step_text.status();
  const std::string& st = *step_text;
  auto [ptr, ec] = std::from_chars(st.data(), st.data() + st.size(), out.step);
  if (ec != std::errc() || ptr != st.data() + st.size() || out.step < 0)
    return DataLoss("\"step\" entry is not a step number: \"" + st + "\"");
  auto scaler_text = blob("loss_scaler");
  if (!scaler_text.ok()) return scaler_text.status();
  auto scaler_state = LossScaler::State::Parse(*scaler_text);
  if (!scaler_state.ok()) return DataLoss("\"loss_scaler\" entry: " + scaler_state.status().message());
  auto cursor_text = blob("data_cursor");
  if (!cursor_text.ok()) return cursor_text.status();
  auto cursor = DataCursor::Parse(*cursor_text);
  if (!cursor.ok()) return DataLoss("\"data_cursor\" entry: " + cursor.status().message());
  out.cursor = *cursor;

  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (live parameter, saved value)
  for (const auto& kv : model.module().named_parameters()) {
    const std::string key = kModelTensorPrefix + kv.key();
    auto it = shard.tensors.find(key);
    if (it == shard.tensors.end())
      return FailedPrecondition(key + ": missing from the checkpoint (a different model?)");
    const at::Tensor& saved = it->second;
    if (saved.sizes() != kv.value().sizes() || saved.scalar_type() != kv.value().scalar_type()) {
      return FailedPrecondition(key + ": " + Shape(saved.sizes()) + " " + c10::toString(saved.scalar_type()) +
                                " in the checkpoint, " + Shape(kv.value().sizes()) + " " +
                                c10::toString(kv.value().scalar_type()) + " in this model");
    }
    copies.emplace_back(kv.value(), saved);
  }
  std::vector<std::pair<std::string, at::Tensor>> optim_state;
  const std::string prefix = kOptimPrefix;
  for (const auto& [name, t] : shard.tensors)
    if (name.compare(0, prefix.size(), prefix) == 0) optim_state.emplace_back(name.substr(prefix.size()), t);
  auto rng = shard.tensors.find(kRngKey);
  if (rng == shard.tensors.end()) return DataLoss(std::string("no \"") + kRngKey + "\" entry in the shard");

  // Optimiser first: LoadState leaves the state unchanged on error.
  FD_RETURN_IF_ERROR(optim.LoadState(optim_state));
  FD_RETURN_IF_ERROR(scaler.set_state(*scaler_state));
  try {
    at::NoGradGuard no_grad;
    for (auto& [live, saved] : copies) live.detach().copy_(saved);
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(rng->second);
  } catch (const std::exception& e) {
    return Internal("restoring the checkpoint failed: " + What(e));
  }
  return out;
}

}  // namespace firedrill::agent
