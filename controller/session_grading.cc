// Grading. VerifyFix: a fix is judged by measurement. The healthy job
// (the baseline's configuration, faults off) and the fixed job (the job as
// the fix left it, faults armed where they still are) run in alternation on
// the same agents, A B A B ..., and the fix is judged on the median of the
// per-pair throughput ratios. Two runs seconds apart on shared cores see the
// same machine, so a busy machine slows both sides of a pair alike, and one
// disturbed pair does not decide. ComputeScore / GetScore: the score from
// the record once the session is over; before that, only what was submitted.
#include <algorithm>
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
  const auto by_rank = StepsByRank(s);
  int64_t first = INT64_MAX;
  for (const auto& steps : by_rank)
    if (!steps.empty()) first = std::min(first, steps.front().step());
  if (first == INT64_MAX) first = 0;
  *out = MeasureWindow(by_rank, first + spec.warmup_steps(), spec.window_steps(),
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
  for (int i = 0; i < n; ++i) {
    MeasuredPair p;
    const std::string of = " " + std::to_string(i + 1) + "/" + std::to_string(n);
    if (Status st = EnsureAgents(s, lock); !st.ok()) return failed("could not restart the job's agents: " + st.message());
    AddEvent(s, "verification", -1, "pair" + of + ": measuring the healthy job");
    Status a = MeasureRun(s, lock, RunKind::kHealthy, &s.healthy_job, false, &p.healthy);
    if (!a.ok() && !s.end_requested) {
      // The healthy job failing is the machine's problem, not the fix's:
      // on fresh agents, once more.
      AddEvent(s, "verification", -1, "the healthy job did not complete (" + a.message() + "); measuring it again");
      if (Status st = EnsureAgents(s, lock); st.ok()) a = MeasureRun(s, lock, RunKind::kHealthy, &s.healthy_job, false, &p.healthy);
    }
    if (s.end_requested) return failed("the session ended during verification");
    if (!a.ok()) return failed("the healthy comparison run did not complete: " + a.message());
    AddEvent(s, "verification", -1, "pair" + of + ": measuring the fixed job");
    // Every run starts on a full set of agents (one lost in the healthy run
    // is the machine's doing, not the fix's).
    if (Status st = EnsureAgents(s, lock); !st.ok()) return failed("could not restart the job's agents: " + st.message());
    const Status b = MeasureRun(s, lock, RunKind::kVerify, nullptr, true, &p.fixed);
    if (s.end_requested) return failed("the session ended during verification");
    if (!b.ok()) return failed("the fixed job did not complete a verification window: " + b.message());
    pairs.push_back(p);
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
