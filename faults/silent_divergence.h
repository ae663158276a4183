// silent_divergence: silent data corruption on one host. After the trigger
// step one bit of one parameter element flips in that rank's copy of the
// model, as memory or a compute unit that returns a wrong bit does, with no
// error anywhere. Data-parallel training all-reduces gradients, never
// parameters, so nothing brings the replica back: the same averaged update
// lands on every rank, that one element stays different on this rank for
// the rest of the run, its forward (and loss) differ a little, and its
// checkpoint shard holds the wrong value. The loss keeps falling. Only
// comparing the replicas shows it (`firedrill probe checksum`, as
// Megatron-LM's check_param_hashes_across_dp_replicas). A host fault: the
// part is bad, so a replaced host is healthy, but the wrong bit stays in the
// weights and in the checkpoint shards it already reached. A job that
// starts (or resumes) broadcasts rank 0's weights over the others', as DDP
// does when it wraps the model: that heals a corrupt replica on any other
// rank and spreads one on rank 0. The flip itself waits for the broadcast.
#pragma once

#include <cstdint>

#include "faults/fault.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

class SilentDivergence : public Fault {
 public:
  SilentDivergence(FaultId id, const v1::SilentDivergenceParams& p) : id_(id), p_(p) {}
  Status Apply(Seams& s) override;
  Status Recover(Seams& s) override;

 private:
  FaultId id_;
  v1::SilentDivergenceParams p_;
};

Status ValidateSilentDivergence(const v1::FaultSpec& spec);

}  // namespace firedrill::faults
