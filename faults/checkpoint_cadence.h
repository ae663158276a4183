// checkpoint_cadence: the job checkpoints every `params.every` steps, a
// cadence out of proportion to what a checkpoint costs here and how often
// the job loses a host. The overlay sets checkpoint.every. Too often, and
// the synchronous writes (each rank's shard, fsync'd, then a barrier) take
// a large share of every step; too rarely, and a failure throws away most
// of an interval of training. A checkpoint costs what its writes measure:
// nothing is slowed, only the cadence changes. The drill's verification
// judges the expected goodput of the fixed cadence (VerifySpec.mtbf_s).
#pragma once

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

Status ValidateCheckpointCadence(const v1::FaultSpec& spec);
void ApplyCheckpointCadence(const v1::ResolvedFault& fault, v1::JobSpec* job);

}  // namespace firedrill::faults
