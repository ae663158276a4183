#include "agent/train_state.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <sstream>

#include <spdlog/spdlog.h>

#include "agent/comm/process_group.h"
#include "agent/loss_scaler.h"
#include "agent/model.h"
#include "agent/optim.h"
#include "agent/error_text.h"

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

// Entries of the all-reduce that gathers shard descriptions: bytes (-1: the
// write failed) and the 32 digest bytes, one row per rank.
constexpr int64_t kShardRow = 33;

std::vector<uint8_t> HexToBytes(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string BytesToHex(const std::vector<uint8_t>& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

Status WithPrefix(const std::string& prefix, const Status& st) { return Status(st.code(), prefix + st.message()); }

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
                            const DataCursor& cursor, int64_t step, const v1::JobSpec& job, bool with_model) {
  at::NoGradGuard no_grad;
  ShardData d;
  if (with_model)
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
                                          LossScaler& scaler, const RestoreParts& parts) {
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
  out.cursor = parts.data ? *cursor : DataCursor{};  // batch 0: the samples come again

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
  if (parts.optim) {
    FD_RETURN_IF_ERROR(optim.LoadState(optim_state));
    FD_RETURN_IF_ERROR(scaler.set_state(*scaler_state));
  }
  try {
    at::NoGradGuard no_grad;
    for (auto& [live, saved] : copies) live.detach().copy_(saved);
    if (parts.rng) {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      gen.set_state(rng->second);
    }
  } catch (const std::exception& e) {
    return Internal("restoring the checkpoint failed: " + ErrorText(e));
  }
  return out;
}

Status SaveShardedCheckpoint(comm::ProcessGroup& pg, const CheckpointTarget& t, const ShardData& shard) {
  const int rank = t.rank, world = t.world_size;
  const int64_t steps = t.steps;
  const std::string dir = StepDir(t.root, steps);
  const std::string who =
      "rank " + std::to_string(rank) + " step " + std::to_string(steps - 1) + ": checkpoint " + dir + ": ";
  ShardInfo info;
  const Status written = WriteShard(dir, rank, shard, &info);

  // Every rank learns every shard's size and digest (and who failed) in one
  // small all-reduce: each fills its own row of zeros.
  at::Tensor table = at::zeros({world, kShardRow}, at::kDouble);
  {
    auto row = table.accessor<double, 2>()[rank];
    if (written.ok()) {
      row[0] = static_cast<double>(info.bytes);
      const std::vector<uint8_t> digest = HexToBytes(info.sha256);
      for (size_t i = 0; i < digest.size() && i + 1 < kShardRow; ++i) row[i + 1] = digest[i];
    } else {
      row[0] = -1;
    }
  }
  FD_RETURN_IF_ERROR(pg.AllReduceSum(table, steps - 1));
  if (!written.ok()) return WithPrefix(who, written);
  auto rows = table.accessor<double, 2>();
  std::string failed;
  for (int r = 0; r < world; ++r)
    if (rows[r][0] < 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  if (!failed.empty())
    return Aborted(who + "rank " + failed + " could not write its shard (see that rank's log); no manifest written");
  if (rank != 0) return Status::Ok();

  Manifest m;
  if (!t.tensors.empty()) {
    m.format_version = 2;
    m.tensors = t.tensors;
  }
  m.step = steps;
  m.world_size = world;
  m.config_hash = t.config_hash;
  for (int r = 0; r < world; ++r) {
    ShardInfo s;
    s.file = ShardFileName(r);
    s.rank = r;
    s.bytes = static_cast<int64_t>(rows[r][0]);
    std::vector<uint8_t> digest(kShardRow - 1);
    for (int64_t i = 1; i < kShardRow; ++i) digest[i - 1] = static_cast<uint8_t>(rows[r][i]);
    s.sha256 = BytesToHex(digest);
    m.shards.push_back(std::move(s));
  }
  if (Status st = WriteManifest(dir, m); !st.ok()) {
    std::string hint;
    if (st.code() == StatusCode::kNotFound || st.code() == StatusCode::kDataLoss)
      hint = " (every rank writes its own shard: checkpoint.dir must be storage all ranks share)";
    return Status(st.code(), who + st.message() + hint);
  }
  if (t.keep > 0) {
    if (Status st = PruneCheckpoints(t.root, t.keep, t.keep_period); !st.ok())
      spdlog::warn("{}pruning old checkpoints failed: {}", who, st.message());
  }
  return Status::Ok();
}

}  // namespace firedrill::agent
