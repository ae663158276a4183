#include "controller/exam/exam_result.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "common/svg_chart.h"
#include "common/text.h"
#include "controller/exam/json_read.h"
#include "controller/exam/signing.h"
#include "scenario/exam_file.h"

namespace firedrill::controller {

namespace {

using json = nlohmann::json;
using namespace json_read;  // NOLINT: readers that never throw

// A protobuf message as JSON with its proto field names and every field,
// so that a reader sees `passed: false` rather than nothing.
json ProtoJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  std::string text;
  const auto st = google::protobuf::util::MessageToJsonString(m, &text, opts);
  json j = st.ok() ? json::parse(text, nullptr, /*allow_exceptions=*/false) : json();
  if (!st.ok() || j.is_discarded()) return json{{"unreadable", "this record could not be written as JSON"}};
  return j;
}

std::string Percent(double p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", p);
  return buf;
}

}  // namespace

json ExamResult(const v1::ExamSpec& exam, const SittingFacts& facts, const std::vector<ItemOutcome>& items,
                const std::vector<Rescore>& rescores) {
  // Each item's rescores in time order (the latest counts); a rescore of an
  // item the exam does not have is the caller's error and counts nowhere.
  std::vector<Rescore> ordered = rescores;
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const Rescore& a, const Rescore& b) { return a.unix_ms < b.unix_ms; });
  std::map<int, std::vector<const Rescore*>> rescored;
  for (const auto& r : ordered) rescored[r.item].push_back(&r);
  json out_items = json::array();
  int total = 0, max_total = 0;
  for (int i = 0; i < exam.items_size(); ++i) {
    const int weight = scenario::ItemPoints(exam.items(i));
    max_total += weight;
    const ItemOutcome* o = nullptr;
    for (const auto& it : items)
      if (it.index == i) o = &it;
    json item = {{"item", i + 1},
                 {"weight", weight},
                 {"points", 0},
                 {"flags", json::array()},
                 {"checks", json::array()},
                 {"diagnoses", json::array()},
                 {"timeline", json::array()}};
    item["scenario"] = o ? o->scenario_id : "";
    item["title"] = o ? o->title : "";
    item["session"] = o ? o->session_id : "";
    item["state"] = o ? o->state : "not started";
    int points = 0;
    if (o && o->score && o->score->max_total() > 0) {
      const v1::ScoreReport& s = *o->score;
      points = static_cast<int>(std::lround(static_cast<double>(weight) * s.total() / s.max_total()));
      points = std::clamp(points, 0, weight);
      item["session_score"] = {{"total", s.total()}, {"max", s.max_total()}};
      for (const auto& c : s.items())
        item["checks"].push_back(
            {{"check", c.name()}, {"points", c.points()}, {"max", c.max_points()}, {"reason", c.reason()}});
      for (const auto& d : s.diagnoses()) item["diagnoses"].push_back(ProtoJson(d));
      if (s.fix_applied()) item["fix"] = ProtoJson(s.fix());
      item["verification"] = ProtoJson(s.verification());
      item["answer"] = {{"cause", s.answer_cause()},
                        {"culprit_ranks", json(std::vector<int>(s.answer_culprit_ranks().begin(),
                                                                s.answer_culprit_ranks().end()))}};
      item["collateral"] = json(std::vector<std::string>(s.collateral().begin(), s.collateral().end()));
      if (s.needs_review())
        item["flags"].push_back(s.note().empty() ? "an instructor should look" : s.note());
    }
    if (o)
      for (const auto& e : o->events)
        item["timeline"].push_back(
            {{"unix_ms", e.unix_ms()}, {"kind", e.kind()}, {"rank", e.rank()}, {"message", e.message()}});
    item["scored_points"] = points;
    if (auto it = rescored.find(i); it != rescored.end()) {
      json list = json::array();
      for (const Rescore* r : it->second) {
        list.push_back(
            {{"points", r->points}, {"by", r->by}, {"reason", r->reason}, {"unix_ms", r->unix_ms}});
        points = std::clamp(r->points, 0, weight);
      }
      item["rescored"] = list;
    }
    item["points"] = points;
    total += points;
    out_items.push_back(item);
  }
  // Passed is decided in integers; the percent shown is rounded down, so it
  // never reads as the pass mark when the total falls short of it.
  const double percent = max_total > 0 ? std::floor(1000.0 * total / max_total) / 10 : 0.0;
  const bool passed = max_total > 0 && int64_t{total} * 100 >= int64_t{exam.pass_mark()} * max_total;
  return json{
      {"format", kResultFormat},
      {"exam",
       {{"id", exam.id()},
        {"title", exam.title()},
        {"pass_mark", exam.pass_mark()},
        {"points", max_total},
        {"time_limit_min", exam.time_limit_min()}}},
      {"candidate", facts.candidate},
      {"sitting", facts.sitting},
      {"started_unix_ms", facts.started_unix_ms},
      {"ended_unix_ms", facts.ended_unix_ms},
      {"ended_by", facts.ended_by},
      {"items", out_items},
      {"total", total},
      {"max", max_total},
      {"percent", percent},
      {"passed", passed},
      {"audit", {{"scope", facts.audit_scope}, {"records", facts.audit.count}, {"head", facts.audit.hash}}}};
}

namespace {

std::string FindingsText(const json& d) {
  std::string out;
  for (const auto& f : List(d, "findings")) {
    out += (out.empty() ? "" : "; ") + Str(f, "cause");
    if (!List(f, "culprit_ranks").empty()) out += " on ranks " + List(f, "culprit_ranks").dump();
  }
  return out.empty() ? "(none)" : out;
}

std::string FixText(const json& item) {
  const json& f = Field(item, "fix");
  if (!f.is_object()) return "no fix applied";
  std::string out;
  if (Bool(f, "no_change")) out = "no change";
  for (const auto& s : List(f, "settings"))
    out += (out.empty() ? "" : ", ") + Str(s, "key") + "=" + Str(s, "value");
  if (!List(f, "replace_host_ranks").empty())
    out += (out.empty() ? "" : ", ") + std::string("hosts of ranks ") + List(f, "replace_host_ranks").dump() +
           " replaced";
  return out.empty() ? "(empty)" : out;
}

std::string VerificationText(const json& item) {
  const json& v = Field(item, "verification");
  if (!Bool(v, "done")) return "not verified";
  return std::string(Bool(v, "passed") ? "passed" : "failed") + ": " + Str(v, "detail");
}

std::string Headline(const json& r) {
  std::ostringstream o;
  o << Int(r, "total") << " of " << Int(r, "max") << " points (" << Percent(Num(r, "percent"))
    << "): " << (Bool(r, "passed") ? "PASS" : "FAIL") << " (pass mark " << Int(Field(r, "exam"), "pass_mark")
    << "%)";
  return o.str();
}

}  // namespace

std::string ResultMarkdown(const json& r) {
  std::ostringstream o;
  const json& exam = Field(r, "exam");
  o << "# Exam result: " << EscapeMarkdown(Str(exam, "title")) << " (" << EscapeMarkdown(Str(exam, "id"))
    << ")\n\n";
  o << "Candidate " << EscapeMarkdown(Str(r, "candidate")) << ", sitting " << Int(r, "sitting")
    << "; started " << UtcText(Int(r, "started_unix_ms")) << ", ended " << UtcText(Int(r, "ended_unix_ms"))
    << " (" << EscapeMarkdown(Str(r, "ended_by")) << ").\n\n";
  o << "**" << Headline(r) << "**\n\n";
  o << "| item | scenario | points | of | state |\n|---|---|---|---|---|\n";
  for (const auto& it : List(r, "items"))
    o << "| " << Int(it, "item") << " | " << EscapeMarkdown(Str(it, "scenario")) << " | " << Int(it, "points")
      << " | " << Int(it, "weight") << " | " << EscapeMarkdown(Str(it, "state")) << " |\n";
  for (const auto& it : List(r, "items")) {
    o << "\n## Item " << Int(it, "item") << ": " << EscapeMarkdown(Str(it, "title")) << " ("
      << EscapeMarkdown(Str(it, "scenario")) << ")\n\n";
    o << Int(it, "points") << " of " << Int(it, "weight") << " points";
    if (Field(it, "session_score").is_object())
      o << " (session " << EscapeMarkdown(Str(it, "session")) << ": "
        << Int(Field(it, "session_score"), "total") << "/" << Int(Field(it, "session_score"), "max") << ")";
    o << ".\n\n";
    if (!List(it, "checks").empty()) {
      o << "| check | points | of | why |\n|---|---|---|---|\n";
      for (const auto& c : List(it, "checks"))
        o << "| " << EscapeMarkdown(Str(c, "check")) << " | " << Int(c, "points") << " | " << Int(c, "max")
          << " | " << EscapeMarkdown(Str(c, "reason")) << " |\n";
      o << "\n";
    }
    if (!List(it, "diagnoses").empty()) {
      o << "Diagnoses, every revision:\n\n";
      for (const auto& d : List(it, "diagnoses"))
        o << "- #" << Int(d, "number") << " at " << UtcText(Int(d, "unix_ms")) << ": "
          << EscapeMarkdown(FindingsText(d))
          << (Str(d, "note").empty() ? "" : "; evidence: " + EscapeMarkdown(Str(d, "note"))) << "\n";
      o << "\n";
    }
    o << "Fix: " << EscapeMarkdown(FixText(it))
      << ".\n\nVerification: " << EscapeMarkdown(VerificationText(it)) << "\n";
    for (const auto& f : List(it, "flags")) o << "\n**For review:** " << EscapeMarkdown(Text(f)) << "\n";
    for (const auto& rs : List(it, "rescored"))
      o << "\n**Rescored** to " << Int(rs, "points") << " by " << EscapeMarkdown(Str(rs, "by")) << " at "
        << UtcText(Int(rs, "unix_ms")) << ": " << EscapeMarkdown(Str(rs, "reason")) << " (scored "
        << Int(it, "scored_points") << ")\n";
    if (!List(it, "timeline").empty()) {
      o << "\nTimeline:\n\n";
      for (const auto& e : List(it, "timeline"))
        o << "- " << UtcText(Int(e, "unix_ms")) << " " << EscapeMarkdown(Str(e, "kind")) << ": "
          << EscapeMarkdown(Str(e, "message")) << "\n";
    }
  }
  o << "\nAudit trail: " << Int(Field(r, "audit"), "records") << " records, head "
    << EscapeMarkdown(Str(Field(r, "audit"), "head")) << ".\n";
  return o.str();
}

std::string ResultHtml(const json& r) {
  std::ostringstream o;
  const json& exam = Field(r, "exam");
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    << "<title>" << EscapeHtml(Str(r, "candidate")) << ": " << EscapeHtml(Str(exam, "title")) << "</title>"
    << "<style>body{font:15px/1.45 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 "
       "1rem;color:#222}"
    << "table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.2rem .5rem;"
    << "text-align:left;vertical-align:top}.pass{color:#0a6b2d}.fail{color:#a11}.flag{background:#fff3cd;"
    << "padding:.3rem .5rem}code{font-size:90%}</style></head><body>\n";
  o << "<h1>Exam result: " << EscapeHtml(Str(exam, "title")) << " <small>(" << EscapeHtml(Str(exam, "id"))
    << ")</small></h1>\n";
  o << "<p>Candidate <b>" << EscapeHtml(Str(r, "candidate")) << "</b>, sitting " << Int(r, "sitting")
    << "; started " << UtcText(Int(r, "started_unix_ms")) << ", ended " << UtcText(Int(r, "ended_unix_ms"))
    << " (" << EscapeHtml(Str(r, "ended_by")) << ").</p>\n";
  o << "<p class=\"" << (Bool(r, "passed") ? "pass" : "fail") << "\"><b>" << EscapeHtml(Headline(r))
    << "</b></p>\n<table><tr><th>item</th><th>scenario</th><th>points</th><th>of</th><th>state</th></tr>\n";
  for (const auto& it : List(r, "items"))
    o << "<tr><td>" << Int(it, "item") << "</td><td>" << EscapeHtml(Str(it, "scenario")) << "</td><td>"
      << Int(it, "points") << "</td><td>" << Int(it, "weight") << "</td><td>" << EscapeHtml(Str(it, "state"))
      << "</td></tr>\n";
  o << "</table>\n";
  {
    // Points against weight per item, as bars.
    ChartSpec chart;
    chart.title = "Points per item";
    chart.x_label = "item";
    chart.bars = true;
    ChartSeries got{"points", {}}, of{"of", {}};
    for (const auto& it : List(r, "items")) {
      got.points.emplace_back(static_cast<double>(Int(it, "item")), static_cast<double>(Int(it, "points")));
      of.points.emplace_back(static_cast<double>(Int(it, "item")), static_cast<double>(Int(it, "weight")));
    }
    chart.series = {std::move(got), std::move(of)};
    if (!List(r, "items").empty()) o << "<figure>" << SvgChart(chart) << "</figure>\n";
  }
  for (const auto& it : List(r, "items")) {
    o << "<h2>Item " << Int(it, "item") << ": " << EscapeHtml(Str(it, "title")) << " <small>("
      << EscapeHtml(Str(it, "scenario")) << ")</small></h2>\n<p>" << Int(it, "points") << " of "
      << Int(it, "weight") << " points";
    if (Field(it, "session_score").is_object())
      o << " (session <code>" << EscapeHtml(Str(it, "session"))
        << "</code>: " << Int(Field(it, "session_score"), "total") << "/"
        << Int(Field(it, "session_score"), "max") << ")";
    o << ".</p>\n";
    if (!List(it, "checks").empty()) {
      o << "<table><tr><th>check</th><th>points</th><th>of</th><th>why</th></tr>\n";
      for (const auto& c : List(it, "checks"))
        o << "<tr><td>" << EscapeHtml(Str(c, "check")) << "</td><td>" << Int(c, "points") << "</td><td>"
          << Int(c, "max") << "</td><td>" << EscapeHtml(Str(c, "reason")) << "</td></tr>\n";
      o << "</table>\n";
    }
    if (!List(it, "diagnoses").empty()) {
      o << "<p>Diagnoses, every revision:</p><ul>\n";
      for (const auto& d : List(it, "diagnoses"))
        o << "<li>#" << Int(d, "number") << " at " << UtcText(Int(d, "unix_ms")) << ": "
          << EscapeHtml(FindingsText(d))
          << (Str(d, "note").empty() ? "" : "; evidence: " + EscapeHtml(Str(d, "note"))) << "</li>\n";
      o << "</ul>\n";
    }
    o << "<p>Fix: " << EscapeHtml(FixText(it))
      << ".</p>\n<p>Verification: " << EscapeHtml(VerificationText(it)) << "</p>\n";
    for (const auto& f : List(it, "flags"))
      o << "<p class=\"flag\">For review: " << EscapeHtml(Text(f)) << "</p>\n";
    for (const auto& rs : List(it, "rescored"))
      o << "<p class=\"flag\">Rescored to " << Int(rs, "points") << " by " << EscapeHtml(Str(rs, "by"))
        << " at " << UtcText(Int(rs, "unix_ms")) << ": " << EscapeHtml(Str(rs, "reason")) << " (scored "
        << Int(it, "scored_points") << ")</p>\n";
    if (!List(it, "timeline").empty()) {
      o << "<details><summary>Timeline</summary><ul>\n";
      for (const auto& e : List(it, "timeline"))
        o << "<li>" << UtcText(Int(e, "unix_ms")) << " " << EscapeHtml(Str(e, "kind")) << ": "
          << EscapeHtml(Str(e, "message")) << "</li>\n";
      o << "</ul></details>\n";
    }
  }
  o << "<p>Audit trail: " << Int(Field(r, "audit"), "records") << " records, head <code>"
    << EscapeHtml(Str(Field(r, "audit"), "head")) << "</code>.</p>\n</body></html>\n";
  return o.str();
}

}  // namespace firedrill::controller
