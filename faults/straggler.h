// straggler: the host computes slower. After each forward and backward pass
// the rank sleeps (slowdown - 1) x the phase's measured time, so the rank's
// compute really takes `slowdown` times as long and its peers really wait for
// it in the next collective.
#pragma once

#include "faults/fault.h"

namespace firedrill::faults {

class Straggler : public Fault {
 public:
  Straggler(double slowdown, Env& env) : slowdown_(slowdown), env_(env) {}
  void AfterCompute(const ComputeInfo& info) override;

 private:
  double slowdown_;
  Env& env_;
};

Status ValidateStraggler(const v1::FaultSpec& spec);

}  // namespace firedrill::faults
