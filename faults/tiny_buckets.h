// tiny_buckets: the deploy caps gradient buckets far below PyTorch's 25 MB,
// so backward launches many small all-reduces. Each pays the collective's
// fixed cost (a rendezvous of every rank, Gloo round trips), so gradient
// exchange becomes latency-bound and its tail no longer hides under backward.
// A job overlay only: the collectives are real; comm.bucket_mb=25 fixes it.
#pragma once

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

Status ValidateTinyBuckets(const v1::FaultSpec& spec);
void ApplyTinyBuckets(const v1::ResolvedFault& fault, v1::JobSpec* job);

}  // namespace firedrill::faults
