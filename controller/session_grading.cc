// Grading. VerifyFix: a fix is judged by measurement. The healthy job
// (the baseline's configuration, faults off) and the fixed job (the job as
// the fix left it, faults armed where they still are) run in alternation on
// the same agents, A B A B ..., and the fix is judged on the median of the
// per-pair throughput ratios. Two runs seconds apart on shared cores see the
// same machine, so a busy machine slows both sides of a pair alike, and one
// disturbed pair does not decide; measuring stops once the remaining pairs
// could not change the verdict (VerdictDecided). ComputeScore / GetScore: the score from
// the record once the session is over; before that, only what was submitted.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/log.h"
#include "controller/scorer.h"
#include "controller/session_manager.h"

namespace firedrill::controller {

Status SessionManager::MeasureRun(Session& s, Lock& lock, RunKind kind, const v1::JobSpec* job,
                                  bool with_faults, WindowStats* out) {
  const v1::VerifySpec& spec = s.scenario->verify();
  FD_RETURN_IF_ERROR(RunJob(s, lock, kind, spec.warmup_steps() + spec.window_steps(), with_faults, job));
  const v1::JobSpec& j = job ? *job : s.rec.job();
  // A job resumed from a checkpoint counts its steps from there: the
  // window is the run's own, after its warm-up.
  const int64_t first = s.run ? std::max<int64_t>(0, s.run->first_step) : 0;
  *out = MeasureWindow(StepsByRank(s), first + spec.warmup_steps(), spec.window_steps(),
                       j.world_size() * j.data().batch_size());
  return Status::Ok();
}

v1::Verification SessionManager::VerifyFix(Session& s, Lock& lock) {
  const v1::VerifySpec& spec = s.scenario->verify();
  const int n = spec.pairs() > 0 ? spec.pairs() : 3;
  std::vector<MeasuredPair> pairs;
  auto failed = [&](const std::string& why) {
    v1::Verification v = Verify(pairs, spec);
    v.set_passed(false);
    v.set_detail(why);
    return v;
  };
  // The job's own checkpoints stay as the drill left them: every run here
  // checkpoints into a scratch directory of its own, so no pair reads what
  // an earlier one wrote, and a resume reads the one checkpoint the fix
  // named ("latest" resolved once, now). Where the drill judges the loss,
  // the healthy side resumes from it too: the same job from the same point
  // without the fault, so a resumed job's loss is held to a healthy job's
  // over the same steps. Elsewhere it runs from step 0 (throughput does not
  // depend on where a job starts, and a checkpoint the faulty job wrote may
  // carry settings, such as its data loader's, that the healthy one refuses).
  // A healthy job that will not resume from it is named as such below.
  auto resume = VerifyResumePoint(s, lock);
  if (!resume.ok()) return failed("could not find the checkpoint to resume from: " + resume.status().message());
  if (s.end_requested) return failed("the session ended during verification");
  const std::string scratch = SessionFilesDir(opts_.state_dir, s.rec.info().session_id(), "verify-checkpoints");
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);  // a verification before a controller restart
  const bool same_start = spec.loss_vs_baseline_max() > 0;
  auto for_run = [&](const v1::JobSpec& base, const std::string& run, bool resume_too) {
    v1::JobSpec j = base;
    j.mutable_checkpoint()->set_dir(scratch + "/" + run);
    j.mutable_checkpoint()->set_resume_from(resume_too ? *resume : "");
    return j;
  };
  for (int i = 0; i < n; ++i) {
    MeasuredPair p;
    const std::string of = " " + std::to_string(i + 1) + "/" + std::to_string(n);
    const v1::JobSpec healthy = for_run(s.healthy_job, "pair-" + std::to_string(i + 1) + "-healthy", same_start);
    const v1::JobSpec fixed = for_run(s.rec.job(), "pair-" + std::to_string(i + 1) + "-fixed", true);
    if (Status st = EnsureAgents(s, lock); !st.ok()) return failed("could not restart the job's agents: " + st.message());
    AddEvent(s, "verification", -1, "pair" + of + ": measuring the healthy job");
    Status a = MeasureRun(s, lock, RunKind::kHealthy, &healthy, false, &p.healthy);
    if (!a.ok() && !s.end_requested) {
      // The healthy job failing is the machine's problem, not the fix's:
      // on fresh agents, once more.
      AddEvent(s, "verification", -1, "the healthy job did not complete (" + a.message() + "); measuring it again");
      if (Status st = EnsureAgents(s, lock); st.ok()) a = MeasureRun(s, lock, RunKind::kHealthy, &healthy, false, &p.healthy);
    }
    if (s.end_requested) return failed("the session ended during verification");
    if (!a.ok() && same_start && !resume->empty())
      return failed("the healthy job could not resume from the fix's checkpoint " + *resume +
                    ", so the loss cannot be compared over the same steps: " + a.message());
    if (!a.ok()) return failed("the healthy comparison run did not complete: " + a.message());
    AddEvent(s, "verification", -1, "pair" + of + ": measuring the fixed job");
    // Every run starts on a full set of agents (one lost in the healthy run
    // is the machine's doing, not the fix's).
    if (Status st = EnsureAgents(s, lock); !st.ok()) return failed("could not restart the job's agents: " + st.message());
    const Status b = MeasureRun(s, lock, RunKind::kVerify, &fixed, true, &p.fixed);
    if (s.end_requested) return failed("the session ended during verification");
    if (!b.ok()) return failed("the fixed job did not complete a verification window: " + b.message());
    pairs.push_back(p);
    if (i + 1 < n && VerdictDecided(pairs, n, spec)) {
      const std::string why = "decided after " + std::to_string(i + 1) + " of " + std::to_string(n) +
                              " pairs: the rest could not change the verdict";
      AddEvent(s, "verification", -1, why);
      v1::Verification v = Verify(pairs, spec);
      v.set_detail(v.detail() + "; " + why);
      return v;
    }
  }
  return Verify(pairs, spec);
}

v1::ScoreReport SessionManager::ComputeScore(Session& s) {
  ScoreInputs in;
  in.scenario = s.scenario;
  in.record = &s.rec;
  auto d = store_->LoadDiagnoses(s.rec.info().session_id());
  if (d.ok()) in.diagnoses = std::move(d).value();
  else spdlog::error("{}", d.status().message());
  // The clock starts when the fault did (a fault armed at step 0 starts
  // with the run).
  const int64_t from = s.rec.fault_onset_unix_ms() > 0 ? s.rec.fault_onset_unix_ms() : s.rec.run_started_unix_ms();
  if (from > 0 && s.rec.fix_applied_unix_ms() > 0) {
    in.elapsed_s = std::max<int64_t>(0, s.rec.fix_applied_unix_ms() - from) / 1000.0;
  }
  return Score(in);
}

StatusOr<v1::ScoreReport> SessionManager::GetScore(const std::string& id) {
  auto stored = store_->LoadScore(id);
  if (!stored.ok()) return stored.status();
  if (stored->has_value()) return **stored;
  auto sp = Find(id);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  v1::SessionRecord rec;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    rec = s.rec;
  }
  auto d = store_->LoadDiagnoses(id);
  if (!d.ok()) return d.status();
  // Sealed: what was submitted, and nothing that says whether it is right.
  return Unscored(rec, *d);
}

}  // namespace firedrill::controller
