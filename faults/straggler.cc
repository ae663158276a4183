#include "faults/straggler.h"

namespace firedrill::faults {

void Straggler::AfterCompute(const ComputeInfo& info) {
  if (info.phase == ComputePhase::kOptimizer) return;
  const double extra = (slowdown_ - 1.0) * static_cast<double>(info.elapsed.count());
  if (extra > 0) env_.SleepFor(Nanos(static_cast<int64_t>(extra)));
}

Status ValidateStraggler(const v1::FaultSpec& spec) {
  const double s = spec.straggler().slowdown();
  if (!(s > 1.0 && s <= 20.0)) {
    return InvalidArgument("params.slowdown must be in (1, 20], got " + std::to_string(s));
  }
  return Status::Ok();
}

}  // namespace firedrill::faults
