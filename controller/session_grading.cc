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
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/stats.h"
#include "controller/scorer.h"
#include "controller/session_manager.h"
#include "parallel/mesh.h"

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
                       static_cast<int>(JobSamplesPerStep(j)));
  return Status::Ok();
}

namespace {

// Each rank's digest of its parameters after the last step of the run that
// just ended (StepReport.params_sha256), or why there is none.
StatusOr<std::vector<std::string>> FinalDigests(const std::vector<std::vector<v1::StepReport>>& by_rank,
                                                int64_t end_step) {
  std::vector<std::string> out;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (by_rank[r].empty() || by_rank[r].back().params_sha256().empty())
      return Internal("rank " + std::to_string(r) + " reported no parameter digest for the last step of its run");
    if (by_rank[r].back().step() + 1 != end_step)
      return Internal("rank " + std::to_string(r) + "'s run ended after step " +
                      std::to_string(by_rank[r].back().step() + 1) + ", not " + std::to_string(end_step));
    out.push_back(by_rank[r].back().params_sha256());
  }
  return out;
}

// The step a resume from `dir` (".../step-N") starts at; 0 for none.
int64_t ResumeStep(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string base = std::filesystem::path(dir).filename().string();
  if (base.rfind("step-", 0) != 0) return 0;
  try {
    return std::stoll(base.substr(5));
  } catch (const std::exception&) {
    return 0;
  }
}

// The ranks that do not hold the digest most ranks hold; "" if all agree.
// The ranks whose digest is not their replicas' majority. The replicas of
// a parameter are the ranks that hold the same part of the model: all of
// them in a data-parallel job, a data-parallel group in a model-parallel
// one (whose tensor- and pipeline-parallel shards differ by design).
std::string MinorityRanks(const std::vector<std::string>& digests, const v1::JobSpec& job) {
  std::vector<std::vector<int>> groups;
  auto mesh = parallel::Mesh::Create(static_cast<int>(digests.size()), std::max(1, job.parallel().tp()),
                                     std::max(1, job.parallel().pp()), job.parallel().order());
  if (mesh.ok()) {
    groups = mesh->Groups(parallel::Dim::kDp);
  } else {
    groups.emplace_back();
    for (size_t r = 0; r < digests.size(); ++r) groups.back().push_back(static_cast<int>(r));
  }
  std::vector<int> odd;
  for (const auto& g : groups) {
    std::map<std::string, int> votes;
    for (int r : g) ++votes[digests[r]];
    std::string most;
    int most_n = 0;
    for (const auto& [d, n] : votes)
      if (n > most_n) most = d, most_n = n;
    for (int r : g)
      if (digests[r] != most) odd.push_back(r);
  }
  std::sort(odd.begin(), odd.end());
  std::string out;
  for (int r : odd) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

}  // namespace

// The fixed job's parameters at the end of its window (`fixed`, by rank)
// against the reference's: the job as the fix left it, faults off, run
// `steps` steps to `end_step` from a point the faults had not reached. Sets
// params_checked/params_match; an error is a failure to measure.
Status SessionManager::CompareWithReference(Session& s, Lock& lock, const v1::JobSpec& reference, int64_t steps,
                                            int64_t end_step, const std::vector<std::string>& fixed,
                                            v1::Verification* out) {
  AddEvent(s, "verification", -1,
           "reference: the job as fixed, without the faults, " +
               (reference.checkpoint().resume_from().empty() ? std::string("from step 0")
                                                             : "from " + reference.checkpoint().resume_from()) +
               " to step " + std::to_string(end_step));
  FD_RETURN_IF_ERROR(EnsureAgents(s, lock));
  FD_RETURN_IF_ERROR(RunJob(s, lock, RunKind::kHealthy, steps, false, &reference));
  auto ref = FinalDigests(StepsByRank(s), end_step);
  if (!ref.ok()) return ref.status();
  // Without faults every replica ends the same; if not, this machine's
  // arithmetic is not reproducible and nothing can be judged bitwise.
  const std::string ref_odd = MinorityRanks(*ref, reference);
  if (!ref_odd.empty())
    return Internal("the reference run's replicas ended different (rank(s) " + ref_odd +
                    ") without any fault: the comparison cannot be made on this machine");
  out->set_params_checked(true);
  // Rank by rank: each holds its own part of the model (the same part in
  // every rank of a data-parallel job).
  bool match = fixed.size() == ref->size();
  for (size_t r = 0; match && r < fixed.size(); ++r) match = fixed[r] == (*ref)[r];
  out->set_params_match(match);
  return Status::Ok();
}

// Where the reference run starts: the fix's own checkpoint if it was written
// before the earliest fault's trigger step, else the newest valid checkpoint
// of the job that was (else step 0, ""). A checkpoint of step N holds steps
// 0..N-1, untouched by a fault that acts from step N on.
StatusOr<std::string> SessionManager::CleanStart(Session& s, Lock& lock, const std::string& resume) {
  int64_t first_trigger = std::numeric_limits<int64_t>::max();
  for (const auto& f : s.rec.faults()) first_trigger = std::min<int64_t>(first_trigger, f.trigger_step());
  if (resume.empty() || ResumeStep(resume) <= first_trigger) return resume;
  const std::string dir = s.rec.job().checkpoint().dir();
  lock.unlock();
  auto list = CheckpointsIn(dir);
  lock.lock();
  if (!list.ok()) return list.status();
  for (const auto& e : *list)  // newest first
    if (e.valid() && e.step() <= first_trigger) return e.dir();
  return std::string();
}

// Steps of the run that measures a checkpoint write (cadence drills): six
// writes on every rank.
constexpr int kWriteCostSteps = 12;

v1::Verification SessionManager::VerifyFix(Session& s, Lock& lock) {
  const v1::VerifySpec& spec = s.scenario->verify();
  const int n = spec.pairs() > 0 ? spec.pairs() : 3;
  std::vector<MeasuredPair> pairs;
  v1::Verification params;  // params_checked / params_match, once measured
  std::string params_detail;
  // Checkpoint-cadence drills: the fixed cadence's expected goodput, its
  // writes as long as they measure here (below), its steps as the fixed
  // windows.
  std::map<int, std::vector<double>> writes;  // by rank
  auto with_cadence = [&](v1::Verification v) {
    if (spec.mtbf_s() <= 0 || pairs.empty()) return v;
    CadenceInputs in;
    in.every = s.rec.job().checkpoint().every();
    std::vector<double> steps;
    for (const auto& p : pairs) steps.push_back(p.fixed.median_step_ms);
    in.step_ms = Median(steps);
    // The job waits for its slowest writer (rank 0 writes the manifest too):
    // the longest of the ranks' median writes.
    for (const auto& [rank, ms] : writes) {
      in.writes += static_cast<int>(ms.size());
      in.write_ms = std::max(in.write_ms, Median(ms));
    }
    const CadenceVerdict c = JudgeCadence(in, spec);
    v.set_goodput(c.goodput);
    v.set_goodput_best(c.best);
    v.set_goodput_min(c.min);
    if (!c.passed) v.set_passed(false);
    v.set_detail(v.detail() + "; " + c.detail);
    return v;
  };
  auto with_params = [&](v1::Verification v) {
    v = with_cadence(v);
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
  if (spec.mtbf_s() > 0) {
    // What a checkpoint write of this job costs on these hosts now (the
    // fix changes the cadence, not the write), however soon the fix came:
    // the fixed job for a few steps, writing after every other one.
    v1::JobSpec cost = for_run(s.rec.job(), "write-cost", false);
    cost.mutable_checkpoint()->set_every(2);
    cost.mutable_checkpoint()->set_keep(2);
    cost.mutable_checkpoint()->set_keep_period(0);
    if (Status st = EnsureAgents(s, lock); !st.ok()) return failed("could not restart the job's agents: " + st.message());
    AddEvent(s, "verification", -1, "measuring what a checkpoint write costs: " + std::to_string(kWriteCostSteps) +
                                         " steps of the fixed job, a checkpoint after every other one");
    Status w = RunJob(s, lock, RunKind::kVerify, kWriteCostSteps, false, &cost);
    if (!w.ok() && !s.end_requested) {
      // As the healthy job: a run that fails here is the machine's doing; on fresh agents, once more.
      AddEvent(s, "verification", -1, "the run measuring a checkpoint write did not complete (" + w.message() +
                                           "); measuring it again");
      if (Status st = EnsureAgents(s, lock); st.ok()) w = RunJob(s, lock, RunKind::kVerify, kWriteCostSteps, false, &cost);
    }
    if (s.end_requested) return failed("the session ended during verification");
    if (!w.ok()) return failed("the run measuring a checkpoint write did not complete: " + w.message());
    for (const auto& steps : StepsByRank(s))
      for (const auto& r : steps)
        if (r.checkpoint_ms() > 0) writes[r.rank()].push_back(r.checkpoint_ms());
  }
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
    if (i == 0 && spec.params_vs_reference()) {
      // Once: the fixed run's end against the same job's without the fault.
      // (A kept bad host takes its hit at the first step of every later run.)
      const int64_t end_step = std::max<int64_t>(0, s.run->first_step) + s.run->steps_total;
      auto fixed_digests = FinalDigests(StepsByRank(s), end_step);
      if (!fixed_digests.ok()) return failed("could not compare the parameters: " + fixed_digests.status().message());
      auto from = CleanStart(s, lock, *resume);
      if (!from.ok()) return failed("could not find where the reference run starts: " + from.status().message());
      v1::JobSpec reference = for_run(s.rec.job(), "reference", false);
      reference.mutable_checkpoint()->set_resume_from(*from);
      Status c = CompareWithReference(s, lock, reference, end_step - ResumeStep(*from), end_step, *fixed_digests,
                                      &params);
      if (!c.ok() && !s.end_requested) {
        // The reference failing is the machine's problem: on fresh agents, once more.
        AddEvent(s, "verification", -1, "the reference run did not complete (" + c.message() + "); running it again");
        c = CompareWithReference(s, lock, reference, end_step - ResumeStep(*from), end_step, *fixed_digests, &params);
      }
      if (s.end_requested) return failed("the session ended during verification");
      if (!c.ok()) return failed("could not compare the parameters with a reference run: " + c.message());
      const std::string odd = MinorityRanks(*fixed_digests, reference);
      const std::string at = "parameters at step " + std::to_string(end_step) + ": ";
      params_detail =
          params.params_match()
              ? at + "every rank's bitwise the same as the job's without the fault"
              : at + (odd.empty() ? "the replicas agree with each other" : "rank(s) " + odd + " differ from the rest") +
                    ", and they are not what the job reaches without the fault (a job that kept a bad host, or "
                    "resumed from a checkpoint written after the replicas went apart, ends elsewhere)";
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

StatusOr<v1::ScoreReport> SessionManager::GetScore(const std::string& id, bool sealed) {
  if (!sealed) {
    auto stored = store_->LoadScore(id);
    if (!stored.ok()) return stored.status();
    if (stored->has_value()) return **stored;
  }
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
  v1::ScoreReport r = Unscored(rec, *d);
  if (sealed) r.set_note("an exam item: its score is in the exam's result, which the proctor reads");
  return r;
}

}  // namespace firedrill::controller
