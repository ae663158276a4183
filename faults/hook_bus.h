// The trainer's single entry to faults. Holds the faults this rank carries
// and forwards each hook to those whose trigger step has been reached. With
// no faults every call is one branch on an empty vector.
#pragma once

#include <memory>
#include <vector>

#include "faults/fault.h"

namespace firedrill::faults {

class HookBus {
 public:
  HookBus() = default;
  // Builds the kinds through the registry; unknown kinds are an error.
  static StatusOr<std::unique_ptr<HookBus>> Create(const std::vector<v1::ResolvedFault>& faults,
                                                   Env& env = RealEnv());

  bool empty() const { return entries_.empty(); }

  void OnStepBegin(const StepInfo& s) { Each(s, [&](Fault& f) { f.OnStepBegin(s); }); }
  void OnStepEnd(const StepInfo& s) { Each(s, [&](Fault& f) { f.OnStepEnd(s); }); }
  void OnBatchFetch(const StepInfo& s) { Each(s, [&](Fault& f) { f.OnBatchFetch(s); }); }
  void AfterCompute(const ComputeInfo& c) { Each(c.at, [&](Fault& f) { f.AfterCompute(c); }); }
  void BeforeCollective(const CollectiveInfo& c) { Each(c.at, [&](Fault& f) { f.BeforeCollective(c); }); }
  void AfterCollective(const CollectiveInfo& c) { Each(c.at, [&](Fault& f) { f.AfterCollective(c); }); }
  void OnCheckpointWrite(const CheckpointInfo& c) { Each(c.at, [&](Fault& f) { f.OnCheckpointWrite(c); }); }
  void OnCheckpointRead(const CheckpointInfo& c) { Each(c.at, [&](Fault& f) { f.OnCheckpointRead(c); }); }
  // The first fault's interface override, from the start of the run.
  std::string SocketIfname() const {
    for (const auto& e : entries_)
      if (!e.fault->SocketIfname().empty()) return e.fault->SocketIfname();
    return "";
  }
  // Sum over the faults active at the collective's step.
  Nanos LinkDelay(const CollectiveInfo& c) {
    Nanos d{0};
    Each(c.at, [&](Fault& f) { d += f.LinkDelay(c); });
    return d;
  }
  // Sum over the faults active at `s` (the trainer adds it to the job's own).
  double ExtraSampleLatencyMs(const StepInfo& s) {
    double ms = 0;
    Each(s, [&](Fault& f) { ms += f.ExtraSampleLatencyMs(); });
    return ms;
  }

 private:
  struct Entry {
    int64_t trigger_step;
    std::unique_ptr<Fault> fault;
  };
  template <typename F>
  void Each(const StepInfo& s, F&& fn) {
    for (auto& e : entries_) {
      if (s.step >= e.trigger_step) fn(*e.fault);
    }
  }
  std::vector<Entry> entries_;
};

}  // namespace firedrill::faults
