#include "faults/fp16_overflow.h"

#include <cmath>
#include <string>

namespace firedrill::faults {

Status ValidateFp16Overflow(const v1::FaultSpec& spec) {
  const std::string& mode = spec.fp16_overflow().loss_scale();
  if (mode == "dynamic") {
    if (spec.fp16_overflow().init_scale() != 0)
      return InvalidArgument(
          "params.init_scale is the static variant's: with loss_scale: dynamic the deploy "
          "starts from GradScaler's own 65536; leave it out");
    return Status::Ok();
  }
  if (!mode.empty() && mode != "static")
    return InvalidArgument(
        "params.loss_scale must be \"static\" (the default: a static scale too high) or "
        "\"dynamic\" (GradScaler's defaults: an activation overflows), got \"" +
        mode + "\"");
  const double s = spec.fp16_overflow().init_scale();
  // An fp32 value (the scale is a float32 tensor in GradScaler).
  if (!(std::isfinite(s) && s >= kFp16OverflowMinScale && s <= 3.0e38)) {
    return InvalidArgument("params.init_scale must be a finite fp32 value >= 131072 (2^17: a scale no sane job "
                           "starts from), got " + std::to_string(s));
  }
  return Status::Ok();
}

void ApplyFp16Overflow(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  job->set_precision("fp16");
  v1::LossScaleSpec* ls = job->mutable_loss_scale();
  if (fault.fp16_overflow().loss_scale() == "dynamic") {
    // torch.cuda.amp.GradScaler(): what a migration guide says to turn on.
    ls->Clear();
    ls->set_mode("dynamic");
    return;
  }
  ls->set_mode("static");
  ls->set_init_scale(fault.fp16_overflow().init_scale());
}

}  // namespace firedrill::faults
