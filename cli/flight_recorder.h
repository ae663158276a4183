// `firedrill fr`: every rank's flight recorder (its most recent collectives,
// dumped on request even while the rank is stuck in one), then the
// cross-rank analysis (analysis/flight_records.h).
#pragma once

#include <ostream>

#include "analysis/flight_records.h"
#include "firedrill/v1/controller.pb.h"

namespace firedrill::cli {

// Per rank, its newest `last` entries as a table, then the analysis.
void PrintFlightRecords(const v1::FlightRecorderResponse& fr, const analysis::FrAnalysis& a, int last,
                        std::ostream& out);

}  // namespace firedrill::cli
