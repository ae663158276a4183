#include "cli/flight_recorder.h"

#include <algorithm>

#include "cli/output.h"

namespace firedrill::cli {

using analysis::AgeS;

void PrintFlightRecords(const v1::FlightRecorderResponse& fr, const analysis::FrAnalysis& a, int last,
                        std::ostream& out) {
  for (const auto& r : fr.ranks()) {
    out << "rank " << r.rank() << " (" << r.host() << ")";
    if (!r.answered()) {
      out << ": no answer\n\n";
      continue;
    }
    out << ": " << r.entries_size() << " collectives recorded\n";
    Table t({"SEQ", "OP", "BYTES", "STEP", "TRANSPORT", "STATE", "TIME"});
    const int from = std::max(0, r.entries_size() - last);
    for (int i = from; i < r.entries_size(); ++i) {
      const auto& e = r.entries(i);
      std::string time;
      if (e.state() == "started") {
        time = "for " + Num(AgeS(r, e), 1) + " s";
      } else if (e.end_unix_ns() > e.start_unix_ns()) {
        time = Num((e.end_unix_ns() - e.start_unix_ns()) / 1e6, 2) + " ms";
      }
      t.Add({std::to_string(e.seq()), e.op(), Bytes(e.bytes()), std::to_string(e.step()), e.transport(),
             e.state(), time});
    }
    t.Print(out);
    for (int i = from; i < r.entries_size(); ++i)
      if (!r.entries(i).error().empty()) out << "  #" << r.entries(i).seq() << " error: " << r.entries(i).error() << "\n";
    out << "\n";
  }
  out << "analysis: " << a.summary << "\n";
}

}  // namespace firedrill::cli
