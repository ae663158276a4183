// checkpoint_load: the job's resume reads a partitioned checkpoint (ZeRO-1,
// format 2) rank by rank: every rank takes the shard file of its own rank
// number as its 1/world of the optimiser state, as DeepSpeed's ZeRO loader
// does without a universal checkpoint (and as an FSDP job that saved
// SHARDED_STATE_DICT files and loads them per rank does). At the world
// size the checkpoint was written at, that is exact and nothing shows. At
// another world size the partitions no longer line up and the trainer
// refuses the load (agent/trainer.cc Resume). Only a restart on fewer (or
// more) hosts shows it, so a scenario pairs it with a host that stays down
// (rank_crash stays_down) and an elastic launcher that goes on without it
// (job.elastic.min_nodes). The overlay sets checkpoint.load; the remedy is
// the loader that reshards (checkpoint.load: resharded, what
// torch.distributed.checkpoint's load plan does from the metadata file).
#pragma once

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

Status ValidateCheckpointLoad(const v1::FaultSpec& spec);
void ApplyCheckpointLoad(const v1::ResolvedFault& fault, v1::JobSpec* job);

}  // namespace firedrill::faults
