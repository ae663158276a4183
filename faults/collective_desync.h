// collective_desync: the deploy shards a finite dataset across ranks without
// padding and without dropping the ragged last batch (data.drop_last off),
// and leaves the collective timeout at a long default. When the dataset does
// not divide evenly, some ranks run one more step per epoch than others: at
// the epoch's end they are still in the gradient all-reduce while the rest
// wait in the end-of-epoch barrier. Nothing errors until the timeout; with
// `comm_timeout_s` at 1800 (PyTorch's default) the job just hangs. A job
// overlay only: the hang itself is real collectives waiting on each other.
#pragma once

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

Status ValidateCollectiveDesync(const v1::FaultSpec& spec);
void ApplyCollectiveDesync(const v1::ResolvedFault& fault, v1::JobSpec* job);

}  // namespace firedrill::faults
