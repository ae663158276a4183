// SessionManager::VerifyFix: a fix is judged by measurement. The healthy job
// (the baseline's configuration, faults off) and the fixed job (the job as
// the fix left it, faults armed where they still are) run in alternation on
// the same agents, A B A B ..., and the fix is judged on the median of the
// per-pair throughput ratios. Two runs seconds apart on shared cores see the
// same machine, so a busy machine slows both sides of a pair alike, and one
// disturbed pair does not decide.
#include <string>
#include <vector>

#include "common/log.h"
#include "controller/session_manager.h"

namespace firedrill::controller {

Status SessionManager::MeasureRun(Session& s, Lock& lock, const std::string& kind, const v1::JobSpec* job,
                                  bool with_faults, WindowStats* out) {
  const v1::VerifySpec& spec = s.scenario->verify();
  FD_RETURN_IF_ERROR(RunJob(s, lock, kind, spec.warmup_steps() + spec.window_steps(), with_faults, job));
  const v1::JobSpec& j = job ? *job : s.rec.job();
  *out = MeasureWindow(StepsByRank(s), spec.warmup_steps(), spec.window_steps(),
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
    Status a = MeasureRun(s, lock, "healthy", &s.healthy_job, false, &p.healthy);
    if (!a.ok() && !s.end_requested) {
      // The healthy job failing is the machine's problem, not the fix's:
      // on fresh agents, once more.
      AddEvent(s, "verification", -1, "the healthy job did not complete (" + a.message() + "); measuring it again");
      if (Status st = EnsureAgents(s, lock); st.ok()) a = MeasureRun(s, lock, "healthy", &s.healthy_job, false, &p.healthy);
    }
    if (s.end_requested) return failed("the session ended during verification");
    if (!a.ok()) return failed("the healthy comparison run did not complete: " + a.message());
    AddEvent(s, "verification", -1, "pair" + of + ": measuring the fixed job");
    // Every run starts on a full set of agents (one lost in the healthy run
    // is the machine's doing, not the fix's).
    if (Status st = EnsureAgents(s, lock); !st.ok()) return failed("could not restart the job's agents: " + st.message());
    const Status b = MeasureRun(s, lock, "verify", nullptr, true, &p.fixed);
    if (s.end_requested) return failed("the session ended during verification");
    if (!b.ok()) return failed("the fixed job did not complete a verification window: " + b.message());
    pairs.push_back(p);
  }
  return Verify(pairs, spec);
}

}  // namespace firedrill::controller
