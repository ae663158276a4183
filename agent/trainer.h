// One rank of a data-parallel training job: real LibTorch autograd, gradients
// averaged over a c10d Gloo process group, per-step telemetry, fault hooks.
// This header is free of LibTorch so that the agent's gRPC side compiles fast.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/comm/flight_recorder.h"
#include "common/status.h"
#include "firedrill/v1/agent.pb.h"
#include "firedrill/v1/telemetry.pb.h"

namespace firedrill::agent {

struct StoreAddress {
  std::string host;
  int port = 0;
};

struct Batch;  // agent/data.h
class ProbeMailbox;  // agent/probe.h

struct TrainerOptions {
  v1::JobSpec job;
  int rank = 0;
  int64_t max_steps = 0;                  // steps this run; 0 = job.steps
  uint64_t seed = 0;                      // session seed (data, init)
  std::vector<v1::ResolvedFault> faults;  // this rank's, from the controller
  // Rank 0 hosts the TCPStore on an ephemeral port and announces
  // `store_advertise_host`:port through store_ready. LibTorch 1.13's store
  // server listens on every interface; `store_bind_host` is where rank 0's
  // own store client connects.
  std::string store_bind_host = "127.0.0.1";
  std::string store_advertise_host = "127.0.0.1";
  // Address this rank's Gloo device binds and peers connect to (every rank,
  // rank 0 included). The store server itself listens on all interfaces.
  std::string comm_host = "127.0.0.1";
  std::function<void(const StoreAddress&)> store_ready;
  // Ranks > 0 block here until rank 0's address is known (relayed by the
  // controller); an error aborts the run.
  std::function<StatusOr<StoreAddress>()> await_store;
  // Gradient all-reduces through shared memory when every rank of the job
  // can map it (same host, same IPC namespace); Gloo otherwise. Off keeps
  // them on Gloo (benchmarks compare the two).
  bool shared_memory_allreduce = true;
  // A slowed rank's CPU quota (faults/throttled_compute.h): the cgroup's
  // name, ending in -<pid>; only for a rank that is a process of its own.
  // Empty: slowdowns are slept out.
  std::string cpu_cgroup;
  // The host's own interface (eth0 in its network namespace): a slow link
  // is a tc rate limit on it. Empty: the slow link waits instead.
  std::string link_ifname;
  // Off: no StepReport is built and on_step is never called (the baseline
  // of the telemetry-overhead benchmark); training is otherwise identical.
  bool telemetry = true;
  // A checkpoint (checkpoint.every > 0) of the state as the run starts,
  // resumed or not, before its first step: what a resume put back, for the
  // resume probe (controller/session_resume_probe.cc) to compare.
  bool checkpoint_at_start = false;
  // Sees every micro-batch just before its forward pass (tests compare
  // against PyTorch on exactly these batches); `micro` counts from 0 within
  // the optimiser step. Called on the training thread.
  std::function<void(int64_t step, int micro, const Batch& batch)> on_batch;
  // Where this rank records its collectives (one is made when null); the
  // agent keeps it to answer flight-recorder dumps while a collective hangs.
  std::shared_ptr<comm::FlightRecorder> recorder;
  // The host going down (faults/corrupt_checkpoint.h): the agent kills its
  // own process, as a power loss would, and this never returns. Null (ranks
  // that are threads of one process): the run fails instead.
  std::function<void(const std::string& why)> crash;
  // Communication probes requested for this run (agent/probe.h); null: none.
  std::shared_ptr<ProbeMailbox> probes;
};

// Whether a job's gradient all-reduces may go through shared memory, as
// NCCL's shared-memory and P2P transports do: only among ranks of one host,
// and not where the job's comm.transport names Gloo (a drill's memory
// budget then counts the gradients Gloo's path holds). The agent and
// firedrill-train both ask this.
inline bool SharedMemoryAllReduce(const v1::JobSpec& job, bool ranks_share_host) {
  return ranks_share_host && job.comm().transport() != "gloo";
}

class Trainer {
 public:
  static StatusOr<std::unique_ptr<Trainer>> Create(TrainerOptions opts);
  ~Trainer();

  // Joins the process group, broadcasts parameters from rank 0 (unless
  // comm.skip_param_broadcast), trains until max_steps or until any rank sets
  // `stop` (agreed across ranks through the gradient all-reduce, so every
  // rank stops after the same step). A step is one optimiser step over
  // job.grad_accum_steps micro-batches. Calls on_step once per step from the
  // training thread. Errors name rank, step and the failing operation.
  Status Run(const std::atomic<bool>& stop, const std::function<void(const v1::StepReport&)>& on_step);

  // Steps completed so far.
  int64_t steps_done() const;
  // All parameters flattened, in registration order (for tests and probes).
  std::vector<float> FlatParameters() const;
  // Writes the parameters as a dict name -> tensor with the names PyTorch's
  // state_dict() would use ("0.weight", ...), in a file Python's torch.load
  // reads. Safe before, during (between steps) and after Run().
  Status ExportParameters(const std::string& path) const;

 private:
  struct Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace firedrill::agent
