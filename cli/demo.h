// `firedrill demo`: a whole drill with the CLI playing the learner. It reads
// only what a learner can read (status telemetry), never the answer key.
#pragma once

#include <string>

#include "cli/commands.h"

namespace firedrill::cli {

int RunDemo(CliContext& ctx, const std::string& scenario, int64_t seed);

}  // namespace firedrill::cli
