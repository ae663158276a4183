#include "faults/lr_rule.h"

#include <string>

namespace firedrill::faults {

Status ValidateLrRule(const v1::FaultSpec& spec) {
  const auto& p = spec.lr_rule();
  if (p.rule() != "linear" && p.rule() != "sqrt")
    return InvalidArgument("params.rule must be \"linear\" or \"sqrt\" (the scaling rule the deploy applies), got \"" +
                           p.rule() + "\"");
  if (p.reference_global_batch() < 1)
    return InvalidArgument("params.reference_global_batch must be >= 1 (the global batch optim.lr was tuned at), got " +
                           std::to_string(p.reference_global_batch()));
  if (p.warmup_steps() < 0)
    return InvalidArgument("params.warmup_steps must be >= 0, got " + std::to_string(p.warmup_steps()));
  return Status::Ok();
}

void ApplyLrRule(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  const auto& p = fault.lr_rule();
  v1::OptimSpec* o = job->mutable_optim();
  o->set_lr_scaling(p.rule());
  o->set_reference_global_batch(p.reference_global_batch());
  o->set_warmup_steps(p.warmup_steps());
}

}  // namespace firedrill::faults
