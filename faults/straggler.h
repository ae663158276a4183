// straggler: the host computes slower. Its compute seam runs forward and
// backward `slowdown` times as long, so its peers really wait for it in the
// next collective.
#pragma once

#include "faults/fault.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

class Straggler : public Fault {
 public:
  Straggler(FaultId id, double slowdown) : id_(id), slowdown_(slowdown) {}
  Status Apply(Seams& s) override;
  Status Recover(Seams& s) override;

 private:
  FaultId id_;
  double slowdown_;
};

Status ValidateStraggler(const v1::FaultSpec& spec);

}  // namespace firedrill::faults
