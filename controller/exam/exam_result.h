// A candidate's exam result: the document that is signed (signing.h), and
// its Markdown and self-contained HTML renderings for people. Built from
// what the controller recorded (each item's final score report, the events,
// any rescore); it computes only the weighting and the pass mark.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "controller/exam/audit_chain.h"
#include "firedrill/v1/controller.pb.h"
#include "firedrill/v1/exam.pb.h"

namespace firedrill::controller {

struct ItemOutcome {
  int index = 0;            // 0-based, as in the exam file
  std::string scenario_id;  // the candidate's draw for a pool item
  std::string title;
  std::string session_id;                // empty: never started
  std::optional<v1::ScoreReport> score;  // the final report, once scored
  std::vector<v1::SessionEvent> events;  // the session's timeline
  std::string state;                     // "scored", "frozen at time-up", "not started"
};

struct Rescore {
  int item = 0;  // 0-based
  int points = 0;
  std::string by;
  std::string reason;
  int64_t unix_ms = 0;
};

struct SittingFacts {
  std::string candidate;
  int sitting = 1;  // 2 for the first retake, ...
  int64_t started_unix_ms = 0;
  int64_t ended_unix_ms = 0;
  std::string ended_by;     // "candidate", "time-up", "proctor"
  std::string audit_scope;  // which trail: the sitting's
  AuditHead audit;          // the trail's head when the result was made
};

// The result document. An item's points are its weight times the share of
// its session's points; the latest rescore of an item replaces them (both
// are kept, with who and why); points stay within 0 and the weight.
// Passed: total >= pass_mark percent of the exam's points, in integers.
nlohmann::json ExamResult(const v1::ExamSpec& exam, const SittingFacts& facts,
                          const std::vector<ItemOutcome>& items, const std::vector<Rescore>& rescores);

// Reports for people. Every string from the result is escaped for its
// format; the HTML page loads nothing from anywhere.
std::string ResultMarkdown(const nlohmann::json& result);
std::string ResultHtml(const nlohmann::json& result);

}  // namespace firedrill::controller
