#include "faults/tiny_buckets.h"

#include <string>

namespace firedrill::faults {

Status ValidateTinyBuckets(const v1::FaultSpec& spec) {
  const auto& p = spec.tiny_buckets();
  if (!(p.bucket_mb() > 0 && p.bucket_mb() <= 1)) {
    return InvalidArgument("params.bucket_mb must be in (0, 1] (a tiny bucket), got " + std::to_string(p.bucket_mb()));
  }
  if (!(p.first_bucket_mb() >= 0 && p.first_bucket_mb() <= 1))
    return InvalidArgument("params.first_bucket_mb must be in [0, 1] (0 = leave the job's first bucket, as PyTorch does)");
  return Status::Ok();
}

void ApplyTinyBuckets(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  const auto& p = fault.tiny_buckets();
  job->mutable_comm()->set_bucket_mb(p.bucket_mb());
  // DDP's first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB) does not follow
  // bucket_cap_mb: a tiny cap leaves it alone unless the fault says otherwise,
  // so restoring the cap restores the job.
  if (p.first_bucket_mb() > 0) job->mutable_comm()->set_first_bucket_mb(p.first_bucket_mb());
  job->mutable_comm()->set_flat_allreduce(false);
}

}  // namespace firedrill::faults
