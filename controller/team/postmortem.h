// The postmortem of a team drill, in the shape of the Google SRE template:
// summary, impact (measured), root cause and trigger (from the answer key,
// now that the drill is scored), detection, resolution, the timeline, the
// milestone times, and the sections only the team can write, left empty.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "controller/team/milestones.h"

namespace firedrill::controller {

struct PostmortemInput {
  std::string title;  // the scenario's title
  std::string scenario_id;
  std::string session_id;
  std::vector<std::string> participants;  // "ada (commander)", ...
  std::string root_cause;                 // the cause and its meaning, from the answer key
  std::string trigger;                    // what set it off: the fault, where and when
  std::string resolution;                 // the fix as applied, and its verification
  std::string unit;                       // "samples" or "tokens"
  double baseline_rate = 0;               // healthy units/s, measured
  Impact impact;                          // onset to mitigation (or the end)
  // The job's rate (units/s) at each step's end (unix ms): the impact
  // chart of the HTML form.
  std::vector<std::pair<int64_t, double>> rate_points;
  int64_t session_start_ms = 0;
  int64_t session_end_ms = 0;
  std::vector<Milestone> milestones;
  std::vector<TimelineEntry> timeline;
};

std::string PostmortemMarkdown(const PostmortemInput& in);
std::string PostmortemHtml(const PostmortemInput& in);

}  // namespace firedrill::controller
