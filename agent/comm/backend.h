// The collective layer's two interfaces, shaped like c10d's Backend and Work:
// a backend runs one kind of transport (gloo_backend.h: Gloo over TCP;
// shm_backend.h: shared memory among the ranks of one host), and decorators
// (decorators.h, in the style of c10d's ProcessGroupWrapper) wrap a backend
// to record the flight recorder or to apply a fault, each forwarding
// everything else untouched. ProcessGroup (process_group.h) stacks them and
// picks the backend per collective. Free of c10d.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace firedrill::agent::comm {

// One collective as this rank issues it: labels for errors, the flight
// recorder and the link model.
struct CollectiveInfo {
  struct {
    int rank = 0;
    int64_t step = 0;
  } at;
  const char* op = "";  // "allreduce", "broadcast", "allgather", "reducescatter", "send", "recv", "barrier"
  int64_t seq = 0;      // per-rank collective sequence number
  int64_t bytes = 0;    // the tensor's size
  // What this rank moves over its link for the collective, as a ring
  // algorithm would (collectives/: each collective's link_bytes).
  int64_t link_bytes = 0;
  std::string group;  // a subgroup's name ("tp"), empty for the job's group
};

enum class OpType { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kSend, kRecv, kBarrier };

// Everything a backend needs to run one collective.
struct Op {
  OpType type = OpType::kAllReduce;
  CollectiveInfo info;
  // The tensor: in place for all-reduce, broadcast, send and recv; the
  // input of all-gather and reduce-scatter (contiguous 1-D, as `out`).
  at::Tensor tensor;
  at::Tensor out;         // all-gather: world x tensor; reduce-scatter: tensor / world
  int root = 0;           // broadcast
  int peer = -1;          // send, recv
  int tag = 0;            // send, recv
  double prescale = 1.0;  // all-reduce: each rank's values times this before the sum
};

// A collective in flight on one rank. Its tensors must not be touched until
// Wait() returned true. Dropping the last reference without waiting leaves
// the collective to finish (or fail) in the background.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until this rank's part finished, or `timeout` passed (negative:
  // no limit of its own; the transport's timeout still bounds a collective
  // whose peers never come). True: finished, `*result` says how (OK, or the
  // transport's failure, without labels: the caller adds them). False:
  // still running; the work stays valid, to be waited on again. Calls after
  // the first true give the same result.
  virtual bool Wait(std::chrono::milliseconds timeout, Status* result) = 0;
  // When the transport finished it (steady clock), stamped by the
  // transport's own thread where it has one, so the time a collective took
  // is known even when nobody was waiting; the epoch until then.
  virtual std::chrono::steady_clock::time_point completed() const = 0;
};
using WorkPtr = std::shared_ptr<Work>;

inline constexpr std::chrono::milliseconds kNoWaitLimit{-1};

class Backend {
 public:
  virtual ~Backend() = default;
  // "gloo" or "shm": the flight recorder's transport column.
  virtual const char* name() const = 0;
  // Whether this backend can run `op` (shared memory: only all-reduces of
  // fp32 tensors inside its region).
  virtual bool Supports(const Op& op) const = 0;
  // Starts `op`. Collectives run one at a time in the order they were
  // posted, which must be the same on every rank. An error here means the
  // collective never started.
  virtual StatusOr<WorkPtr> Post(const Op& op) = 0;
};

// "rank 1 step 40: allreduce #812 (9.4 MB)": how errors name a collective
// ("rank 5 step 3: tp allreduce #7 (64.0 kB)" in a subgroup).
std::string Label(const CollectiveInfo& c);
// "512 B", "3.4 kB", "2.1 MB": sizes as errors and logs print them.
std::string FormatBytes(int64_t bytes);
int64_t SteadyNowNs();

}  // namespace firedrill::agent::comm
