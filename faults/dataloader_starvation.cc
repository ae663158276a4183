#include "faults/dataloader_starvation.h"

#include <string>

namespace firedrill::faults {

Status DataLoaderStarvation::Apply(Seams& s) {
  if (!s.data) return MissingSeam("dataloader_starvation", "data");
  s.data->AddReadLatency(id_, latency_ms_);
  return Status::Ok();
}

Status DataLoaderStarvation::Recover(Seams& s) {
  if (s.data) s.data->Restore(id_);
  return Status::Ok();
}

Status ValidateDataLoaderStarvation(const v1::FaultSpec& spec) {
  const auto& p = spec.dataloader_starvation();
  if (!(p.sample_latency_ms() > 0 && p.sample_latency_ms() <= 1000)) {
    return InvalidArgument("params.sample_latency_ms must be in (0, 1000], got " +
                           std::to_string(p.sample_latency_ms()));
  }
  if (p.num_workers() < 0) return InvalidArgument("params.num_workers must be >= 0 (0 = the job's)");
  if (p.prefetch_depth() < 0) return InvalidArgument("params.prefetch_depth must be >= 0 (0 = the job's)");
  return Status::Ok();
}

void ApplyDataLoaderStarvation(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  const auto& p = fault.dataloader_starvation();
  if (p.num_workers() > 0) job->mutable_data()->set_num_workers(p.num_workers());
  if (p.prefetch_depth() > 0) job->mutable_data()->set_prefetch_depth(p.prefetch_depth());
}

}  // namespace firedrill::faults
