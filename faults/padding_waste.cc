#include "faults/padding_waste.h"

#include <string>

namespace firedrill::faults {

Status ValidatePaddingWaste(const v1::FaultSpec& spec) {
  if (spec.padding_waste().min_seq_len() < 0)
    return InvalidArgument("params.min_seq_len must be >= 0 (0 = the job's)");
  return Status::Ok();
}

void ApplyPaddingWaste(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  auto* d = job->mutable_data();
  d->set_variable_length(true);
  d->set_sampler("random");
  if (fault.padding_waste().min_seq_len() > 0) d->set_min_seq_len(fault.padding_waste().min_seq_len());
}

}  // namespace firedrill::faults
