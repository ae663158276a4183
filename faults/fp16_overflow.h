// fp16_overflow: a mixed-precision migration turned fp16 on with a static
// loss scale far above what the gradients leave room for. The loss is
// multiplied by the scale before backward (GradScaler.scale), so every
// gradient that passes an fp16 boundary is `scale` times larger; above
// half's largest value (65504) it becomes inf, GradScaler's inf check finds
// it on every rank after the all-reduce, and the optimiser step is skipped.
// With a static scale nothing backs off, so every step is skipped: the loss
// stops moving, the skipped counter climbs with the step, throughput looks
// fine. A job overlay only: the overflow is the real fp16 rounding of
// agent/precision.h. Remedies: loss_scale.mode = dynamic (GradScaler backs
// off until the gradients fit), a sane static scale, or bf16 (fp32's
// exponent range, no scaling needed).
//
// The dynamic variant (params.loss_scale: dynamic): the deploy turns on
// GradScaler's defaults, and the gradients would fit; what does not is an
// activation. A layer whose input or output passes 65504 (raw features in
// a job that trains in fp32, data.feature_scale) becomes inf in
// the forward pass, before any scale applies: the loss is inf or NaN on
// every step, every step is skipped, and the scale halves on each one, to
// 0 after about 165 steps (GradScaler has no floor). Remedies: that layer
// in fp32 (model.keep_fp32, as autocast(enabled=False) or transformers'
// _keep_in_fp32_modules) or features the pipeline normalises.
#pragma once

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

// The smallest static scale the kind accepts: 2^17, twice GradScaler's
// default start (2^16), from which a dynamic scaler would back off.
inline constexpr double kFp16OverflowMinScale = 131072.0;

Status ValidateFp16Overflow(const v1::FaultSpec& spec);
void ApplyFp16Overflow(const v1::ResolvedFault& fault, v1::JobSpec* job);

}  // namespace firedrill::faults
