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

#include "common/subprocess.h"
#include "controller/session_manager.h"

namespace firedrill::controller {

namespace {

// The job's progress: the newest step any rank reported, plus one.
int64_t StepsDone(const std::vector<std::vector<v1::StepReport>>& by_rank) {
  int64_t newest = -1;
  for (const auto& steps : by_rank)
    if (!steps.empty()) newest = std::max(newest, steps.back().step());
  return newest + 1;
}

}  // namespace

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
    out.set_steps_done(StepsDone(StepsByRank(s)));
  }
  if (out.dir().empty()) return FailedPrecondition("this job has no checkpoint directory");
  // Hashing every shard can take a while; the session's lock is not held.
  auto r = RunCommand({opts_.ckpt_bin, "list", out.dir(), "--json"});
  if (!r.ok()) return Internal("cannot run firedrill-ckpt (" + opts_.ckpt_bin + "): " + r.status().message());
  if (r->exit_code != 0)
    return Internal(opts_.ckpt_bin + " list " + out.dir() + " exited " + std::to_string(r->exit_code) +
                    (r->output.empty() ? " and said nothing" : ": " + r->output));
  const nlohmann::json list = nlohmann::json::parse(r->output, nullptr, /*allow_exceptions=*/false);
  if (!list.is_array()) return Internal("firedrill-ckpt list printed no JSON list: " + r->output.substr(0, 300));
  for (const auto& c : list) {
    v1::CheckpointEntry* e = out.add_checkpoints();
    e->set_step(c.value("step", int64_t{0}));
    e->set_valid(c.value("valid", false));
    e->set_reason(c.value("reason", ""));
    e->set_world_size(c.value("world_size", 0));
    e->set_shards(c.value("shards", 0));
    e->set_bytes(c.value("bytes", int64_t{0}));
    e->set_created_unix_ms(c.value("created_unix_ms", int64_t{0}));
    e->set_steps_lost(std::max<int64_t>(0, out.steps_done() - e->step()));
  }
  return out;
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
    out.set_dir(s.rec.job().checkpoint().dir() + "/step-" + std::to_string(req.step()));
  }
  if (req.step() < 0) return InvalidArgument("a checkpoint's step is >= 0, got " + std::to_string(req.step()));
  std::error_code ec;
  if (!std::filesystem::is_directory(out.dir(), ec))
    return NotFound("there is no checkpoint of step " + std::to_string(req.step()) + " (" + out.dir() +
                    "); `firedrill ckpt list` shows those there are");
  auto r = RunCommand({opts_.ckpt_bin, "verify", out.dir()});
  if (!r.ok()) return Internal("cannot run firedrill-ckpt (" + opts_.ckpt_bin + "): " + r.status().message());
  // 0: valid, 1: it says why not; anything else is the tool's failure, not
  // the checkpoint's.
  if (r->exit_code != 0 && r->exit_code != 1)
    return Internal(opts_.ckpt_bin + " verify exited " + std::to_string(r->exit_code) +
                    (r->output.empty() ? " and said nothing" : ": " + r->output));
  out.set_valid(r->exit_code == 0);
  out.set_detail(r->output);
  return out;
}

}  // namespace firedrill::controller
