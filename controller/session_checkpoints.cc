// SessionManager's checkpoint views: `firedrill ckpt list|verify`. The
// job's checkpoints live in its checkpoint.dir (shared storage: every rank
// writes its shard there, rank 0 the manifest last). The controller reads
// them with firedrill-ckpt, the same verification a resume runs (manifest,
// one shard per rank, each file's size and SHA-256), so it never links
// LibTorch and never trusts a listing it did not verify.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <type_traits>
#include <vector>

#include "common/subprocess.h"
#include "controller/session_manager.h"

namespace firedrill::controller {

namespace {

// A field of firedrill-ckpt's JSON, or `fallback` when it is missing or of
// another type (json::value would throw).
template <typename T>
T Field(const nlohmann::json& c, const char* key, T fallback) {
  const auto it = c.find(key);
  if (it == c.end()) return fallback;
  if constexpr (std::is_same_v<T, bool>) {
    return it->is_boolean() ? it->get<bool>() : fallback;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->get<std::string>() : fallback;
  } else {
    return it->is_number_integer() ? it->get<T>() : fallback;
  }
}

}  // namespace

std::string CheckpointStepDir(const std::string& dir, int64_t step) { return dir + "/step-" + std::to_string(step); }

std::string SessionFilesDir(const std::string& state_dir, const std::string& session_id, const std::string& what) {
  std::error_code ec;
  std::filesystem::path root = std::filesystem::absolute(state_dir, ec);
  if (ec) root = state_dir;
  return (root / "sessions" / session_id / what).lexically_normal().string();
}

StatusOr<v1::ListCheckpointsResponse> SessionManager::ListCheckpoints(const v1::ListCheckpointsRequest& req) {
  auto sp = Find(req.session_id());
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  v1::ListCheckpointsResponse out;
  out.set_session_id(req.session_id());
  {
    std::lock_guard<std::mutex> lock(s.mu);
    FD_RETURN_IF_ERROR(ToolOffered(s, "checkpoints"));
    out.set_dir(s.rec.job().checkpoint().dir());
    // The job's progress: the newest step its run reached (before any
    // restart that has not stepped yet), plus one.
    out.set_steps_done(s.main_newest_step + 1);
  }
  if (out.dir().empty()) return FailedPrecondition("this job has no checkpoint directory");
  auto list = CheckpointsIn(out.dir());
  if (!list.ok()) return list.status();
  for (auto& e : *list) {
    e.set_steps_lost(std::max<int64_t>(0, out.steps_done() - e.step()));
    *out.add_checkpoints() = std::move(e);
  }
  return out;
}

StatusOr<std::vector<v1::CheckpointEntry>> SessionManager::CheckpointsIn(const std::string& dir) const {
  std::vector<v1::CheckpointEntry> out;
  // A job that has not written its first checkpoint yet has none to list.
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return out;
  auto r = RunCommand({opts_.ckpt_bin, "list", dir, "--json"});
  if (!r.ok()) return Internal("cannot run firedrill-ckpt (" + opts_.ckpt_bin + "): " + r.status().message());
  if (r->exit_code != 0)
    return Internal(opts_.ckpt_bin + " list " + dir + " exited " + std::to_string(r->exit_code) +
                    (r->output.empty() ? " and said nothing" : ": " + r->output));
  const nlohmann::json list = nlohmann::json::parse(r->output, nullptr, /*allow_exceptions=*/false);
  if (!list.is_array()) return Internal("firedrill-ckpt list printed no JSON list: " + r->output.substr(0, 300));
  for (const auto& c : list) {
    if (!c.is_object()) return Internal("firedrill-ckpt list printed a list entry that is not an object: " + c.dump());
    v1::CheckpointEntry& e = out.emplace_back();
    e.set_step(Field(c, "step", int64_t{0}));
    e.set_valid(Field(c, "valid", false));
    e.set_manifest(Field(c, "manifest", false));
    e.set_reason(Field(c, "reason", std::string()));
    e.set_world_size(Field(c, "world_size", 0));
    e.set_shards(Field(c, "shards", 0));
    e.set_bytes(Field(c, "bytes", int64_t{0}));
    e.set_created_unix_ms(Field(c, "created_unix_ms", int64_t{0}));
    e.set_dir(Field(c, "dir", CheckpointStepDir(dir, e.step())));
  }
  return out;
}

StatusOr<int64_t> SessionManager::NewestValidStep(const std::string& dir) const {
  auto list = CheckpointsIn(dir);
  if (!list.ok()) return list.status();
  for (const auto& e : *list)  // newest first
    if (e.valid()) return e.step();
  return int64_t{-1};
}

bool ScoresLostWork(const v1::Scenario& sc) {
  for (const auto& rem : sc.remediations())
    if (rem.newest_valid_checkpoint()) return true;
  return false;
}

StatusOr<std::string> SessionManager::VerifyResumePoint(Session& s, Lock& lock) {
  const v1::CheckpointSpec ck = s.rec.job().checkpoint();
  if (ck.resume_from() != "latest") return ck.resume_from();
  lock.unlock();
  auto list = CheckpointsIn(ck.dir());
  lock.lock();
  if (!list.ok()) return list.status();
  // As the trainer resolves it (agent/checkpoint.h LatestCheckpoint): the
  // newest step with a manifest, whether or not its shards verify.
  for (const auto& e : *list)  // newest first
    if (e.manifest()) return e.dir();
  return std::string();
}

StatusOr<v1::VerifyCheckpointResponse> SessionManager::VerifyCheckpoint(const v1::VerifyCheckpointRequest& req) {
  auto sp = Find(req.session_id());
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  v1::VerifyCheckpointResponse out;
  out.set_step(req.step());
  {
    std::lock_guard<std::mutex> lock(s.mu);
    FD_RETURN_IF_ERROR(ToolOffered(s, "checkpoints"));
    if (s.rec.job().checkpoint().dir().empty()) return FailedPrecondition("this job has no checkpoint directory");
    if (req.step() < 0) return InvalidArgument("a checkpoint's step is >= 0, got " + std::to_string(req.step()));
    out.set_dir(CheckpointStepDir(s.rec.job().checkpoint().dir(), req.step()));
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(out.dir(), ec))
    return NotFound("there is no checkpoint of step " + std::to_string(req.step()) + " (" + out.dir() +
                    "); `firedrill ckpt list` shows those there are");
  auto r = RunCommand({opts_.ckpt_bin, "verify", out.dir(), "--json"});
  if (!r.ok()) return Internal("cannot run firedrill-ckpt (" + opts_.ckpt_bin + "): " + r.status().message());
  // 0: valid, 1: it says why not; anything else is the tool's failure, not
  // the checkpoint's.
  if (r->exit_code != 0 && r->exit_code != 1)
    return Internal(opts_.ckpt_bin + " verify exited " + std::to_string(r->exit_code) +
                    (r->output.empty() ? " and said nothing" : ": " + r->output));
  // Its JSON object (a library's warning on stderr may come first).
  const size_t brace = r->output.find('{');
  const auto j = brace == std::string::npos ? nlohmann::json() : nlohmann::json::parse(r->output.substr(brace), nullptr, false);
  if (!j.is_object() || !j.contains("detail"))
    return Internal(opts_.ckpt_bin + " verify printed no JSON object: " + r->output.substr(0, 300));
  // Valid as a resume would find it, even where its replicas could not be
  // compared (the detail says why).
  out.set_valid(Field(j, "valid", false));
  out.set_detail(Field(j, "detail", std::string()));
  // Each model tensor as every rank's shard holds it.
  const auto reps = j.find("replicas");
  if (reps != j.end() && reps->is_array()) {
    for (const auto& t : *reps) {
      if (!t.is_object()) continue;
      v1::ParamChecksums* p = out.add_replicas();
      p->set_name(Field(t, "name", std::string()));
      p->set_numel(Field<int64_t>(t, "numel", 0));
      std::vector<std::string> distinct;
      const auto hs = t.find("sha256");
      if (hs != t.end() && hs->is_array())
        for (const auto& h : *hs) {
          const std::string hex = h.is_string() ? h.get<std::string>() : "";
          p->add_sha256(hex);
          if (std::find(distinct.begin(), distinct.end(), hex) == distinct.end()) distinct.push_back(hex);
        }
      p->set_distinct(static_cast<int32_t>(distinct.size()));
    }
  }
  return out;
}

}  // namespace firedrill::controller
