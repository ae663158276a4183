// What one rank puts in its checkpoint shard, and how it comes back, so that
// a resumed run is bitwise identical to one that never stopped:
//
//   tensor  model/<name>        every parameter, by its state_dict name
//   tensor  optim/<name>        optimiser state (momentum_buffer.i, exp_avg.i, exp_avg_sq.i, step)
//   tensor  rng/cpu             LibTorch's default CPU generator state
//   blob    step                optimiser steps completed ("120")
//   blob    loss_scaler         LossScaler::State::Serialize()
//   blob    data_cursor         DataCursor::Serialize() (next batch index + fingerprint)
//   blob    job                 the JobSpec in protobuf text form (for people; not read back)
//
// The collective part of a checkpoint (gathering shard digests, the
// manifest) lives in the trainer; this is the per-rank state only.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "agent/checkpoint.h"
#include "agent/data.h"
#include "common/restore_parts.h"
#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"


namespace firedrill::agent {

namespace comm {
class ProcessGroup;
}
class TrainModel;
class Optimizer;
class LossScaler;

// Identifies what a shard's tensors must fit: every parameter's name, shape
// and dtype, and the optimiser's kind. Precision, activation checkpointing,
// loader workers and the like may change across a resume; the model's shape
// and the optimiser may not. 16 hex digits, stable across builds.
std::string ConfigHash(const TrainModel& model, const std::string& optim_kind);

// Copies (never aliases) this rank's state into a shard; without the model
// where another rank writes the replicated parameters once (format 2).
ShardData CaptureTrainState(const TrainModel& model, const Optimizer& optim, const LossScaler& scaler,
                            const DataCursor& cursor, int64_t step, const v1::JobSpec& job, bool with_model = true);

struct RestoredState {
  int64_t step = 0;
  DataCursor cursor;
};

// Puts a shard's state back into the model, optimiser, scaler and the CPU
// generator. Checks every parameter is present with its shape and dtype
// before changing anything; errors name the entry ("model/h.0.attn.c_attn.weight:
// shape [96, 32] in the checkpoint, [192, 64] in this model"). `parts`
// (checkpoint.restore) leaves out what a partial resume does not load: the
// optimiser and scaler as constructed, the generator as it is, and a data
// cursor at the start of the dataset. The shard must hold all of it anyway.
StatusOr<RestoredState> RestoreTrainState(const ShardData& shard, TrainModel& model, Optimizer& optim,
                                          LossScaler& scaler, const RestoreParts& parts = {});

// Where and what a sharded checkpoint is.
struct CheckpointTarget {
  std::string root;  // checkpoint.dir: storage every rank shares
  int keep = 0;      // newest valid checkpoints kept; 0 = all
  int keep_period = 0;  // and every one whose step is a multiple of this; 0 = none
  int64_t steps = 0; // optimiser steps the checkpoint holds (its step-N)
  int rank = 0;
  int world_size = 1;
  std::string config_hash;
  // Format 2: where the tensors that are not every rank's own live (the
  // manifest's map; PlacePartitionedState). Empty: format 1.
  std::map<std::string, TensorPlacement> tensors;
};

// Collective: every rank writes its shard atomically under
// <root>/step-<steps>, then one small all-reduce tells every rank every
// shard's size and SHA-256 (and which ranks failed), so rank 0 can write the
// manifest last without re-reading the shards, and prune. A rank that could
// not write makes every rank return an error and no manifest is written.
Status SaveShardedCheckpoint(comm::ProcessGroup& pg, const CheckpointTarget& target, const ShardData& shard);

}  // namespace firedrill::agent
