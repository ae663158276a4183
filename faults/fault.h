// The fault interface. The trainer calls a HookBus at fixed points of every
// step; the bus forwards to the faults that are active on this rank at this
// step. A fault kind only says what happens at a hook for one target: which
// rank or host it hits and from which step is decided once, in targeting.cc
// and hook_bus.cc, never in a kind.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

using Nanos = std::chrono::nanoseconds;

// What a fault may do to the process beyond the hook arguments. Tests pass a
// fake that records sleeps instead of sleeping.
class Env {
 public:
  virtual ~Env() = default;
  virtual void SleepFor(Nanos d) = 0;
};
Env& RealEnv();

enum class ComputePhase { kForward, kBackward, kOptimizer };

struct StepInfo {
  int rank = 0;
  int64_t step = 0;
};

struct ComputeInfo {
  StepInfo at;
  ComputePhase phase = ComputePhase::kForward;
  Nanos elapsed{0};  // measured time of the phase on this rank
};

struct CollectiveInfo {
  StepInfo at;
  const char* op = "";  // "allreduce", "broadcast", "allgather", "reducescatter", "send", "recv"
  int64_t seq = 0;      // per-rank collective sequence number
  int64_t bytes = 0;    // the tensor's size
  // What this rank moves over its link for the collective, as a ring
  // algorithm would: 2(n-1)/n x bytes for an all-reduce, (n-1)/n x the whole
  // buffer for all-gather and reduce-scatter, bytes for broadcast and
  // point-to-point.
  int64_t link_bytes = 0;
};

struct CheckpointInfo {
  StepInfo at;
  std::string path;
};

class Fault {
 public:
  virtual ~Fault() = default;
  virtual void OnStepBegin(const StepInfo&) {}
  virtual void OnStepEnd(const StepInfo&) {}
  virtual void OnBatchFetch(const StepInfo&) {}
  virtual void AfterCompute(const ComputeInfo&) {}
  virtual void BeforeCollective(const CollectiveInfo&) {}
  virtual void AfterCollective(const CollectiveInfo&) {}
  virtual void OnCheckpointWrite(const CheckpointInfo&) {}
  virtual void OnCheckpointRead(const CheckpointInfo&) {}
  // Storage latency per sample this fault adds to the data loader from the
  // step it triggers (the loader's worker threads sleep it per sample).
  virtual double ExtraSampleLatencyMs() const { return 0; }
  // The network interface this node's environment tells Gloo to bind ("" =
  // none); the job's comm.socket_ifname, when set, wins.
  virtual std::string SocketIfname() const { return ""; }
  // Time this rank's degraded link adds to a collective it takes part in.
  // The collective layer waits it before handing the rank's part to the
  // transport (asynchronous all-reduces: on a launch thread, so backward is
  // not held up; synchronous ones such as barriers and probe collectives: on
  // the calling thread; a receive: after the data arrived), so every rank
  // sees the collective finish late.
  virtual Nanos LinkDelay(const CollectiveInfo&) const { return Nanos(0); }
};

}  // namespace firedrill::faults
