// The controller's side of communication probes: the request's defaults and
// limits, and merging every rank's report into one nccl-tests-style result.
// Pure functions; the session manager sends and collects.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "firedrill/v1/controller.pb.h"

namespace firedrill::controller {

// Fills unset fields (sweeps 8 B..16 MiB, factor 2, 20 iterations after 5
// warm-up, as `all_reduce_perf -b 8 -e 16M -f 2 -n 20 -w 5`; p2p: 4 MiB
// messages) and checks the ranges; errors name the flag.
StatusOr<v1::ProbeSpec> NormalizeProbeSpec(const v1::ProbeSpec& spec);

// One report per rank, none with an error. Times are averaged over ranks (as
// nccl-tests' default -a 1), wrong elements summed; p2p pairs take the
// sender's time and the receiver's count of wrong elements.
// `parallel`: the job's model parallelism. In a tp x pp job the checksum
// probe compares each shard's replicas (the ranks of one data-parallel
// group hold the same shard): one row per shard and tensor, labelled with
// the shard's place, hashes only for the ranks that hold it.
StatusOr<v1::RunProbeResponse> MergeProbeReports(const v1::ProbeSpec& spec, int world,
                                                 const std::vector<v1::ProbeReport>& reports,
                                                 const v1::ParallelSpec& parallel = {});

}  // namespace firedrill::controller
