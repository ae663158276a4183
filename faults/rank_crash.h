// rank_crash: a host goes down. At the trigger step the rank's process
// dies at once, without a word (agent: SIGKILL of itself; ranks as threads:
// the run fails), as a kernel panic, a power loss or a node the scheduler
// drained without notice does. Its peers fail in their next collective; an
// elastic launcher (job.elastic.max_restarts) restarts the job from
// checkpoint.resume_from. Nothing else is damaged: what a drill built on it
// teaches is what the restart does. An event, not a condition: it happens
// in the drill's first run only (registry.h `once`).
#pragma once

#include <string>

#include "faults/fault.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

class RankCrash : public Fault {
 public:
  RankCrash(FaultId id, std::string why) : id_(id), why_(std::move(why)) {}
  Status Apply(Seams& s) override;
  Status Recover(Seams& s) override;

 private:
  FaultId id_;
  std::string why_;
};

Status ValidateRankCrash(const v1::FaultSpec& spec);

// What the crash is, in the words of the rank's error where the process
// cannot die (ranks as threads); never shown where it can.
std::string RankCrashReason(const v1::RankCrashParams& p);

}  // namespace firedrill::faults
