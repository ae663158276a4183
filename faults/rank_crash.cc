#include "faults/rank_crash.h"

namespace firedrill::faults {

std::string RankCrashReason(const v1::RankCrashParams& p) {
  if (p.event() == "kernel_panic") return "the host went down (kernel panic)";
  if (p.event() == "drained") return "the host went down (drained by the scheduler)";
  return "the host went down (power loss)";
}

Status RankCrash::Apply(Seams& s) {
  if (!s.host) return MissingSeam("rank_crash", "host");
  return s.host->Crash(id_, why_);
}

Status RankCrash::Recover(Seams&) {
  return Status::Ok();  // the host came back on its own; the process stays dead
}

Status ValidateRankCrash(const v1::FaultSpec& spec) {
  const std::string& e = spec.rank_crash().event();
  if (!e.empty() && e != "power_loss" && e != "kernel_panic" && e != "drained")
    return InvalidArgument("params.event must be \"power_loss\", \"kernel_panic\" or \"drained\" (what took the host "
                           "down), got \"" + e + "\"");
  if (spec.trigger().step().has_draw() ? spec.trigger().step().draw().lo() < 1 : spec.trigger().step().value() < 1)
    return InvalidArgument("trigger.step must be >= 1: a host that is down at step 0 never joined the job");
  return Status::Ok();
}

}  // namespace firedrill::faults
