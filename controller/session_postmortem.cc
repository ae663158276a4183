// A finished drill's postmortem (team drills): milestones from the shared
// timeline, the impact measured from the job's own step reports against its
// baseline, and the SRE-template document (controller/team/postmortem.h).
#include <algorithm>
#include <map>
#include <set>

#include "controller/session_manager.h"
#include "controller/team/postmortem.h"
#include "faults/registry.h"

namespace firedrill::controller {

namespace {

// Whether a diagnosis names what the key names: the same causes, each with
// the same culprit ranks (a job-wide cause names none).
bool MatchesKey(const v1::DiagnosisRecord& d, const v1::SessionRecord& rec) {
  using Named = std::set<std::pair<std::string, std::set<int>>>;
  Named said, key;
  for (const auto& f : d.findings())
    said.insert({f.cause(), {f.culprit_ranks().begin(), f.culprit_ranks().end()}});
  for (const auto& f : rec.answer_findings())
    key.insert({f.cause(), {f.culprit_ranks().begin(), f.culprit_ranks().end()}});
  return !key.empty() && said == key;
}

std::string FaultText(const v1::ResolvedFault& f) {
  std::string where = f.all_ranks()       ? "every rank"
                      : !f.host().empty() ? "host " + f.host()
                                          : "rank " + std::to_string(f.rank());
  return f.kind() + " on " + where + " from step " + std::to_string(f.trigger_step());
}

}  // namespace

std::vector<std::pair<int64_t, double>> JobRate(const v1::MetricsResponse& run, bool tokens) {
  std::map<int64_t, std::pair<int64_t, double>> by_step;  // step -> (when its last rank ended it, rate)
  for (const auto& r : run.ranks())
    for (const auto& row : r.rows()) {
      if (row.end_unix_ms() <= 0) continue;
      auto& [when, rate] = by_step[row.step()];
      when = std::max(when, row.end_unix_ms());
      rate += tokens ? row.tokens_per_s() : row.samples_per_s();
    }
  std::vector<std::pair<int64_t, double>> out;
  for (const auto& [step, p] : by_step) out.push_back(p);
  return out;
}

StatusOr<v1::PostmortemResponse> SessionManager::Postmortem(const std::string& id,
                                                            const std::vector<v1::TimelineItem>& timeline) {
  auto sp = Find(id);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  v1::SessionRecord rec;
  const v1::Scenario* sc = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!Terminal(s.state))
      return FailedPrecondition(
          "the postmortem is written once the drill is over (it names the root cause); "
          "the session is " +
          s.rec.info().state());
    rec = s.rec;
    sc = s.scenario;
  }
  if (sc == nullptr)
    return FailedPrecondition("session " + id + "'s scenario '" + rec.info().scenario_id() +
                              "' is not in the catalogue any more: its postmortem cannot be written");
  auto diagnoses = store_->LoadDiagnoses(id);
  if (!diagnoses.ok()) return diagnoses.status();
  v1::GetMetricsRequest mreq;
  mreq.set_session_id(id);
  mreq.set_run("main");
  mreq.set_max_points(10000);
  auto main_run = GetMetrics(mreq);

  PostmortemInput in;
  in.title = sc->title();
  in.scenario_id = sc->id();
  in.session_id = id;
  in.session_start_ms = rec.info().created_unix_ms();
  in.session_end_ms = in.session_start_ms;
  std::vector<std::pair<std::string, std::vector<std::string>>>
      people;  // who and their roles, as they appear
  size_t diagnosis_no = 0;
  int64_t scored_ms = 0;
  for (const auto& t : timeline) {
    in.session_end_ms = std::max(in.session_end_ms, t.unix_ms());
    if (!t.role().empty()) {
      auto p = std::find_if(people.begin(), people.end(), [&](const auto& e) { return e.first == t.who(); });
      if (p == people.end()) p = people.insert(people.end(), {t.who(), {}});
      if (std::find(p->second.begin(), p->second.end(), t.role()) == p->second.end())
        p->second.push_back(t.role());
    }
    TimelineEntry e;
    e.unix_ms = t.unix_ms();
    e.who = t.who();
    e.role = t.role();
    e.kind = t.kind();
    e.text = t.text();
    if (t.kind() == "diagnosis") {
      // The k-th submitted diagnosis on the timeline is the store's k-th.
      if (diagnosis_no < diagnoses->size()) e.correct = MatchesKey((*diagnoses)[diagnosis_no], rec);
      ++diagnosis_no;
    } else if (t.kind() == "event") {
      if (t.text().rfind("verification_failed:", 0) == 0) {
        e.kind = "verification";
      } else if (t.text().rfind("scored:", 0) == 0) {
        scored_ms = t.unix_ms();
        e.kind = rec.verification().passed() ? "verification" : "event";
        e.passed = rec.verification().passed();
      }
    }
    in.timeline.push_back(std::move(e));
  }
  for (const auto& [who, roles] : people) {
    std::string text = who + " (";
    for (size_t i = 0; i < roles.size(); ++i) text += (i ? ", " : "") + roles[i];
    in.participants.push_back(text + ")");
  }
  IncidentFacts facts;
  facts.onset_ms = rec.fault_onset_unix_ms();
  for (const auto& c : faults::CauseTaxonomy())
    if (c.cause == rec.answer_cause()) facts.cause_class = c.cause_class;
  facts.culprit_ranks.assign(rec.answer_culprit_ranks().begin(), rec.answer_culprit_ranks().end());
  if (facts.onset_ms > 0) {
    TimelineEntry onset;
    onset.unix_ms = facts.onset_ms;
    onset.who = "controller";
    onset.kind = "onset";
    onset.text = "the fault took hold (measured: the first step past its trigger)";
    auto at = std::upper_bound(
        in.timeline.begin(), in.timeline.end(), onset,
        [](const TimelineEntry& a, const TimelineEntry& b) { return a.unix_ms < b.unix_ms; });
    in.timeline.insert(at, onset);
  }
  in.milestones = ComputeMilestones(in.timeline, facts);

  std::string cause_meaning;
  for (const auto& c : faults::CauseTaxonomy())
    if (c.cause == rec.answer_cause()) cause_meaning = c.meaning;
  in.root_cause = rec.answer_cause() + (cause_meaning.empty() ? "" : ": " + cause_meaning);
  if (rec.answer_culprit_ranks_size() > 0) {
    in.root_cause += " (rank";
    for (int r : rec.answer_culprit_ranks()) in.root_cause += " " + std::to_string(r);
    in.root_cause += ")";
  }
  for (const auto& f : rec.faults()) in.trigger += (in.trigger.empty() ? "" : "; ") + FaultText(f);
  if (rec.fix_applied()) {
    std::string fix;
    for (int r : rec.fix().replace_host_ranks())
      fix += " replace the host of rank " + std::to_string(r) + ";";
    for (const auto& kv : rec.fix().settings()) fix += " " + kv.key() + "=" + kv.value() + ";";
    in.resolution = "fix:" + (fix.empty() ? std::string(" no change") : fix) + " verification " +
                    (rec.verification().passed() ? "passed" : "did not pass") +
                    (rec.verification().detail().empty() ? "" : ": " + rec.verification().detail());
  } else {
    in.resolution = "no fix was applied";
  }

  // Impact: the job's own rate (its ranks' step reports summed step by
  // step) from the onset to the fix, against the baseline's.
  const bool tokens = sc->verify().throughput_unit() == "tokens";
  in.unit = tokens ? "tokens" : "samples";
  in.baseline_rate = tokens ? rec.baseline().tokens_per_s() : rec.baseline().throughput_samples_per_s();
  std::vector<std::pair<int64_t, double>> points;
  if (main_run.ok()) points = JobRate(*main_run, tokens);
  // From the onset to the mitigation (the milestones' times), else to the
  // drill's end.
  const int64_t from = facts.onset_ms > 0 ? facts.onset_ms : rec.run_started_unix_ms();
  const int64_t mitigated = in.milestones.size() > 3 ? in.milestones[3].unix_ms : 0;
  const int64_t to = mitigated > 0 ? mitigated : scored_ms > 0 ? scored_ms : in.session_end_ms;
  in.impact = MeasureImpact(in.baseline_rate, points, from, to, in.session_start_ms, in.session_end_ms);
  in.rate_points = points;

  v1::PostmortemResponse out;
  out.set_markdown(PostmortemMarkdown(in));
  out.set_html(PostmortemHtml(in));
  for (const Milestone& m : in.milestones) {
    v1::MilestoneTime* t = out.add_milestones();
    t->set_name(m.name);
    t->set_unix_ms(m.unix_ms);
    if (m.unix_ms > 0 && facts.onset_ms > 0) t->set_since_onset_s((m.unix_ms - facts.onset_ms) / 1000.0);
    if (m.entry >= 0 && m.entry < static_cast<int>(in.timeline.size())) t->set_by(in.timeline[m.entry].who);
  }
  out.set_unit(in.unit);
  out.set_baseline_rate(in.baseline_rate);
  out.set_lost_units(in.impact.lost_units);
  out.set_lost_percent(in.impact.lost_percent);
  out.set_impact_duration_s(in.impact.duration_s);
  for (const auto& p : in.participants) out.add_participants(p);
  return out;
}

}  // namespace firedrill::controller
