// A team drill's milestones, computed from its shared timeline rather than
// typed by anyone (FireHydrant's started, detected, identified, mitigated,
// resolved), and the throughput the incident cost against the healthy
// baseline. Pure functions of what the controller recorded.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace firedrill::controller {

struct TimelineEntry {
  int64_t unix_ms = 0;
  std::string who;   // a participant's name, or "controller"
  std::string role;  // the role it acted in ("investigator"), "" for the controller
  // tool | note | update | proposal | diagnosis | fix | verification | hint | onset
  std::string kind;
  std::string text;
  bool correct = false;  // diagnosis: it matched the answer key (known once scored)
  bool passed = false;   // verification: it passed
};

// The answer's side: what the timeline is judged against.
struct IncidentFacts {
  int64_t onset_ms = 0;     // when the fault took hold
  std::string cause_class;  // "compute", "communication", ... ("" for no fault)
  std::vector<int> culprit_ranks;
};

struct Milestone {
  const char* name;     // started, detected, identified, mitigated, resolved
  int64_t unix_ms = 0;  // 0: not reached
  int entry = -1;       // the timeline entry that reached it (-1: none, or the onset)
};

// Milestones in order. Detected: the first note, status update, proposed or
// submitted diagnosis after the onset that names a symptom of the fault's
// class (its words, see SymptomWords) or a culprit rank ("rank 2"), or any
// diagnosis. Identified: the first submitted diagnosis that matched the key.
// Mitigated: the fix. Resolved: the first verification that passed.
std::vector<Milestone> ComputeMilestones(const std::vector<TimelineEntry>& timeline,
                                         const IncidentFacts& facts);

// The words that name a symptom of a cause class (lower case; matched where
// a word of the lower-cased note starts, and whole when three letters or
// fewer).
const std::vector<std::string>& SymptomWords(const std::string& cause_class);

// Throughput lost against the baseline over [from_ms, to_ms): the job's
// measured rate as (unix_ms, units/s) points, each holding until the next;
// a gap before the first point counts at that first rate.
struct Impact {
  double lost_units = 0;    // samples or tokens the job did not process
  double lost_percent = 0;  // of what the baseline would have done in the whole session
  double duration_s = 0;    // from_ms to to_ms
  double mean_rate = 0;     // over the interval
};
Impact MeasureImpact(double baseline_rate, const std::vector<std::pair<int64_t, double>>& rate_points,
                     int64_t from_ms, int64_t to_ms, int64_t session_start_ms, int64_t session_end_ms);

}  // namespace firedrill::controller
