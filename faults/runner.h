// The trainer's single entry to faults: the faults this rank carries, each
// applied while its schedule says it acts and recovered when it stops. The
// trainer calls At() at the start of every step (and once before it builds
// its process group, so that a fault of the environment is in place when the
// communication library reads it) and RecoverAll() when the run ends. With
// no faults every call is one branch on an empty vector.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "faults/fault.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

// Whether `f` acts at `step`: from its trigger step, before its until step
// (0: no end), and, when it flaps, in the "on" part of each on + off period
// counted from the trigger step.
bool ActiveAt(const v1::ResolvedFault& f, int64_t step);

class FaultRunner {
 public:
  // Builds the kinds through the registry; unknown kinds are an error.
  // Kinds that act only through the deployed configuration (the controller
  // applies it; registry.h) have nothing to do here and are skipped.
  static StatusOr<std::unique_ptr<FaultRunner>> Create(const std::vector<v1::ResolvedFault>& faults);

  bool empty() const { return entries_.empty(); }
  // Applies the faults that act at `step` and are not applied yet, and
  // recovers those applied that no longer act. An error names the fault.
  Status At(int64_t step, Seams& seams);
  // Recovers everything still applied (the end of a run, or an error).
  void RecoverAll(Seams& seams);
  // How many faults are applied now.
  int applied() const;

 private:
  struct Entry {
    v1::ResolvedFault spec;
    std::unique_ptr<Fault> fault;
    bool applied = false;
  };
  std::vector<Entry> entries_;
};

}  // namespace firedrill::faults
