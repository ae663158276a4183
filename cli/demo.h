// `firedrill demo`: a whole drill with the CLI playing the learner. It reads
// only what a learner can read (status telemetry), never the answer key.
#pragma once

#include <string>

#include "cli/commands.h"

namespace firedrill::cli {

int RunDemo(CliContext& ctx, const std::string& scenario, int64_t seed);

// The learner's reasoning: from per-rank telemetry, the rank whose busy time
// (step minus all-reduce wait) stands out, or -1 if none is >= min_ratio
// of the median. `why` gets the evidence in words.
int FindStraggler(const v1::SessionStatus& st, double min_ratio, std::string* why);

}  // namespace firedrill::cli
