// corrupt_checkpoint: a host goes down and the checkpoint shards it wrote
// last are damaged on storage. At the trigger step this rank's shard in the
// newest `checkpoints` complete checkpoints is damaged as it lies on disk
// ("bit_rot": one bit flips at an offset drawn from the seed, as a disk or
// a controller returning a wrong bit does; "truncated": the file loses its
// tail, as a write-back cache that never reached the disk does when the
// host loses power), then the host crashes: its process dies at once,
// without a word (agent: SIGKILL of itself; ranks as threads: the run
// fails). Its peers fail in their next collective. An elastic launcher
// (job.elastic.max_restarts) restarts the job from `latest`, the newest
// checkpoint with a manifest, which is the damaged one: the resume refuses
// the shard (size or SHA-256 against the manifest) and every restart dies
// the same way. An event, not a condition: it happens in the drill's first
// run only (registry.h `once`); the damage stays on the job's storage.
#pragma once

#include "faults/fault.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

class CorruptCheckpoint : public Fault {
 public:
  CorruptCheckpoint(FaultId id, const v1::CorruptCheckpointParams& p, uint64_t seed) : id_(id), p_(p), seed_(seed) {}
  Status Apply(Seams& s) override;
  Status Recover(Seams& s) override;

 private:
  FaultId id_;
  v1::CorruptCheckpointParams p_;
  uint64_t seed_;
};

Status ValidateCorruptCheckpoint(const v1::FaultSpec& spec);

}  // namespace firedrill::faults
