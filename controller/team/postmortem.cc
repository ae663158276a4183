#include "controller/team/postmortem.h"

#include <cstdio>
#include <sstream>

#include "common/svg_chart.h"
#include "common/text.h"

namespace firedrill::controller {

namespace {

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// "time to detect" and the others: from the start to each milestone.
std::vector<std::pair<std::string, std::string>> Durations(const std::vector<Milestone>& ms) {
  std::vector<std::pair<std::string, std::string>> out;
  if (ms.empty() || ms[0].unix_ms == 0) return out;
  static const char* kTo[] = {"", "detect", "identify", "mitigate", "resolve"};
  for (size_t i = 1; i < ms.size() && i < 5; ++i)
    out.emplace_back(std::string("time to ") + kTo[i],
                     ms[i].unix_ms == 0 ? "not reached" : DurationText(ms[i].unix_ms - ms[0].unix_ms));
  return out;
}

std::string ImpactText(const PostmortemInput& in) {
  std::ostringstream o;
  o << "The job ran at " << Fixed(in.impact.mean_rate, 0) << " " << in.unit << "/s for "
    << DurationText(static_cast<int64_t>(in.impact.duration_s * 1000)) << " against a healthy "
    << Fixed(in.baseline_rate, 0) << " " << in.unit << "/s: " << Fixed(in.impact.lost_units, 0) << " "
    << in.unit << " not processed, " << Fixed(in.impact.lost_percent, 1)
    << "% of what the healthy job would have done in the whole session.";
  return o.str();
}

std::string Who(const TimelineEntry& e) { return e.role.empty() ? e.who : e.who + " (" + e.role + ")"; }

const char* kTeamSections[] = {"What went well", "What went wrong", "Where we got lucky", "Action items"};

}  // namespace

std::string PostmortemMarkdown(const PostmortemInput& in) {
  auto md = EscapeMarkdown;
  std::ostringstream o;
  o << "# Postmortem: " << md(in.title) << "\n\n";
  o << "Drill " << md(in.scenario_id) << ", session " << md(in.session_id) << ", "
    << UtcText(in.session_start_ms) << " to " << UtcText(in.session_end_ms) << ".";
  if (!in.participants.empty()) {
    o << " Team:";
    for (size_t i = 0; i < in.participants.size(); ++i) o << (i ? ", " : " ") << md(in.participants[i]);
    o << ".";
  }
  o << "\n\n## Summary\n\n" << md(in.root_cause) << "\n\n## Impact\n\n" << md(ImpactText(in)) << "\n\n";
  o << "## Root cause and trigger\n\n" << md(in.root_cause) << "\n\nTrigger: " << md(in.trigger) << "\n\n";
  o << "## Detection\n\n";
  if (in.milestones.size() > 1 && in.milestones[1].entry >= 0) {
    const TimelineEntry& e = in.timeline[in.milestones[1].entry];
    o << "First named by " << md(Who(e)) << " at " << UtcText(e.unix_ms) << " (" << md(e.kind)
      << "): " << md(e.text) << "\n\n";
  } else {
    o << "Nothing on the timeline named a symptom.\n\n";
  }
  o << "## Resolution\n\n" << md(in.resolution) << "\n\n## Milestones\n\n| milestone | time |\n|---|---|\n";
  for (const auto& m : in.milestones) o << "| " << m.name << " | " << UtcText(m.unix_ms) << " |\n";
  o << "\n| measure | duration |\n|---|---|\n";
  for (const auto& [k, v] : Durations(in.milestones)) o << "| " << k << " | " << v << " |\n";
  o << "\n## Timeline\n\n";
  for (const auto& e : in.timeline)
    o << "- " << UtcText(e.unix_ms) << " " << md(Who(e)) << ", " << md(e.kind) << ": " << md(e.text) << "\n";
  for (const char* s : kTeamSections) o << "\n## " << s << "\n\n(for the team to write)\n";
  return o.str();
}

std::string PostmortemHtml(const PostmortemInput& in) {
  auto h = EscapeHtml;
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Postmortem: " << h(in.title)
    << "</title><style>body{font:15px/1.45 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 "
       "1rem;"
    << "color:#222}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2rem "
       ".5rem;text-align:left}"
    << ".todo{color:#777;font-style:italic}</style></head><body>\n";
  o << "<h1>Postmortem: " << h(in.title) << "</h1>\n<p>Drill " << h(in.scenario_id) << ", session <code>"
    << h(in.session_id) << "</code>, " << UtcText(in.session_start_ms) << " to " << UtcText(in.session_end_ms)
    << ".";
  if (!in.participants.empty()) {
    o << " Team:";
    for (size_t i = 0; i < in.participants.size(); ++i) o << (i ? ", " : " ") << h(in.participants[i]);
    o << ".";
  }
  o << "</p>\n<h2>Summary</h2>\n<p>" << h(in.root_cause) << "</p>\n<h2>Impact</h2>\n<p>" << h(ImpactText(in))
    << "</p>\n";
  if (!in.rate_points.empty()) {
    // The job's rate through the session against its healthy baseline,
    // minutes from the session's start.
    ChartSpec chart;
    chart.title = "The job's " + in.unit + "/s through the drill";
    chart.x_label = "minutes since the session started";
    ChartSeries job{"the job", {}};
    for (const auto& [ms, rate] : in.rate_points)
      job.points.emplace_back((ms - in.session_start_ms) / 60000.0, rate);
    chart.series.push_back(std::move(job));
    if (in.baseline_rate > 0) {
      chart.reference = in.baseline_rate;
      chart.reference_label = "healthy baseline";
    }
    chart.y_from_zero = true;
    o << "<figure>" << SvgChart(chart) << "</figure>\n";
  }
  o << "<h2>Root cause and trigger</h2>\n<p>" << h(in.root_cause) << "</p>\n<p>Trigger: " << h(in.trigger)
    << "</p>\n<h2>Detection</h2>\n<p>";
  if (in.milestones.size() > 1 && in.milestones[1].entry >= 0) {
    const TimelineEntry& e = in.timeline[in.milestones[1].entry];
    o << "First named by " << h(Who(e)) << " at " << UtcText(e.unix_ms) << " (" << h(e.kind)
      << "): " << h(e.text);
  } else {
    o << "Nothing on the timeline named a symptom.";
  }
  o << "</p>\n<h2>Resolution</h2>\n<p>" << h(in.resolution) << "</p>\n<h2>Milestones</h2>\n<table>"
    << "<tr><th>milestone</th><th>time</th></tr>\n";
  for (const auto& m : in.milestones)
    o << "<tr><td>" << m.name << "</td><td>" << UtcText(m.unix_ms) << "</td></tr>\n";
  o << "</table>\n<table><tr><th>measure</th><th>duration</th></tr>\n";
  for (const auto& [k, v] : Durations(in.milestones))
    o << "<tr><td>" << k << "</td><td>" << v << "</td></tr>\n";
  o << "</table>\n<h2>Timeline</h2>\n<ul>\n";
  for (const auto& e : in.timeline)
    o << "<li>" << UtcText(e.unix_ms) << " " << h(Who(e)) << ", " << h(e.kind) << ": " << h(e.text)
      << "</li>\n";
  o << "</ul>\n";
  for (const char* s : kTeamSections)
    o << "<h2>" << s << "</h2>\n<p class=\"todo\">(for the team to write)</p>\n";
  o << "</body></html>\n";
  return o.str();
}

}  // namespace firedrill::controller
