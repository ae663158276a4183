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
                                  bool with_faults, WindowStats* out, int64_t steps) {
  const v1::VerifySpec& spec = s.scenario->verify();
  const int64_t run = std::max<int64_t>(steps, spec.warmup_steps() + spec.window_steps());
  FD_RETURN_IF_ERROR(RunJob(s, lock, kind, run, with_faults, job));
  const v1::JobSpec& j = job ? *job : s.rec.job();
  // A job resumed from a checkpoint counts its steps from there: the
  // window is the run's own, after its warm-up.
  const int64_t first = s.run ? std::max<int64_t>(0, s.run->first_step) : 0;
  *out = MeasureWindow(StepsByRank(s), first + spec.warmup_steps(), spec.window_steps(),
                       j.world_size() * j.data().batch_size());
  return Status::Ok();
}

namespace {

// Each rank's digest of its parameters after the last step of the run that
// just ended (StepReport.params_sha256), or why there is none.
StatusOr<std::vector<std::string>> FinalDigests(const std::vector<std::vector<v1::StepReport>>& by_rank) {
  std::vector<std::string> out;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (by_rank[r].empty() || by_rank[r].back().params_sha256().empty())
      return Internal("rank " + std::to_string(r) + " reported no parameter digest for the last step of its run");
    out.push_back(by_rank[r].back().params_sha256());
  }
  return out;
}

// The step a resume from `dir` (".../step-N") starts at; 0 for none.
int64_t ResumeStep(const std::string& dir) {
  const std::string base = std::filesystem::path(dir).filename().string();
  if (base.rfind("step-", 0) != 0) return 0;
  try {
    return std::stoll(base.substr(5));
  } catch (const std::exception&) {
    return 0;
  }
}

std::string RanksWhere(const std::vector<std::string>& digests, const std::string& want, bool equal) {
  std::string out;
  for (size_t r = 0; r < digests.size(); ++r)
    if ((digests[r] == want) == equal) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

}  // namespace

// The fixed job's parameters at the end of its window (`fixed`, by rank)
// against the reference's: the job as the fix left it, faults off, run from
// step 0 to the same step. Sets params_checked/params_match; an error is a
// failure to measure.
Status SessionManager::CompareWithReference(Session& s, Lock& lock, const v1::JobSpec& reference, int64_t end_step,
                                            const std::vector<std::string>& fixed, v1::Verification* out) {
  AddEvent(s, "verification", -1,
           "reference: the job as fixed, without the faults, from step 0 to step " + std::to_string(end_step));
  FD_RETURN_IF_ERROR(EnsureAgents(s, lock));
  FD_RETURN_IF_ERROR(RunJob(s, lock, RunKind::kHealthy, end_step, false, &reference));
  auto ref = FinalDigests(StepsByRank(s));
  if (!ref.ok()) return ref.status();
  // Without faults every replica ends the same; if not, this machine's
  // arithmetic is not reproducible and nothing can be judged bitwise.
  const std::string ref_odd = RanksWhere(*ref, (*ref)[0], false);
  if (!ref_odd.empty())
    return Internal("the reference run's replicas ended different (ranks " + ref_odd +
                    " against rank 0) without any fault: the comparison cannot be made on this machine");
  out->set_params_checked(true);
  const std::string off = RanksWhere(fixed, (*ref)[0], false);
  out->set_params_match(off.empty());
  return Status::Ok();
}

v1::Verification SessionManager::VerifyFix(Session& s, Lock& lock) {
  const v1::VerifySpec& spec = s.scenario->verify();
  const int n = spec.pairs() > 0 ? spec.pairs() : 3;
  std::vector<MeasuredPair> pairs;
  v1::Verification params;  // params_checked / params_match, once measured
  std::string params_detail;
  auto with_params = [&](v1::Verification v) {
    if (!params.params_checked()) return v;
    v.set_params_checked(true);
    v.set_params_match(params.params_match());
    if (!params.params_match()) v.set_passed(false);
    v.set_detail(params_detail + "; " + v.detail());
    return v;
  };
  auto failed = [&](const std::string& why) {
    v1::Verification v = with_params(Verify(pairs, spec));
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
    // Where the parameters are judged, the first fixed run goes on past the
    // step the fault struck at, wherever it resumed: a fix that kept the bad
    // host meets the fault again.
    int64_t fixed_steps = 0;
    if (i == 0 && spec.params_vs_reference()) {
      int64_t last_trigger = 0;
      for (const auto& f : s.rec.faults()) last_trigger = std::max<int64_t>(last_trigger, f.trigger_step());
      fixed_steps = last_trigger + 1 - ResumeStep(*resume);
    }
    const Status b = MeasureRun(s, lock, RunKind::kVerify, &fixed, true, &p.fixed, fixed_steps);
    if (s.end_requested) return failed("the session ended during verification");
    if (!b.ok()) return failed("the fixed job did not complete a verification window: " + b.message());
    pairs.push_back(p);
    if (i == 0 && spec.params_vs_reference()) {
      // Once: the fixed run's end against the same job's without the fault.
      const int64_t end_step = std::max<int64_t>(0, s.run->first_step) + s.run->steps_total;
      auto fixed_digests = FinalDigests(StepsByRank(s));
      if (!fixed_digests.ok()) return failed("could not compare the parameters: " + fixed_digests.status().message());
      const Status c = CompareWithReference(s, lock, for_run(s.rec.job(), "reference", false), end_step,
                                            *fixed_digests, &params);
      if (s.end_requested) return failed("the session ended during verification");
      if (!c.ok()) return failed("could not compare the parameters with a reference run: " + c.message());
      const std::string odd = RanksWhere(*fixed_digests, (*fixed_digests)[0], false);
      params_detail =
          params.params_match()
              ? "parameters at step " + std::to_string(end_step) +
                    ": every rank's bitwise the same as the job's run without the fault from step 0"
              : "parameters at step " + std::to_string(end_step) + ": " +
                    (odd.empty() ? "the replicas agree with each other"
                                 : "rank(s) " + odd + " differ from rank 0") +
                    ", and they are not what the job reaches without the fault from step 0";
      if (!params.params_match()) return with_params(Verify(pairs, spec));
    }
    if (i + 1 < n && VerdictDecided(pairs, n, spec)) {
      const std::string why = "decided after " + std::to_string(i + 1) + " of " + std::to_string(n) +
                              " pairs: the rest could not change the verdict";
      AddEvent(s, "verification", -1, why);
      v1::Verification v = Verify(pairs, spec);
      v.set_detail(v.detail() + "; " + why);
      return with_params(v);
    }
  }
  return with_params(Verify(pairs, spec));
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
