// What every rank's flight recorder says, across ranks: where each rank is
// (the oldest collective it started and has not finished, else its newest),
// whether ranks have stopped there, and which ranks disagree with the
// others. Pure; `firedrill fr`, the autopilot and the tests share it.
#pragma once

#include <string>
#include <vector>

#include "firedrill/v1/controller.pb.h"

namespace firedrill::analysis {

// Ranks of a running job are a collective or two apart at any instant; only
// ranks that stay where they are this long count as stopped.
inline constexpr double kStuckAfterS = 5.0;

struct FrAnalysis {
  bool stuck = false;       // some rank has waited in a collective for kStuckAfterS or more
  bool desync = false;      // ranks are in different collectives
  std::vector<int> odd_ranks;  // the minority: ranks whose collective differs, or who did not answer
  std::string summary;      // the reasoning, in words
};

// A desync is ranks at different positions that have all stayed there for
// kStuckAfterS.
FrAnalysis AnalyzeFlightRecords(const v1::FlightRecorderResponse& fr);

// How long collective `e` had been running when rank `r` dumped its record
// (0 if it had not started).
double AgeS(const v1::RankFlightRecord& r, const v1::CollectiveRecord& e);

}  // namespace firedrill::analysis
