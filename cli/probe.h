// `firedrill probe`: nccl-tests-style sweeps of the job's collectives and a
// point-to-point bandwidth matrix, measured by the ranks between two
// training steps and printed the way all_reduce_perf and
// p2pBandwidthLatencyTest print theirs.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "firedrill/v1/controller.pb.h"

namespace firedrill::cli {

// "8", "64K", "16M", "1G" (powers of 1024, as nccl-tests' -b/-e take them).
StatusOr<int64_t> ParseSize(const std::string& text);

// The sweep table (header, one row per size, the footer with the out of
// bounds count and the average bus bandwidth) or the p2p matrix.
void PrintProbe(const v1::RunProbeResponse& r, std::ostream& out);

struct P2pAnalysis {
  double median_gbps = 0;
  // The reference for "slow": with one bad rank of n, 2(n-1) of the n(n-1)
  // pairs involve it (half of them at n = 4), so the median is no reference;
  // the upper quartile is a healthy pair for n >= 3.
  double upper_quartile_gbps = 0;
  int slow_src = -1, slow_dst = -1;  // the slowest pair
  double slow_gbps = 0;
  // Ranks every one of whose pairs, sent or received, runs below half the
  // upper quartile: one host's link rather than the fabric.
  std::vector<int> slow_ranks;
};
P2pAnalysis AnalyzeP2p(const v1::RunProbeResponse& r);

}  // namespace firedrill::cli
