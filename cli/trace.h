// `firedrill trace`: the job's per-step timelines from every rank merged into
// one Chrome trace (the JSON format Perfetto and chrome://tracing open, the
// same one torch.profiler exports): one process per rank, a "step" track,
// a "compute" track with data wait, forward, backward, the wait for the
// all-reduce, the optimiser and checkpoints, and a "comm" track with every
// gradient bucket's all-reduce (sequence number and bytes in its args).
#pragma once

#include <string>

#include "common/status.h"
#include "firedrill/v1/controller.pb.h"

namespace firedrill::cli {

// The trace as Chrome trace JSON ({"traceEvents": [...]}). Timestamps are
// microseconds since the earliest step in `trace`; ranks' clocks are their
// hosts' wall clocks (on one machine they agree).
std::string ChromeTraceJson(const v1::TraceResponse& trace);

// "A:B" (B exclusive) or "A:" (to the newest) into the request's range;
// "" = the last 20 steps. The message names the bad text.
firedrill::Status ParseStepRange(const std::string& text, v1::GetTraceRequest* req);

}  // namespace firedrill::cli
