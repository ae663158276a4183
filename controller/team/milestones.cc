#include "controller/team/milestones.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace firedrill::controller {

const std::vector<std::string>& SymptomWords(const std::string& cause_class) {
  static const std::map<std::string, std::vector<std::string>> words = {
      {"compute", {"slow", "straggl", "throughput", "samples/s", "tokens/s", "step time", "busy", "throttl"}},
      {"input pipeline",
       {"loader", "data", "starv", "input", "padding", "disk", "read", "worker", "waits for batch"}},
      {"communication",
       {"allreduce", "all-reduce", "link", "network", "bandwidth", "busbw", "collective", "comm", "hang",
        "timeout", "gloo", "nccl"}},
      {"numerics",
       {"loss", "nan", "inf", "overflow", "diverg", "scale", "learning rate", "lr", "spike", "skipped"}},
      {"state", {"checkpoint", "resume", "shard", "manifest", "restart", "restor"}},
      {"memory", {"memory", "oom", "out of memory"}},
      {"process", {"crash", "died", "dead", "killed", "exit", "lost", "restart"}},
  };
  static const std::vector<std::string> none;
  auto it = words.find(cause_class);
  return it == words.end() ? none : it->second;
}

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool NamesRank(const std::string& text, int rank) {
  const std::string want = "rank " + std::to_string(rank);
  for (size_t at = text.find(want); at != std::string::npos; at = text.find(want, at + 1)) {
    const size_t end = at + want.size();
    if (end == text.size() || !std::isdigit(static_cast<unsigned char>(text[end]))) return true;
  }
  return false;
}

// A symptom word where a word of `text` starts ("straggl" in "stragglers"),
// and a word of three letters or fewer only whole ("lr", "inf", "nan"):
// "already" names no learning rate, "info" no infinity.
bool NamesWord(const std::string& text, const std::string& w) {
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  for (size_t at = text.find(w); at != std::string::npos; at = text.find(w, at + 1)) {
    const size_t end = at + w.size();
    if (at > 0 && word_char(text[at - 1])) continue;
    if (w.size() <= 3 && end < text.size() && word_char(text[end])) continue;
    return true;
  }
  return false;
}

bool NamesSymptom(const TimelineEntry& e, const IncidentFacts& facts) {
  if (e.kind == "proposal" || e.kind == "diagnosis") return true;
  if (e.kind != "note" && e.kind != "update") return false;
  const std::string text = Lower(e.text);
  for (const auto& w : SymptomWords(facts.cause_class))
    if (NamesWord(text, w)) return true;
  for (int r : facts.culprit_ranks)
    if (NamesRank(text, r)) return true;
  return false;
}

}  // namespace

std::vector<Milestone> ComputeMilestones(const std::vector<TimelineEntry>& timeline,
                                         const IncidentFacts& facts) {
  std::vector<Milestone> out = {{"started"}, {"detected"}, {"identified"}, {"mitigated"}, {"resolved"}};
  out[0].unix_ms = facts.onset_ms;
  // The first entry at or after `from_ms` that `pred` accepts.
  auto first = [&](Milestone* m, int64_t from_ms, auto pred) {
    for (size_t i = 0; i < timeline.size(); ++i) {
      const TimelineEntry& e = timeline[i];
      if (e.unix_ms < from_ms || !pred(e)) continue;
      m->unix_ms = e.unix_ms;
      m->entry = static_cast<int>(i);
      return;
    }
  };
  first(&out[1], facts.onset_ms, [&](const TimelineEntry& e) { return NamesSymptom(e, facts); });
  first(&out[2], facts.onset_ms, [](const TimelineEntry& e) { return e.kind == "diagnosis" && e.correct; });
  // A correct diagnosis detects too, if nothing named a symptom before it.
  if (out[2].unix_ms != 0 && (out[1].unix_ms == 0 || out[1].unix_ms > out[2].unix_ms)) {
    out[1].unix_ms = out[2].unix_ms;
    out[1].entry = out[2].entry;
  }
  first(&out[3], facts.onset_ms, [](const TimelineEntry& e) { return e.kind == "fix"; });
  // Resolved: a passing verification of that fix, never one before it.
  if (out[3].unix_ms != 0)
    first(&out[4], out[3].unix_ms,
          [](const TimelineEntry& e) { return e.kind == "verification" && e.passed; });
  return out;
}

Impact MeasureImpact(double baseline_rate, const std::vector<std::pair<int64_t, double>>& rate_points,
                     int64_t from_ms, int64_t to_ms, int64_t session_start_ms, int64_t session_end_ms) {
  Impact out;
  if (to_ms <= from_ms || baseline_rate <= 0) return out;
  out.duration_s = (to_ms - from_ms) / 1000.0;
  std::vector<std::pair<int64_t, double>> pts = rate_points;
  std::sort(pts.begin(), pts.end());
  double done = 0;  // units processed in the interval
  for (size_t i = 0; i < pts.size(); ++i) {
    // Each point's rate holds from its time (the first also before it) to the next point's.
    const int64_t a = std::max(from_ms, i == 0 ? from_ms : pts[i].first);
    const int64_t b = std::min(to_ms, i + 1 < pts.size() ? pts[i + 1].first : to_ms);
    if (b > a) done += std::max(0.0, pts[i].second) * (b - a) / 1000.0;
  }
  out.mean_rate = done / out.duration_s;
  out.lost_units = std::max(0.0, baseline_rate * out.duration_s - done);
  const double session_s = (session_end_ms - session_start_ms) / 1000.0;
  out.lost_percent = session_s > 0 ? 100.0 * out.lost_units / (baseline_rate * session_s) : 0.0;
  return out;
}

}  // namespace firedrill::controller
