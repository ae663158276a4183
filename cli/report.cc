#include "cli/report.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <sstream>

#include "cli/output.h"
#include "common/format.h"
#include "common/svg_chart.h"
#include "common/text.h"

namespace firedrill::cli {

namespace {

std::string UtcText(int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%SZ", &tm);
  return buf;
}

std::string Fixed(double v, int digits) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(digits);
  o << v;
  return o.str();
}

// The whole job's rate at each step every rank reported: the sum of the
// ranks' rates (samples/s, or real tokens/s).
std::vector<std::pair<double, double>> JobRateByStep(const v1::MetricsResponse& m, bool tokens) {
  std::map<int64_t, std::pair<double, int>> by_step;
  for (const auto& r : m.ranks())
    for (const auto& row : r.rows()) {
      auto& [sum, n] = by_step[row.step()];
      sum += tokens ? row.tokens_per_s() : row.samples_per_s();
      ++n;
    }
  std::vector<std::pair<double, double>> out;
  for (const auto& [step, v] : by_step)
    if (v.second == m.ranks_size()) out.emplace_back(static_cast<double>(step), v.first);
  return out;
}

std::vector<ChartSeries> PerRank(const v1::MetricsResponse& m, double (*field)(const v1::MetricsRow&),
                                 const std::string& prefix = "rank ") {
  std::vector<ChartSeries> out;
  for (const auto& r : m.ranks()) {
    ChartSeries s{prefix + std::to_string(r.rank()), {}};
    for (const auto& row : r.rows()) s.points.emplace_back(static_cast<double>(row.step()), field(row));
    out.push_back(std::move(s));
  }
  return out;
}

double StepMs(const v1::MetricsRow& r) { return r.step_ms(); }
double Loss(const v1::MetricsRow& r) { return r.loss(); }

struct Chart {
  std::string caption;  // what the Markdown form says instead of the picture
  ChartSpec spec;
};

// The report's charts: what the curves measured.
std::vector<Chart> Charts(const SessionReport& r) {
  std::vector<Chart> out;
  const bool tokens = r.score.verification().unit() == "tokens";
  const std::string unit = tokens ? "tokens/s" : "samples/s";
  out.reserve(4);  // no reallocation: each chart's reference is used before the next is added
  // A chart of steps on x.
  auto by_step = [&out](const std::string& caption, const std::string& title, bool from_zero) -> ChartSpec& {
    out.push_back(Chart{caption, {}});
    ChartSpec& c = out.back().spec;
    c.title = title;
    c.x_label = "step";
    c.y_from_zero = from_zero;
    return c;
  };
  if (r.main && r.main->ranks_size() > 0) {
    ChartSpec& tput =
        by_step("the job's " + unit + " by step in the drill's run, against the healthy baseline",
                "Throughput during the drill (" + unit + ", the job)", true);
    tput.series.push_back({"drill run", JobRateByStep(*r.main, tokens)});
    const double base =
        tokens ? r.status.baseline().tokens_per_s() : r.status.baseline().throughput_samples_per_s();
    if (base > 0) {
      tput.reference = base;
      tput.reference_label = "healthy baseline " + Fixed(base, 0);
    }
    by_step("each rank's step time by step in the drill's run", "Step time per rank during the drill (ms)",
            true)
        .series = PerRank(*r.main, &StepMs);
    ChartSpec& loss =
        by_step("the loss by step, the drill's run beside the healthy baseline's", "Loss", false);
    if (r.baseline && r.baseline->ranks_size() > 0)
      loss.series.push_back({"baseline rank 0", PerRank(*r.baseline, &Loss).front().points});
    loss.series.push_back({"drill rank 0", PerRank(*r.main, &Loss).front().points});
  }
  const auto& v = r.score.verification();
  if (v.pairs_size() > 0) {
    Chart pairs;
    pairs.caption = "verification: fixed / healthy throughput of each pair, against the floor";
    pairs.spec.title =
        "Verification pairs (fixed / healthy " + std::string(tokens ? "tokens" : "samples") + "/s)";
    pairs.spec.x_label = "pair";
    pairs.spec.bars = true;
    ChartSeries s{"fixed / healthy", {}};
    for (int i = 0; i < v.pairs_size(); ++i) s.points.emplace_back(i + 1, v.pairs(i).ratio());
    pairs.spec.series.push_back(std::move(s));
    if (v.throughput_ratio_min() > 0) {
      pairs.spec.reference = v.throughput_ratio_min();
      pairs.spec.reference_label = "floor " + Fixed(v.throughput_ratio_min(), 2);
    }
    out.push_back(std::move(pairs));
  }
  return out;
}

// The score's facts as rows: (item, points, max, why).
struct Facts {
  std::string title, session, scenario, state, verdict;
  std::vector<std::string> diagnoses;
  std::string fix;
  std::vector<std::array<std::string, 4>> items;
  std::vector<std::string> collateral;
  std::string review, answer, note;
  std::vector<std::pair<std::string, std::string>> verification;  // label, value
};

Facts FactsOf(const SessionReport& r) {
  Facts f;
  const auto& s = r.score;
  f.title = r.status.session().title().empty() ? s.scenario_id() : r.status.session().title();
  f.session = s.session_id();
  f.scenario = s.scenario_id();
  f.state = s.state().empty() ? r.status.session().state() : s.state();
  for (const auto& d : s.diagnoses())
    f.diagnoses.push_back("#" + std::to_string(d.number()) + " " + UtcText(d.unix_ms()) + ": " +
                          FindingsText(d.findings()) + (d.note().empty() ? "" : " (" + d.note() + ")"));
  f.fix = s.fix_applied() ? FixText(s.fix()) : "";
  if (!s.final()) {
    f.verdict = s.state() == "aborted"
                    ? "aborted before it was scored: it will not be scored"
                    : "not scored yet (" + (f.state.empty() ? std::string("in progress") : f.state) + ")";
    f.note = s.note().empty() || s.note() == "not scored yet"
                 ? "nothing here says whether any of it is right until the session is scored"
                 : s.note();
    return f;
  }
  f.verdict = std::to_string(s.total()) + " / " + std::to_string(s.max_total());
  for (const auto& it : s.items())
    f.items.push_back({it.name(), std::to_string(it.points()), std::to_string(it.max_points()), it.reason()});
  f.collateral.assign(s.collateral().begin(), s.collateral().end());
  if (s.needs_review()) f.review = s.note();
  if (s.answer_findings_size() > 0) {
    f.answer = FindingsText(s.answer_findings()) + (s.runbook().empty() ? "" : "; runbook: " + s.runbook());
  } else {
    f.note = s.note();
  }
  const auto& v = s.verification();
  if (v.done()) {
    f.verification.push_back({"result", v.passed() ? "passed" : "failed"});
    f.verification.push_back({"detail", v.detail()});
    if (v.throughput_ratio_min() > 0)
      f.verification.push_back({"throughput ratio", Fixed(v.throughput_ratio(), 3) + " (floor " +
                                                        Fixed(v.throughput_ratio_min(), 2) + ", median of " +
                                                        std::to_string(v.pairs_size()) + " pairs)"});
  }
  return f;
}

}  // namespace

StatusOr<SessionReport> GatherReport(DrillClient& client, const std::string& id) {
  SessionReport r;
  auto score = client.GetScore(id);
  if (!score.ok()) return score.status();
  r.score = *score;
  auto status = client.GetStatus(id);
  if (!status.ok()) return status.status();
  r.status = *status;
  for (const char* run : {"baseline", "main"}) {
    v1::GetMetricsRequest req;
    req.set_session_id(id);
    req.set_run(run);
    auto m = client.GetMetrics(req);
    if (m.ok()) {
      (std::string(run) == "main" ? r.main : r.baseline) = *m;
    } else if (r.curves_note.empty()) {
      r.curves_note = "no curves: " + m.status().message();
    }
  }
  r.generated_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  return r;
}

std::string ReportMarkdown(const SessionReport& r) {
  const Facts f = FactsOf(r);
  std::ostringstream o;
  o << "# " << f.title << "\n\nSession `" << f.session << "` (" << f.scenario << "), " << f.state
    << ". Report of " << UtcText(r.generated_unix_ms) << ".\n\n## Score\n\n"
    << f.verdict << "\n";
  if (!f.items.empty()) {
    o << "\n| item | points | max | why |\n|---|---|---|---|\n";
    for (const auto& it : f.items)
      o << "| " << it[0] << " | " << it[1] << " | " << it[2] << " | " << it[3] << " |\n";
  }
  for (const auto& c : f.collateral) o << "\nCollateral: " << c << "\n";
  if (!f.review.empty()) o << "\n**For review:** " << f.review << "\n";
  o << "\n## Diagnoses\n\n";
  if (f.diagnoses.empty()) o << "None submitted.\n";
  for (const auto& d : f.diagnoses) o << "- " << d << "\n";
  o << "\n## Fix\n\n" << (f.fix.empty() ? std::string("No fix applied.") : "`" + f.fix + "`") << "\n";
  if (!f.verification.empty()) {
    o << "\n## Verification\n\n";
    for (const auto& [k, v] : f.verification) o << "- " << k << ": " << v << "\n";
  }
  if (!f.answer.empty()) o << "\n## Answer\n\n" << f.answer << "\n";
  if (!f.note.empty()) o << "\n" << f.note << "\n";
  const auto charts = Charts(r);
  if (!charts.empty() || !r.curves_note.empty()) {
    o << "\n## Curves\n\n";
    for (const auto& c : charts) o << "- " << c.caption << " (charted in the HTML report: `-o FILE.html`)\n";
    if (!r.curves_note.empty()) o << r.curves_note << "\n";
  }
  return o.str();
}

std::string ReportHtml(const SessionReport& r) {
  const Facts f = FactsOf(r);
  auto h = EscapeHtml;
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << h(f.title) << ": "
    << h(f.session) << "</title><style>body{font:15px/1.45 system-ui,sans-serif;max-width:62rem;margin:2rem "
    << "auto;padding:0 1rem;color:#1d2330}table{border-collapse:collapse}td,th{border:1px solid #d9dde5;"
    << "padding:.25rem .6rem;text-align:left}th{color:#6b7385}.verdict{font-size:1.4rem;font-weight:700}"
    << ".review{color:#b45309}.muted{color:#6b7385}figure{margin:1rem "
       "0}figcaption{color:#6b7385;font-size:13px}"
    << "</style></head><body>\n";
  o << "<h1>" << h(f.title) << "</h1>\n<p class=\"muted\">Session <code>" << h(f.session) << "</code> ("
    << h(f.scenario) << "), " << h(f.state) << ". Report of " << UtcText(r.generated_unix_ms) << ".</p>\n";
  o << "<h2>Score</h2>\n<p class=\"verdict\">" << h(f.verdict) << "</p>\n";
  if (!f.items.empty()) {
    o << "<table><tr><th>item</th><th>points</th><th>max</th><th>why</th></tr>\n";
    for (const auto& it : f.items)
      o << "<tr><td>" << h(it[0]) << "</td><td>" << h(it[1]) << "</td><td>" << h(it[2]) << "</td><td>"
        << h(it[3]) << "</td></tr>\n";
    o << "</table>\n";
  }
  for (const auto& c : f.collateral) o << "<p>Collateral: " << h(c) << "</p>\n";
  if (!f.review.empty()) o << "<p class=\"review\"><b>For review:</b> " << h(f.review) << "</p>\n";
  o << "<h2>Diagnoses</h2>\n";
  if (f.diagnoses.empty()) o << "<p>None submitted.</p>\n";
  if (!f.diagnoses.empty()) {
    o << "<ul>\n";
    for (const auto& d : f.diagnoses) o << "<li>" << h(d) << "</li>\n";
    o << "</ul>\n";
  }
  o << "<h2>Fix</h2>\n<p>"
    << (f.fix.empty() ? std::string("No fix applied.") : "<code>" + h(f.fix) + "</code>") << "</p>\n";
  if (!f.verification.empty()) {
    o << "<h2>Verification</h2>\n<ul>\n";
    for (const auto& [k, v] : f.verification) o << "<li>" << h(k) << ": " << h(v) << "</li>\n";
    o << "</ul>\n";
  }
  if (!f.answer.empty()) o << "<h2>Answer</h2>\n<p>" << h(f.answer) << "</p>\n";
  if (!f.note.empty()) o << "<p class=\"muted\">" << h(f.note) << "</p>\n";
  const auto charts = Charts(r);
  if (!charts.empty() || !r.curves_note.empty()) o << "<h2>Curves</h2>\n";
  for (const auto& c : charts)
    o << "<figure>" << SvgChart(c.spec) << "<figcaption>" << h(c.caption) << "</figcaption></figure>\n";
  if (!r.curves_note.empty()) o << "<p class=\"muted\">" << h(r.curves_note) << "</p>\n";
  o << "</body></html>\n";
  return o.str();
}

}  // namespace firedrill::cli
