// The learner's reasoning about a slow rank, from per-rank telemetry only
// (status rows): the demo, the autopilot and the tests share it.
#pragma once

#include <string>

#include "firedrill/v1/controller.pb.h"

namespace firedrill::analysis {

// A rank's busy time over its window: the step less its exposed all-reduce
// wait and its checkpoint writes (spread over the window). A rank that
// writes more of each checkpoint (rank 0 writes the manifest) is not
// computing slower. Never below 0. (controller::BusyMs of one step report
// keeps the write in; verification's stretch subtracts it there.)
double RankBusyMs(const v1::RankStatus& r);

// The rank whose busy time stands out, or -1 if none is >= min_ratio of the
// median. `why` gets the evidence in words.
int FindStraggler(const v1::SessionStatus& st, double min_ratio, std::string* why);

}  // namespace firedrill::analysis
