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

std::set<int> RankSet(const google::protobuf::RepeatedField<int32_t>& r) { return {r.begin(), r.end()}; }

v1::ScoreItem Item(const std::string& name, int points, int max, const std::string& reason) {
  v1::ScoreItem it;
  it.set_name(name);
  it.set_points(points);
  it.set_max_points(max);
  it.set_reason(reason);
  return it;
}

// Which submitted finding answers which key finding: the same cause first,
// then (for partial credit) one of the same cause class.
struct Pairing {
  std::vector<int> exact;  // per key finding: index into submitted, or -1
  std::vector<int> by_class;
  std::vector<bool> used;  // per submitted finding
};

Pairing Pair(const std::vector<v1::Finding>& key, const std::vector<v1::Finding>& got, bool by_class) {
  Pairing p;
  p.exact.assign(key.size(), -1);
  p.by_class.assign(key.size(), -1);
  p.used.assign(got.size(), false);
  for (size_t k = 0; k < key.size(); ++k) {
    for (size_t g = 0; g < got.size(); ++g) {
      if (!p.used[g] && got[g].cause() == key[k].cause()) {
        p.exact[k] = static_cast<int>(g);
        p.used[g] = true;
        break;
      }
    }
  }
  for (size_t k = 0; by_class && k < key.size(); ++k) {
    if (p.exact[k] >= 0) continue;
    const std::string cls = faults::CauseClass(key[k].cause());
    for (size_t g = 0; g < got.size(); ++g) {
      if (!p.used[g] && !cls.empty() && faults::CauseClass(got[g].cause()) == cls) {
        p.by_class[k] = static_cast<int>(g);
        p.used[g] = true;
        break;
      }
    }
  }
  return p;
}

std::string CauseList(const std::vector<v1::Finding>& f) {
  std::string out;
  for (const auto& x : f) out += (out.empty() ? "'" : ", '") + x.cause() + "'";
  return out;
}

// The diagnosis that counts: the one in force when the fix was applied, or
// the latest when the session ended without a fix.
const v1::DiagnosisRecord* InForce(const v1::SessionRecord& rec, const std::vector<v1::DiagnosisRecord>& all) {
  if (rec.fix_applied()) {
    for (const auto& d : all)
      if (d.number() == rec.diagnosis_at_fix()) return &d;
    return nullptr;
  }
  return all.empty() ? nullptr : &all.back();
}

void ScoreDiagnosis(const ScoreInputs& in, const std::vector<v1::Finding>& key, v1::ScoreReport* r) {
  const v1::Rubric& rub = in.scenario->rubric();
  const v1::DiagnosisRecord* d = InForce(*in.record, in.diagnoses);
  if (d == nullptr) {
    const std::string why = in.record->fix_applied() && !in.diagnoses.empty()
                                ? "no diagnosis was in force when the fix was applied"
                                : "no diagnosis was submitted";
    *r->add_items() = Item("cause", 0, rub.cause(), why);
    *r->add_items() = Item("culprit", 0, rub.culprit(), why);
    return;
  }
  const std::vector<v1::Finding> got(d->findings().begin(), d->findings().end());
  const double class_credit = rub.cause() > 0 ? std::min(1.0, rub.cause_class() / static_cast<double>(rub.cause())) : 0;
  // Without partial credit a wrong cause of the right class is just wrong
  // (and counts as an extra finding).
  const Pairing p = Pair(key, got, class_credit > 0);
  const double n = static_cast<double>(std::max<size_t>(1, key.size()));
  // The culprit item is about localising: where some findings sit on
  // ranks, it is earned on those; only a wholly job-wide answer earns it by
  // naming no rank (for the right cause).
  bool any_ranks = false;
  for (const auto& k : key) any_ranks = any_ranks || k.culprit_ranks_size() > 0;
  double nc = 0;
  for (const auto& k : key) nc += (!any_ranks || k.culprit_ranks_size() > 0) ? 1 : 0;
  nc = std::max(1.0, nc);

  double cause_credit = 0, culprit_credit = 0;
  std::string cause_why, culprit_why;
  auto add = [](std::string* s, const std::string& part) { *s += (s->empty() ? "" : "; ") + part; };
  for (size_t k = 0; k < key.size(); ++k) {
    int g = p.exact[k] >= 0 ? p.exact[k] : p.by_class[k];
    if (p.exact[k] >= 0) {
      cause_credit += 1;
      add(&cause_why, "cause '" + key[k].cause() + "' is right");
    } else if (p.by_class[k] >= 0 && class_credit > 0) {
      cause_credit += class_credit;
      add(&cause_why, "cause '" + got[g].cause() + "' is not the cause, but the right kind of problem (" +
                          faults::CauseClass(got[g].cause()) + ")");
    } else {
      add(&cause_why, "'" + key[k].cause() + "' was not named");
    }
    if (any_ranks && key[k].culprit_ranks_size() == 0) continue;  // job-wide, among localised ones
    // One finding each side: its ranks count whatever cause it names (the
    // culprit is a separate skill from the cause).
    if (g < 0 && key.size() == 1 && got.size() == 1) g = 0;
    const std::set<int> want = RankSet(key[k].culprit_ranks());
    if (g < 0) {
      add(&culprit_why, "no finding for '" + key[k].cause() + "' named its ranks");
      continue;
    }
    const std::set<int> named = RankSet(got[g].culprit_ranks());
    // A job-wide answer (no culprit) is only "named right" by a finding of
    // that cause or its class, not by any finding that happens to name none.
    const bool paired = p.exact[k] == g || p.by_class[k] == g;
    if (named == want && (!want.empty() || paired)) {
      culprit_credit += 1;
      add(&culprit_why, "named rank(s) " + Ranks(named));
    } else {
      add(&culprit_why, "named rank(s) " + Ranks(named) + ", which is wrong");
    }
  }
  std::vector<v1::Finding> extra;
  for (size_t g = 0; g < got.size(); ++g)
    if (!p.used[g]) extra.push_back(got[g]);
  if (!extra.empty()) {
    cause_credit -= static_cast<double>(extra.size());
    add(&cause_why, CauseList(extra) + (extra.size() == 1 ? " is" : " are") + " not a cause here (each costs " +
                        std::to_string(static_cast<int>(std::lround(rub.cause() / n))) + ")");
  }
  const int cause_pts = static_cast<int>(std::lround(std::clamp(cause_credit / n, 0.0, 1.0) * rub.cause()));
  const int culprit_pts = static_cast<int>(std::lround(std::clamp(culprit_credit / nc, 0.0, 1.0) * rub.culprit()));
  *r->add_items() = Item("cause", cause_pts, rub.cause(), cause_why);
  *r->add_items() = Item("culprit", culprit_pts, rub.culprit(), culprit_why);
}

}  // namespace

int RevisionCost(const v1::Rubric& r) { return r.has_revision_cost() ? r.revision_cost() : 5; }
int CollateralCost(const v1::Rubric& r) { return r.has_collateral_cost() ? r.collateral_cost() : 10; }
int HintCost(const v1::SessionRecord& rec, const v1::Rubric& r) {
  return rec.hint_cost() > 0 ? rec.hint_cost() : r.hint_cost();
}

int TimeLimitS(const v1::Rubric& r) { return r.time_limit_s() > 0 ? r.time_limit_s() : 3 * std::max(1, r.time_budget_s()); }

std::vector<v1::Finding> FindingsOf(const v1::SubmitDiagnosisRequest& req) {
  std::vector<v1::Finding> out(req.findings().begin(), req.findings().end());
  if (!req.cause().empty()) {
    v1::Finding f;
    f.set_cause(req.cause());
    *f.mutable_culprit_ranks() = req.culprit_ranks();
    out.insert(out.begin(), f);
  }
  return out;
}

v1::ScoreReport Unscored(const v1::SessionRecord& rec, const std::vector<v1::DiagnosisRecord>& diagnoses) {
  v1::ScoreReport r;
  r.set_session_id(rec.info().session_id());
  r.set_scenario_id(rec.info().scenario_id());
  r.set_state(rec.info().state());
  r.set_max_total(rec.info().max_score());
  r.set_final(false);
  r.set_note("not scored yet");
  for (const auto& d : diagnoses) *r.add_diagnoses() = d;
  r.set_fix_applied(rec.fix_applied());
  if (rec.fix_applied()) *r.mutable_fix() = rec.fix();
  return r;
}

v1::ScoreReport Score(const ScoreInputs& in) {
  const v1::Scenario& sc = *in.scenario;
  const v1::SessionRecord& rec = *in.record;
  const v1::Rubric& rub = sc.rubric();
  v1::ScoreReport r = Unscored(rec, in.diagnoses);
  r.set_final(true);
  r.set_note("");
  *r.mutable_verification() = rec.verification();

  const std::vector<v1::Finding> key(rec.answer_findings().begin(), rec.answer_findings().end());
  ScoreDiagnosis(in, key, &r);

  const v1::Verification& v = rec.verification();
  const bool verified = rec.fix_applied() && v.done() && v.passed();
  if (!rec.fix_applied()) {
    *r.add_items() = Item("fix", 0, rub.fix(), "no fix was applied");
  } else if (!v.done()) {
    *r.add_items() = Item("fix", 0, rub.fix(), "verification did not finish");
  } else if (!v.passed()) {
    *r.add_items() = Item("fix", 0, rub.fix(), "verification failed: " + v.detail());
  } else if (rec.fix_matches()) {
    *r.add_items() = Item("fix", rub.fix(), rub.fix(), "verified by measurement: " + v.detail());
  } else {
    *r.add_items() = Item("fix", rub.fix() / 2, rub.fix(),
                          "verified by measurement (" + v.detail() +
                              "), but not an accepted remediation: at most half the points until an instructor "
                              "looks at it");
    r.set_needs_review(true);
    r.set_note("verified, but not an accepted remediation: an instructor should look");
  }

  if (!verified || !rec.fix_matches()) {
    *r.add_items() = Item("time", 0, rub.time(), "time points need a verified, accepted fix");
  } else {
    const double budget = std::max(1, rub.time_budget_s());
    const double frac = std::clamp(1.0 - in.elapsed_s / budget, 0.0, 1.0);
    *r.add_items() = Item("time", static_cast<int>(std::lround(rub.time() * frac)), rub.time(),
                          "fixed " + std::to_string(static_cast<int>(in.elapsed_s)) +
                              " s after the fault's onset, of a " + std::to_string(rub.time_budget_s()) +
                              " s budget");
  }

  *r.add_items() =
      Item("hints", -rec.hints_used() * HintCost(rec, rub), 0,
           std::to_string(rec.hints_used()) + " hint(s) x " + std::to_string(HintCost(rec, rub)));
  const int submitted = rec.fix_applied() ? rec.diagnoses_at_fix() : static_cast<int>(in.diagnoses.size());
  const int revisions = std::max(0, submitted - 1);
  *r.add_items() = Item("revisions", -revisions * RevisionCost(rub), 0,
                        std::to_string(revisions) + " revision(s) of the diagnosis x " +
                            std::to_string(RevisionCost(rub)));
  const std::vector<std::string> collateral =
      rec.fix_applied() ? CollateralActions(rec, rec.fix(), sc.cluster().ranks_per_host())
                        : std::vector<std::string>{};
  for (const auto& c : collateral) r.add_collateral(c);
  *r.add_items() = Item("collateral", -static_cast<int>(collateral.size()) * CollateralCost(rub), 0,
                        std::to_string(collateral.size()) + " collateral action(s) x " +
                            std::to_string(CollateralCost(rub)));

  int total = 0;
  for (const auto& it : r.items()) total += it.points();
  r.set_total(std::max(0, total));
  r.set_max_total(rub.cause() + rub.culprit() + rub.fix() + rub.time());
  // A session ended before any fix (given up, or out of time) keeps its
  // answer sealed: ending at once must not be a way to read the key (and,
  // with the same seed, to ace the next session).
  if (rec.info().state() == "ended" && !rec.fix_applied()) {
    r.set_note("ended before a fix: the answer stays sealed; play the drill again in a new session");
    return r;
  }
  if (!key.empty()) {
    r.set_answer_cause(key[0].cause());
    *r.mutable_answer_culprit_ranks() = key[0].culprit_ranks();
  }
  for (const auto& f : key) *r.add_answer_findings() = f;
  r.set_runbook(sc.runbook());
  return r;
}

namespace {
// `want` from a remediation against one `key=value` the learner set.
bool SettingMatches(const v1::SetKey& want, const v1::FixSetting& got) {
  if (got.key() != want.key()) return false;
  if (want.any_value()) return true;
  if (!want.value().empty()) return got.value() == want.value();
  char* end = nullptr;
  const double v = std::strtod(got.value().c_str(), &end);
  return end != got.value().c_str() && *end == '\0' && v >= want.at_least() &&
         (!want.has_at_most() || v <= want.at_most());
}

std::set<int> CulpritRanks(const v1::SessionRecord& record) {
  std::set<int> out;
  for (const auto& f : record.answer_findings()) out.insert(f.culprit_ranks().begin(), f.culprit_ranks().end());
  return out;
}
}  // namespace

bool MatchesRemediation(const v1::Scenario& scenario, const v1::SessionRecord& record,
                        const v1::ApplyFixRequest& fix) {
  const std::vector<v1::ResolvedFault> faults(record.faults().begin(), record.faults().end());
  // A host is replaced whole, whichever of its ranks named it: compared by
  // hosts (ranks_per_host consecutive ranks each, which move together).
  const int per_host = std::max(1, scenario.cluster().ranks_per_host());
  auto host_of = [&](int rank) { return rank / per_host; };
  std::set<int> replaced;
  for (int r : fix.replace_host_ranks()) replaced.insert(host_of(r));
  const bool empty = replaced.empty() && fix.settings().empty();
  for (const auto& rem : scenario.remediations()) {
    if (rem.actions_size() == 0) continue;
    bool all = true;
    std::set<int> hosts;           // the remediation's replacements
    std::vector<bool> covered(fix.settings_size(), false);
    bool no_change = false;
    for (const auto& a : rem.actions()) {
      if (a.has_replace_host()) {
        auto rank = faults::ResolveRankRef(a.replace_host(), faults);
        all = all && rank.ok() && replaced.count(host_of(*rank));
        if (rank.ok()) hosts.insert(host_of(*rank));
      } else if (a.has_set()) {
        bool found = false;
        for (int i = 0; i < fix.settings_size(); ++i) {
          if (SettingMatches(a.set(), fix.settings(i))) {
            found = true;
            covered[i] = true;
          }
        }
        all = all && found;
      } else if (a.no_change()) {
        no_change = true;
      }
    }
    if (no_change) {
      if (fix.no_change() && empty) return true;
      continue;
    }
    if (!all || fix.no_change()) continue;
    // Nothing beyond the remediation: no other host, no other setting
    // (but those it allows besides).
    bool beyond = false;
    for (int r : replaced) beyond = beyond || !hosts.count(r);
    for (int i = 0; i < fix.settings_size(); ++i) {
      if (covered[i]) continue;
      const auto& allowed = rem.may_also_set();
      beyond = beyond || std::find(allowed.begin(), allowed.end(), fix.settings(i).key()) == allowed.end();
    }
    if (!beyond) return true;
  }
  return false;
}

std::vector<std::string> CollateralActions(const v1::SessionRecord& record, const v1::ApplyFixRequest& fix,
                                           int ranks_per_host) {
  const std::set<int> culprits = CulpritRanks(record);
  std::vector<std::string> out;
  // One action per host replaced: naming two ranks of one machine replaces
  // it once (its ranks move together).
  const int per_host = std::max(1, ranks_per_host);
  std::set<int> culprit_hosts;
  for (int r : culprits) culprit_hosts.insert(r / per_host);
  std::set<int> seen_hosts;
  for (int r : fix.replace_host_ranks()) {
    if (culprit_hosts.count(r / per_host) || !seen_hosts.insert(r / per_host).second) continue;
    out.push_back(per_host == 1
                      ? "replaced the host of rank " + std::to_string(r) + ", which is not a culprit"
                      : "replaced the host of rank " + std::to_string(r) + " (ranks " +
                            std::to_string(r / per_host * per_host) + "-" +
                            std::to_string(r / per_host * per_host + per_host - 1) +
                            "), which holds no culprit");
  }
  // Restarting from scratch throws away every checkpoint the job wrote.
  bool cadence_set = false;  // a fix that also turns checkpoints off still threw them away
  for (const auto& kv : fix.settings()) cadence_set = cadence_set || kv.key() == "checkpoint.every";
  for (const auto& kv : fix.settings())
    if (kv.key() == "checkpoint.resume_from" && kv.value().empty() &&
        (record.job().checkpoint().every() > 0 || cadence_set))
      out.push_back("restarted the job from scratch (checkpoint.resume_from cleared), throwing away its checkpoints");
  // Rolling back further than the damage: the training in between is lost.
  if (record.has_newest_valid_checkpoint_at_fix()) {
    const int64_t newest = record.newest_valid_checkpoint_at_fix();
    for (const auto& kv : fix.settings()) {
      if (kv.key() != "checkpoint.resume_from" || kv.value().empty()) continue;
      const int64_t step = CheckpointStepOf(kv.value());
      if (step >= 0 && step < newest)
        out.push_back("resumed from step-" + std::to_string(step) + ", " + std::to_string(newest - step) +
                      " steps older than the newest checkpoint that verified (step-" + std::to_string(newest) +
                      "): that training is thrown away");
    }
  }
  return out;
}

int64_t CheckpointStepOf(const std::string& dir) {
  std::string base = dir;
  while (!base.empty() && base.back() == '/') base.pop_back();
  const size_t slash = base.rfind('/');
  if (slash != std::string::npos) base = base.substr(slash + 1);
  if (base.rfind("step-", 0) != 0 || base.size() == 5 || base.size() > 5 + 18) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < base.size(); ++i) {
    if (base[i] < '0' || base[i] > '9') return -1;
    v = v * 10 + (base[i] - '0');
  }
  return v;
}

}  // namespace firedrill::controller
