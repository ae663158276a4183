// `firedrill fr`: every rank's flight recorder (its most recent collectives,
// dumped on request even while the rank is stuck in one) and a cross-rank
// analysis that points at ranks whose collective disagrees with the others'.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "firedrill/v1/controller.pb.h"

namespace firedrill::cli {

struct FrAnalysis {
  bool stuck = false;       // some rank has a collective in flight
  bool desync = false;      // ranks are in different collectives
  std::vector<int> odd_ranks;  // the minority: ranks whose collective differs, or who did not answer
  std::string summary;      // the reasoning, in words
};

// Pure: what the records say. A rank's position is the oldest collective it
// started and has not finished, else its newest one.
FrAnalysis AnalyzeFlightRecords(const v1::FlightRecorderResponse& fr);

// Per rank, its newest `last` entries as a table, then the analysis.
void PrintFlightRecords(const v1::FlightRecorderResponse& fr, const FrAnalysis& a, int last, std::ostream& out);

}  // namespace firedrill::cli
