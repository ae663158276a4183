// Two checkpoints of the same job, entry by entry: what the resume probe
// (firedrill probe resume) reads to say which state a save and resume did
// not carry through. Every shard of both is loaded as a resume would load
// it (size and SHA-256 against the manifest) and compared bitwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace firedrill::agent {

// One part of a shard's state (agent/train_state.h), over every rank.
struct PartDiff {
  std::string part;       // "model", "optim", "rng", "loss_scaler", "data_cursor", "step"
  int entries = 0;        // per rank (tensors of the part, or 1 for a blob)
  int differ = 0;         // entries that differ on at least one rank
  std::vector<int> ranks; // the ranks where any entry of the part differs
  double max_abs_diff = 0;  // over differing float tensors; 0 for blobs
  std::string a_value, b_value;  // blobs only, rank 0's (e.g. the data cursor), where they differ
  std::string first_differing;   // the first entry (by name) that differs
  int missing = 0;               // of `differ`, entries only one of the two holds (a fresh
                                 // optimiser has no state yet)
};

struct CheckpointDiff {
  int world_size = 0;
  std::vector<PartDiff> parts;  // in the order above
};

// The part a shard's entry belongs to: the prefix of a tensor's name
// ("model/fc1.weight": model), or a blob's name.
std::string PartOf(const std::string& name, bool tensor);
// The parts in the order they are reported.
const std::vector<std::string>& PartOrder();

// Both must be complete checkpoints of the same world size; an entry only
// one of them holds counts as differing (`missing`).
StatusOr<CheckpointDiff> DiffCheckpoints(const std::string& step_dir_a, const std::string& step_dir_b);

}  // namespace firedrill::agent
