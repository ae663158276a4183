#include "controller/scorer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include "faults/registry.h"
#include "faults/targeting.h"

namespace firedrill::controller {

namespace {
std::string Ranks(const std::set<int>& s) {
  std::string out;
  for (int r : s) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out.empty() ? "none" : out;
}
v1::ScoreItem Item(const std::string& name, int points, int max, const std::string& reason) {
  v1::ScoreItem it;
  it.set_name(name);
  it.set_points(points);
  it.set_max_points(max);
  it.set_reason(reason);
  return it;
}
}  // namespace

v1::ScoreReport Score(const ScoreInputs& in) {
  const v1::Scenario& sc = *in.scenario;
  const v1::SessionRecord& rec = *in.record;
  const v1::Rubric& rub = sc.rubric();
  v1::ScoreReport r;
  r.set_session_id(rec.info().session_id());
  r.set_scenario_id(sc.id());
  r.set_final(rec.verification().done());
  *r.mutable_verification() = rec.verification();

  const auto& d = in.diagnosis;
  if (!d) {
    r.add_items()->CopyFrom(Item("cause", 0, rub.cause(), "no diagnosis was submitted"));
  } else if (d->cause() == rec.answer_cause()) {
    r.add_items()->CopyFrom(Item("cause", rub.cause(), rub.cause(), "cause '" + d->cause() + "' is right"));
  } else if (rub.cause_class() > 0 && faults::CauseClass(d->cause()) == faults::CauseClass(rec.answer_cause())) {
    const int pts = std::min(rub.cause_class(), rub.cause());
    r.add_items()->CopyFrom(Item("cause", pts, rub.cause(),
                                 "cause '" + d->cause() + "' is not the cause, but the right kind of problem (" +
                                     faults::CauseClass(d->cause()) + ")"));
  } else {
    r.add_items()->CopyFrom(Item("cause", 0, rub.cause(), "cause '" + d->cause() + "' is not the cause"));
  }

  const std::set<int> want(rec.answer_culprit_ranks().begin(), rec.answer_culprit_ranks().end());
  std::set<int> got;
  if (d) got.insert(d->culprit_ranks().begin(), d->culprit_ranks().end());
  if (!d) {
    r.add_items()->CopyFrom(Item("culprit", 0, rub.culprit(), "no diagnosis was submitted"));
  } else if (got == want) {
    r.add_items()->CopyFrom(Item("culprit", rub.culprit(), rub.culprit(), "named rank(s) " + Ranks(got)));
  } else {
    r.add_items()->CopyFrom(Item("culprit", 0, rub.culprit(), "named rank(s) " + Ranks(got) + ", which is wrong"));
  }

  const v1::Verification& v = rec.verification();
  const bool fixed = in.fix_applied && v.done() && v.passed();
  if (!in.fix_applied) {
    r.add_items()->CopyFrom(Item("fix", 0, rub.fix(), "no fix was applied"));
  } else if (!v.done()) {
    r.add_items()->CopyFrom(Item("fix", 0, rub.fix(), "verification has not finished"));
  } else if (!v.passed()) {
    r.add_items()->CopyFrom(Item("fix", 0, rub.fix(), "verification failed: " + v.detail()));
  } else {
    r.add_items()->CopyFrom(Item("fix", rub.fix(), rub.fix(),
                                 std::string("verified by measurement: ") + v.detail() +
                                     (in.fix_matches_remediation ? "" : " (not one of the expected remediations)")));
  }

  if (!fixed) {
    r.add_items()->CopyFrom(Item("time", 0, rub.time(), "time points need a verified fix"));
  } else {
    const double budget = std::max(1, rub.time_budget_s());
    const double frac = std::clamp(1.0 - in.elapsed_s / budget, 0.0, 1.0);
    const int pts = static_cast<int>(std::lround(rub.time() * frac));
    r.add_items()->CopyFrom(Item("time", pts, rub.time(),
                                 "fixed " + std::to_string(static_cast<int>(in.elapsed_s)) +
                                     " s after the fault's onset, of a " +
                                     std::to_string(rub.time_budget_s()) + " s budget"));
  }

  const int hint_pts = -rec.hints_used() * rub.hint_cost();
  r.add_items()->CopyFrom(Item("hints", hint_pts, 0,
                               std::to_string(rec.hints_used()) + " hint(s) x " + std::to_string(rub.hint_cost())));

  int total = 0;
  for (const auto& it : r.items()) total += it.points();
  r.set_total(std::max(0, total));
  r.set_max_total(rub.cause() + rub.culprit() + rub.fix() + rub.time());
  if (r.final()) {
    r.set_answer_cause(rec.answer_cause());
    for (int c : rec.answer_culprit_ranks()) r.add_answer_culprit_ranks(c);
    r.set_runbook(sc.runbook());
  }
  return r;
}

namespace {
// `want` from a remediation against one `key=value` the learner set.
bool SettingMatches(const v1::SetKey& want, const v1::FixSetting& got) {
  if (got.key() != want.key()) return false;
  if (!want.value().empty()) return got.value() == want.value();
  char* end = nullptr;
  const double v = std::strtod(got.value().c_str(), &end);
  return end != got.value().c_str() && *end == '\0' && v >= want.at_least();
}
}  // namespace

bool MatchesRemediation(const v1::Scenario& scenario, const v1::SessionRecord& record,
                        const v1::ApplyFixRequest& fix) {
  const std::vector<v1::ResolvedFault> faults(record.faults().begin(), record.faults().end());
  const std::set<int> replaced(fix.replace_host_ranks().begin(), fix.replace_host_ranks().end());
  for (const auto& rem : scenario.remediations()) {
    bool all = true;
    for (const auto& a : rem.actions()) {
      if (a.has_replace_host()) {
        auto rank = faults::ResolveRankRef(a.replace_host(), faults);
        all = all && rank.ok() && replaced.count(*rank);
      } else if (a.has_set()) {
        bool found = false;
        for (const auto& s : fix.settings()) found = found || SettingMatches(a.set(), s);
        all = all && found;
      }
    }
    if (all && rem.actions_size() > 0) return true;
  }
  return false;
}

}  // namespace firedrill::controller
