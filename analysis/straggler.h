// The learner's reasoning about a slow rank, from per-rank telemetry only
// (status rows): the demo, the autopilot and the tests share it.
#pragma once

#include <string>

#include "firedrill/v1/controller.pb.h"

namespace firedrill::analysis {

// The rank whose busy time (step minus all-reduce wait) stands out, or -1 if
// none is >= min_ratio of the median. `why` gets the evidence in words.
int FindStraggler(const v1::SessionStatus& st, double min_ratio, std::string* why);

}  // namespace firedrill::analysis
