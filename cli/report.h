// `firedrill report SESSION`: one session's attempt as a document, from
// what the API gives the caller (the score as it may read it, the status,
// the runs' curves where the drill offers them): Markdown, or with
// `-o FILE.html` a self-contained HTML page with its charts inlined as SVG.
// It says nothing the score and status do not: a sealed score stays sealed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli/client.h"

namespace firedrill::cli {

struct SessionReport {
  v1::ScoreReport score;
  v1::SessionStatus status;
  std::optional<v1::MetricsResponse> baseline, main;  // absent: the drill offers no metrics
  std::string curves_note;                            // why there are no curves, if there are none
  int64_t generated_unix_ms = 0;
};

StatusOr<SessionReport> GatherReport(DrillClient& client, const std::string& session_id);
std::string ReportMarkdown(const SessionReport& r);
std::string ReportHtml(const SessionReport& r);

}  // namespace firedrill::cli
