#include "analysis/flight_records.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "common/format.h"

namespace firedrill::analysis {

namespace {

const v1::CollectiveRecord* Position(const v1::RankFlightRecord& r) {
  for (const auto& e : r.entries())
    if (e.state() == "started") return &e;
  return r.entries_size() ? &r.entries(r.entries_size() - 1) : nullptr;
}

std::string Describe(const v1::CollectiveRecord& e) {
  std::string s = e.op() + " #" + std::to_string(e.seq());
  if (e.bytes() > 0) s += " (" + Bytes(e.bytes()) + ")";
  s += " at step " + std::to_string(e.step());
  return s;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

// How long the rank has been where it is: in its collective since it
// started it, or idle since its last one ended.
double StillS(const v1::RankFlightRecord& r, const v1::CollectiveRecord& e) {
  if (e.state() == "started") return AgeS(r, e);
  return e.end_unix_ns() > 0 && r.unix_ns() > e.end_unix_ns() ? (r.unix_ns() - e.end_unix_ns()) / 1e9 : 0.0;
}

}  // namespace

double AgeS(const v1::RankFlightRecord& r, const v1::CollectiveRecord& e) {
  return e.start_unix_ns() > 0 && r.unix_ns() > e.start_unix_ns() ? (r.unix_ns() - e.start_unix_ns()) / 1e9 : 0.0;
}

FrAnalysis AnalyzeFlightRecords(const v1::FlightRecorderResponse& fr) {
  FrAnalysis a;
  using Key = std::tuple<int64_t, std::string, int64_t>;  // seq, op, bytes
  std::map<Key, std::vector<int>> groups;
  std::vector<int> silent;
  std::string lines;
  double still = 1e18;  // the least time any rank has stayed where it is
  for (const auto& r : fr.ranks()) {
    if (!r.answered()) {
      silent.push_back(r.rank());
      continue;
    }
    const auto* p = Position(r);
    if (p == nullptr) continue;
    if (p->state() == "started" && AgeS(r, *p) >= kStuckAfterS) a.stuck = true;
    still = std::min(still, StillS(r, *p));
    groups[Key{p->seq(), p->op(), p->bytes()}].push_back(r.rank());
  }
  auto state_of = [&](int rank) -> std::string {
    for (const auto& r : fr.ranks()) {
      if (r.rank() != rank) continue;
      const auto* p = Position(r);
      if (!p) return "";
      if (p->state() == "started") return "waits in " + Describe(*p) + " for " + Num(AgeS(r, *p), 1) + " s";
      if (p->state() == "failed") return "failed in " + Describe(*p) + ": " + p->error();
      return "last finished " + Describe(*p);
    }
    return "";
  };
  if (groups.size() > 1 && still < kStuckAfterS) {
    // A running job: ranks are a collective or two apart at any instant.
    std::string where;
    for (const auto& [key, ranks] : groups) where += (where.empty() ? "" : "; ") + RankList(ranks) + " " + state_of(ranks.front());
    a.summary = "the collectives are in flight: " + where +
                ". Ranks of a running job are a collective or two apart at any moment; a desync is ranks that "
                "stop in different collectives and stay there (more than " + Num(kStuckAfterS) + " s).";
  } else if (groups.size() > 1) {
    a.desync = true;
    // The largest group is the consensus; ties go to the group at the lower
    // sequence number (the ranks that are behind are waiting for the others).
    auto best = groups.begin();
    for (auto it = groups.begin(); it != groups.end(); ++it)
      if (it->second.size() > best->second.size()) best = it;
    for (auto it = groups.begin(); it != groups.end(); ++it) {
      if (it == best) continue;
      a.odd_ranks.insert(a.odd_ranks.end(), it->second.begin(), it->second.end());
    }
    std::sort(a.odd_ranks.begin(), a.odd_ranks.end());
    std::string lead = state_of(best->second.front());
    if (best->second.size() > 1 && lead.rfind("waits", 0) == 0) lead = "wait" + lead.substr(5);
    a.summary = RankList(best->second) + " " + lead + ", but ";
    for (int r : a.odd_ranks) a.summary += "rank " + std::to_string(r) + " " + state_of(r) + "; ";
    a.summary +=
        "the ranks are in different collectives, so none of them can complete: a desync. Look at what " +
        RankList(a.odd_ranks) + " did differently just before (one more or one fewer step, a skipped or extra "
        "collective).";
  } else if (groups.size() == 1) {
    const auto& g = groups.begin()->second;
    if (a.stuck && still >= kStuckAfterS) {
      a.summary = "every rank that answered " + state_of(g.front()) +
                  ": they agree on the collective, so it is not a desync; a peer that stopped participating "
                  "(crashed, or stuck outside collectives) or a stalled transport would look like this.";
    } else {
      a.summary = "no collective is in flight: every rank " + state_of(g.front()) + ".";
    }
  } else {
    a.summary = "no collectives recorded yet.";
  }
  if (!silent.empty()) {
    a.odd_ranks.insert(a.odd_ranks.end(), silent.begin(), silent.end());
    std::sort(a.odd_ranks.begin(), a.odd_ranks.end());
    a.summary += " " + RankList(silent) + " did not answer (agent gone or not running).";
  }
  return a;
}

}  // namespace firedrill::analysis
