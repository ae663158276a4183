#include "faults/straggler.h"

namespace firedrill::faults {

Status Straggler::Apply(Seams& s) {
  if (!s.compute) return MissingSeam("straggler", "compute");
  s.compute->Slow(id_, slowdown_);
  return Status::Ok();
}

Status Straggler::Recover(Seams& s) {
  if (s.compute) s.compute->Restore(id_);
  return Status::Ok();
}

Status ValidateStraggler(const v1::FaultSpec& spec) {
  const double s = spec.straggler().slowdown();
  if (!(s > 1.0 && s <= 20.0)) {
    return InvalidArgument("params.slowdown must be in (1, 20], got " + std::to_string(s));
  }
  return Status::Ok();
}

}  // namespace firedrill::faults
