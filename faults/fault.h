// The fault interface. A fault kind says what it changes and on which seams
// (faults/seams.h): Apply makes the change, Recover takes it back, and both
// may be called again without effect. When a fault acts (from a step, until
// a step, flapping), which rank or host it hits and the bookkeeping of what
// is applied are decided once, in targeting.cc and runner.cc, never in a
// kind.
#pragma once

#include <string>

#include "common/status.h"
#include "faults/seams.h"

namespace firedrill::faults {

class Fault {
 public:
  virtual ~Fault() = default;
  virtual Status Apply(Seams& seams) = 0;
  virtual Status Recover(Seams& seams) = 0;
};

// What Apply returns when the process lacks a seam the kind needs.
inline Status MissingSeam(const std::string& kind, const std::string& seam) {
  return FailedPrecondition(kind + " acts on the " + seam + " seam, which this process does not offer");
}

}  // namespace firedrill::faults
