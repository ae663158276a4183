// What a resume puts back from a checkpoint (job key checkpoint.restore):
// "all" (or "") or a comma-separated subset of
//   model  the parameters (always: a resume without them is a fresh start)
//   optim  the optimiser's state (moments, step counts) and the loss scale
//   rng    the random generator's state
//   data   the data loader's position (the next batch)
// The checkpoint holds all four whatever this says; only the load differs.
#pragma once

#include <string>

#include "common/status.h"

namespace firedrill {

struct RestoreParts {
  bool optim = true;
  bool rng = true;
  bool data = true;
  bool All() const { return optim && rng && data; }
  // "model,optim,rng,data" order, only the parts kept: "model,rng".
  std::string ToString() const;
  // The parts left as a fresh process has them, for people:
  // "optimiser state and loss scale, RNG, data position"; "" if none.
  std::string Missing() const;
};

// Errors name the part and list the valid ones.
StatusOr<RestoreParts> ParseRestoreParts(const std::string& text);

}  // namespace firedrill
