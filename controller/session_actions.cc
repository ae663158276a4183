// SessionManager's learner actions (diagnose, fix, hint) and grading. The
// rules: nothing here says whether a diagnosis or a fix is right before the
// session is scored; a diagnosis may be revised until the fix (each revision
// after the first is priced); the one fix ends the attempt; a fix may change
// operational settings, and workload settings only where the drill allows.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include "common/clock.h"
#include "common/log.h"
#include "common/suggest.h"
#include "scenario/job_keys.h"
#include "scenario/loader.h"
#include "controller/scorer.h"
#include "common/restore_parts.h"
#include "controller/session_manager.h"
#include "faults/registry.h"

namespace firedrill::controller {

namespace {

// Why a fix that changes what is trained is refused: the same words for
// every workload setting a drill does not open. `what` ends in "is".
std::string WorkloadRefusal(const std::string& what, const std::string& scenario_id) {
  return what +
         " a workload setting (what is being trained: model, data, batch, world size, precision, "
         "optimiser): the job's owners do not allow changing it here, and the fix would be measured against "
         "a "
         "different job. Operational settings (loader, buckets, sampler, timeouts, interfaces, checkpoint "
         "cadence, "
         "hosts) may change; `firedrill scenarios show " +
         scenario_id + "` lists what else may";
}

std::string RankRange(int world) { return "0.." + std::to_string(world - 1); }

// Whether the learner may act on the session now (`what`: "diagnose",
// "fix", "take a hint"): only while its faulty job runs, before the fix and
// before it ends.
Status CanAct(const std::string& id, SessionState state, bool fix_pending, bool ending,
              const std::string& end_reason, const std::string& what) {
  if (state == SessionState::kCreated || state == SessionState::kBaseline)
    return FailedPrecondition("session " + id + " is still measuring its healthy baseline; " + what +
                              " once it is running");
  if (state == SessionState::kFixing || state == SessionState::kVerifying ||
      (state == SessionState::kRunning && fix_pending))
    return FailedPrecondition("session " + id + " has its fix; it is being verified (`firedrill status`), and "
                              "the diagnosis in force when the fix was applied is the one scored");
  if (state != SessionState::kRunning)
    return FailedPrecondition("session " + id + " has already ended (" + Name(state) +
                              "); start a new session to try again");
  if (ending) return FailedPrecondition("session " + id + " is ending (" + end_reason + ")");
  return Status::Ok();
}

// True if the absolute `path` is `dir` or inside it, after resolving ".."
// lexically.
bool InsideDir(const std::string& path, const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::path(path).is_absolute()) return false;
  const auto rel = fs::path(path).lexically_normal().lexically_relative(fs::path(dir).lexically_normal());
  return !rel.empty() && *rel.begin() != "..";
}

Status CheckFinding(const v1::Finding& f, int world, const std::string& where) {
  if (!faults::IsKnownCause(f.cause())) {
    return InvalidArgument(where + "unknown cause '" + f.cause() + "'" + DidYouMean(f.cause(), faults::KnownCauses()) +
                           " (`firedrill diagnose --help` and the ListCauses call list them)");
  }
  std::set<int> seen;
  for (int r : f.culprit_ranks()) {
    if (r < 0 || r >= world)
      return OutOfRange(where + "rank " + std::to_string(r) + " is outside this job's ranks " + RankRange(world));
    if (!seen.insert(r).second) return InvalidArgument(where + "rank " + std::to_string(r) + " is named twice");
  }
  if (f.cause() == "no-fault" && f.culprit_ranks_size() > 0)
    return InvalidArgument(where + "'no-fault' names no culprit ranks");
  return Status::Ok();
}

}  // namespace

Status SessionManager::ToolOffered(const Session& s, const std::string& tool) const {
  if (s.scenario == nullptr) return Status::Ok();
  const v1::LearnerTools& t = s.scenario->tools();
  bool on = true;
  if (tool == "probes") on = !t.has_probes() || t.probes();
  if (tool == "trace") on = !t.has_trace() || t.trace();
  if (tool == "flight_recorder") on = !t.has_flight_recorder() || t.flight_recorder();
  if (tool == "logs") on = !t.has_logs() || t.logs();
  if (tool == "node") on = !t.has_node() || t.node();
  if (tool == "metrics") on = !t.has_metrics() || t.metrics();
  if (tool == "checkpoints") on = !t.has_checkpoints() || t.checkpoints();
  if (on) return Status::Ok();
  return FailedPrecondition("this drill does not offer " + tool +
                            " (`firedrill scenarios show " + s.scenario->id() + "` lists its tools)");
}

StatusOr<v1::SubmitDiagnosisResponse> SessionManager::Diagnose(const v1::SubmitDiagnosisRequest& req) {
  auto sp = Find(req.session_id());
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  std::lock_guard<std::mutex> lock(s.mu);
  FD_RETURN_IF_ERROR(
      CanAct(req.session_id(), s.state, s.fix_pending, s.end_requested, s.end_reason, "diagnose"));
  if (!req.cause().empty() && req.findings_size() > 0)
    return InvalidArgument("give either one cause (cause, culprit_ranks) or several findings, not both");
  const std::vector<v1::Finding> findings = FindingsOf(req);
  if (findings.empty())
    return InvalidArgument("a diagnosis names a cause: --cause CAUSE (repeat --cause for several faults at once)");
  const int world = s.rec.info().world_size();
  std::set<std::string> causes;
  for (size_t i = 0; i < findings.size(); ++i) {
    const std::string where = findings.size() > 1 ? "finding " + std::to_string(i + 1) + ": " : "";
    FD_RETURN_IF_ERROR(CheckFinding(findings[i], world, where));
    if (!causes.insert(findings[i].cause()).second)
      return InvalidArgument("cause '" + findings[i].cause() + "' is named twice; give each cause once, with all its ranks");
  }
  if (causes.count("no-fault") && findings.size() > 1)
    return InvalidArgument("'no-fault' says nothing is wrong: it cannot be named beside a fault");
  auto number = store_->AddDiagnosis(req.session_id(), findings, req.note(), UnixNowMs());
  if (!number.ok()) return number.status();
  std::string what;
  for (const auto& f : findings) {
    std::string ranks;
    for (int r : f.culprit_ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    what += (what.empty() ? "" : " + ") + f.cause() + (ranks.empty() ? "" : " on rank " + ranks);
  }
  AddEvent(s, "diagnosis", -1, "diagnosis #" + std::to_string(*number) + ": " + what);
  v1::SubmitDiagnosisResponse resp;
  resp.set_diagnosis_id(*number);
  for (const auto& c : faults::KnownCauses()) resp.add_known_causes(c);
  resp.set_revisions(*number - 1);
  resp.set_revision_cost(RevisionCost(s.scenario->rubric()));
  return resp;
}

StatusOr<v1::ApplyFixResponse> SessionManager::Fix(const v1::ApplyFixRequest& asked) {
  auto sp = Find(asked.session_id());
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  // Not while a probe runs: `probe resume` trains beside the job, and its
  // load must not meet verification's measurements (nor a sweep the job's).
  // Held to the end, so none starts meanwhile; then fix_pending refuses one.
  std::unique_lock<std::mutex> no_probe(s.probe_mu, std::try_to_lock);
  if (!no_probe.owns_lock())
    return FailedPrecondition("a probe is running on session " + asked.session_id() +
                              "; apply the fix when it has finished");
  v1::ApplyFixRequest req = asked;  // its checkpoint path made canonical below
  // Where the drill scores lost work (Remediation.newest_valid_checkpoint):
  // the newest checkpoint that verifies as the fix lands (the job may still
  // write more while the fix is applied), or the newest the job had when
  // it first failed if that was newer. Hashing every shard takes a moment:
  // outside the lock.
  std::optional<int64_t> newest_valid;
  {
    std::string dir;
    bool wanted = false;
    {
      std::lock_guard<std::mutex> g(s.mu);
      FD_RETURN_IF_ERROR(CanAct(req.session_id(), s.state, s.fix_pending, s.end_requested, s.end_reason, "fix it"));
      wanted = ScoresLostWork(*s.scenario);
      dir = s.rec.job().checkpoint().dir();
      if (s.newest_valid_seen >= 0) newest_valid = s.newest_valid_seen;
    }
    if (wanted && !dir.empty()) {
      auto now = NewestValidStep(dir);
      if (!now.ok()) return now.status();
      if (*now >= 0) newest_valid = std::max(newest_valid.value_or(*now), *now);
    }
  }
  std::unique_lock<std::mutex> lock(s.mu);
  FD_RETURN_IF_ERROR(
      CanAct(req.session_id(), s.state, s.fix_pending, s.end_requested, s.end_reason, "fix it"));
  const bool empty = req.replace_host_ranks().empty() && req.settings().empty();
  if (empty && !req.no_change()) {
    return InvalidArgument(
        "a fix must change something (--set KEY=VALUE, --replace-host RANK); if nothing needs changing, say so "
        "with --no-change. A session has one fix: it ends the attempt (the job is re-run, measured and scored)");
  }
  if (!empty && req.no_change())
    return InvalidArgument("--no-change says nothing needs changing: it cannot come with --set or --replace-host");
  const int world = s.rec.info().world_size();
  std::set<int> hosts;
  for (int r : req.replace_host_ranks()) {
    if (r < 0 || r >= world) {
      return OutOfRange("--replace-host " + std::to_string(r) + ": rank outside this job's ranks " + RankRange(world));
    }
    if (!hosts.insert(r).second) return InvalidArgument("--replace-host " + std::to_string(r) + " is given twice");
  }
  const std::vector<std::string> may(s.scenario->may_change().begin(), s.scenario->may_change().end());
  v1::JobSpec trial = s.rec.job();
  std::set<std::string> keys;
  for (const auto& kv : req.settings()) {
    if (!keys.insert(kv.key()).second) return InvalidArgument("--set " + kv.key() + " is given twice");
    if (Status st = scenario::ApplyJobSetting(&trial, kv.key(), kv.value()); !st.ok()) return st;
    const scenario::JobKeyClass cls = scenario::ClassOfJobKey(kv.key());
    // A resume reads the session's own checkpoints, nothing else on the
    // controller's machine.
    if (kv.key() == "checkpoint.resume_from" && !kv.value().empty() && kv.value() != "latest" &&
        !InsideDir(kv.value(), s.rec.job().checkpoint().dir())) {
      return InvalidArgument("checkpoint.resume_from takes 'latest' or a step directory under the job's checkpoint "
                             "directory (e.g. " + s.rec.job().checkpoint().dir() + "/step-200)");
    }
    // A typo must not spend the session's one fix on a run that cannot start.
    if (kv.key() == "checkpoint.resume_from" && !kv.value().empty() && kv.value() != "latest") {
      std::error_code ec;
      if (!std::filesystem::is_directory(kv.value(), ec))
        return NotFound("there is no checkpoint at " + kv.value() + "; `firedrill ckpt list` shows those there are");
    }
    // One spelling per checkpoint, links resolved: <checkpoint.dir>/step-N,
    // as the score reads the step it resumes from.
    if (kv.key() == "checkpoint.resume_from" && !kv.value().empty() && kv.value() != "latest") {
      namespace fs = std::filesystem;
      std::error_code ec1, ec2;
      const fs::path got = fs::weakly_canonical(kv.value(), ec1);
      const fs::path root = fs::weakly_canonical(s.rec.job().checkpoint().dir(), ec2);
      if (ec1 || ec2 || got.parent_path() != root || CheckpointStepOf(got.string()) < 0)
        return InvalidArgument("checkpoint.resume_from takes 'latest' or a step directory of the job's own, " +
                               s.rec.job().checkpoint().dir() + "/step-N (`firedrill ckpt list` shows them), got " +
                               kv.value());
    }
    if (cls == scenario::JobKeyClass::kEnvironment) {
      return InvalidArgument(kv.key() + " describes the machine, not the job (storage, device): no fix changes it");
    }
    // The same answer for every workload key this drill does not open, so
    // a refusal says nothing about the fault.
    if (cls == scenario::JobKeyClass::kWorkload && !scenario::KeyAllowed(kv.key(), may))
      return FailedPrecondition(WorkloadRefusal(kv.key() + " is", s.scenario->id()));
  }
  // The global batch is what is trained, however the ranks split it
  // (data-parallel replicas x micro-batch x micro-batches): a layout that
  // changes the replicas changes it as surely as the batch does. The same
  // answer as for a workload key where the drill does not open the batch;
  // where its owners chose the batch as deployed, that is the brief's.
  const int64_t deployed_batch = JobSamplesPerStep(s.rec.job()), fixed_batch = JobSamplesPerStep(trial);
  if (fixed_batch != deployed_batch) {
    if (!scenario::KeyAllowed("data.batch_size", may) && !scenario::KeyAllowed("grad_accum_steps", may))
      return FailedPrecondition(WorkloadRefusal("the global batch (" + std::to_string(fixed_batch) +
                                                    " samples per optimiser step with "
                                                    "this fix, " +
                                                    std::to_string(deployed_batch) + " as deployed) is",
                                                s.scenario->id()));
    if (s.scenario->keep_global_batch())
      return FailedPrecondition(
          "this fix trains a global batch of " + std::to_string(fixed_batch) +
          " samples per optimiser step "
          "(data-parallel replicas x data.batch_size x grad_accum_steps); the job's owners chose the " +
          std::to_string(deployed_batch) + " it has as deployed, and a fix keeps it (the briefing says so)");
  }
  for (auto& kv : *req.mutable_settings()) {
    if (kv.key() == "checkpoint.resume_from" && !kv.value().empty() && kv.value() != "latest")
      kv.set_value(std::filesystem::weakly_canonical(kv.value()).string());
    // One spelling per set of parts ("model,optim,rng,data" is "all"), as
    // the remediations name it.
    if (kv.key() == "checkpoint.restore")
      if (auto parts = ParseRestoreParts(kv.value()); parts.ok()) kv.set_value(parts->ToString());
  }
  auto number = store_->AddFix(req, UnixNowMs());
  if (!number.ok()) return number.status();
  auto diagnoses = store_->LoadDiagnoses(req.session_id());
  if (!diagnoses.ok()) return diagnoses.status();
  s.rec.set_fix_applied_unix_ms(UnixNowMs());
  s.rec.set_fix_applied(true);
  *s.rec.mutable_fix() = req;
  if (newest_valid) s.rec.set_newest_valid_checkpoint_at_fix(*newest_valid);
  s.rec.set_fix_matches(MatchesRemediation(*s.scenario, s.rec, req));
  s.rec.set_diagnosis_at_fix(diagnoses->empty() ? 0 : diagnoses->back().number());
  s.rec.set_diagnoses_at_fix(static_cast<int>(diagnoses->size()));
  s.fix_pending = true;
  std::string what;
  for (int r : req.replace_host_ranks()) what += " replace-host " + std::to_string(r);
  for (const auto& kv : req.settings()) what += " set " + kv.key() + "=" + kv.value();
  if (req.no_change()) what = " no change";
  AddEvent(s, "fix", -1, "fix applied:" + what);
  Save(s);
  lock.unlock();
  s.cv.notify_all();
  v1::ApplyFixResponse resp;
  resp.set_fix_id(*number);
  resp.set_state(Name(SessionState::kFixing));
  return resp;
}

Status SessionManager::SetExamHints(const std::string& id, bool allowed, int cost) {
  auto sp = Find(id);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  std::lock_guard<std::mutex> lock(s.mu);
  s.rec.set_hints_off(!allowed);
  s.rec.set_hint_cost(std::max(0, cost));
  Save(s);
  return Status::Ok();
}

StatusOr<v1::RequestHintResponse> SessionManager::Hint(const std::string& id) {
  auto sp = Find(id);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  std::lock_guard<std::mutex> lock(s.mu);
  FD_RETURN_IF_ERROR(CanAct(id, s.state, s.fix_pending, s.end_requested, s.end_reason, "ask for hints"));
  if (s.rec.hints_off()) return FailedPrecondition("hints are off in this exam");
  const auto& hints = s.scenario->hints();
  if (s.rec.hints_used() >= hints.size()) {
    return FailedPrecondition("no more hints: all " + std::to_string(hints.size()) + " have been used");
  }
  v1::RequestHintResponse resp;
  resp.set_hint(hints.Get(s.rec.hints_used()));
  s.rec.set_hints_used(s.rec.hints_used() + 1);
  resp.set_hints_used(s.rec.hints_used());
  resp.set_hints_total(hints.size());
  resp.set_cost(HintCost(s.rec, s.scenario->rubric()));
  AddEvent(s, "hint", -1, "hint " + std::to_string(s.rec.hints_used()) + " taken");
  Save(s);
  return resp;
}

}  // namespace firedrill::controller
