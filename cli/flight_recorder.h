// `firedrill fr`: every rank's flight recorder (its most recent collectives,
// dumped on request even while the rank is stuck in one) and a cross-rank
// analysis that points at ranks whose collective disagrees with the others'.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "firedrill/v1/controller.pb.h"

namespace firedrill::cli {

// Ranks of a running job are a collective or two apart at any instant; only
// ranks that stay where they are this long count as stopped.
inline constexpr double kStuckAfterS = 5.0;

struct FrAnalysis {
  bool stuck = false;       // some rank has waited in a collective for kStuckAfterS or more
  bool desync = false;      // ranks are in different collectives
  std::vector<int> odd_ranks;  // the minority: ranks whose collective differs, or who did not answer
  std::string summary;      // the reasoning, in words
};

// Pure: what the records say. A rank's position is the oldest collective it
// started and has not finished, else its newest one. A desync is ranks at
// different positions that have all stayed there for kStuckAfterS.
FrAnalysis AnalyzeFlightRecords(const v1::FlightRecorderResponse& fr);

// Per rank, its newest `last` entries as a table, then the analysis.
void PrintFlightRecords(const v1::FlightRecorderResponse& fr, const FrAnalysis& a, int last, std::ostream& out);

}  // namespace firedrill::cli
