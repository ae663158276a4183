// The agent's only door to c10d: a TCPStore for rendezvous and a stack of
// backends for collectives (backend.h): Gloo for everything, shared memory
// for the all-reduces of buffers in its region when every rank has one, each
// under the decorators this rank needs (decorators.h: the flight recorder,
// link faults). This header stays free of c10d so that the c10d API (which
// differs between LibTorch 1.13 here and 2.x on GPU machines) is confined to
// agent/comm/*.cc. Errors come back as Status, never exceptions.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "agent/comm/backend.h"
#include "agent/comm/flight_recorder.h"
#include "faults/seams.h"

namespace firedrill::agent::comm {

struct GroupOptions {
  int rank = 0;
  int world_size = 1;
  // Address the Gloo device binds; peers connect to it, so it must be this
  // rank's address as they see it.
  std::string device_host = "127.0.0.1";
  // Bounds store connects, the full-mesh rendezvous and every collective.
  std::chrono::milliseconds timeout{30000};
  // This rank's link seam (faults/seams.h), may be null: while a fault
  // degrades it, each collective waits its delay before this rank hands its
  // part to the transport (WithLinkFaults in decorators.h), so every rank
  // sees the collective finish late.
  const faults::LinkModel* link = nullptr;
  // Lets EnableSharedMemory() take the shared-memory path when every rank
  // can (see shm_transport.h). Off on any rank keeps all ranks on Gloo.
  bool allow_shared_memory = true;
  // Every collective is recorded here when set (outlives the group).
  std::shared_ptr<FlightRecorder> recorder;
  // Bind Gloo to this network interface instead of device_host's address.
  std::string socket_ifname;
  // A subgroup (NewSubgroup): its name ("tp", "pp", "dp") and its members'
  // ranks in the job, by group rank (`rank` and `world_size` are then the
  // group's). Empty for the job's own group. Errors, labels and peers name
  // the job's ranks.
  std::string group_name;
  std::vector<int> members;
};

class ProcessGroup;

// A collective in flight. Its tensor must not be touched until Wait()
// returns. Destroying a handle without waiting leaves the collective to
// finish (or fail) in the background; the process group keeps what it needs.
class PendingCollective {
 public:
  struct State;
  PendingCollective();
  ~PendingCollective();
  PendingCollective(PendingCollective&&) noexcept;
  PendingCollective& operator=(PendingCollective&&) noexcept;

  bool valid() const { return state_ != nullptr; }
  int64_t seq() const;
  int64_t bytes() const;
  // When the collective was started (on every rank alike; a degraded link
  // may hand it to the backend later), and when the backend finished it
  // (set by the backend's thread; valid once Wait() returned).
  std::chrono::steady_clock::time_point launched() const;
  std::chrono::steady_clock::time_point completed() const;

 private:
  friend class ProcessGroup;
  std::shared_ptr<State> state_;
};

class ProcessGroup {
 public:
  // Rank 0: starts the store server on an ephemeral port (its own client
  // connects through `bind_host`); store_port() then says which port.
  static StatusOr<std::unique_ptr<ProcessGroup>> HostStore(const GroupOptions& opts,
                                                           const std::string& bind_host);
  // Ranks > 0: connects to rank 0's store.
  static StatusOr<std::unique_ptr<ProcessGroup>> JoinStore(const GroupOptions& opts, const std::string& host,
                                                           int port);
  ~ProcessGroup();

  int store_port() const;

  // Builds the Gloo group: blocks until every rank has joined or the
  // timeout passes.
  Status Connect();

  // Collectives, in place and synchronous. `step` only labels hooks and
  // errors. A failure names rank, op, sequence number and size.
  Status AllReduceSum(at::Tensor& t, int64_t step);
  Status Broadcast(at::Tensor& t, int root, int64_t step);
  // c10d's monitoredBarrier (Gloo): rank 0 waits for every other rank, then
  // releases them; within the group timeout, or an error that names the
  // rank that did not arrive.
  Status Barrier(int64_t step);

  // Asynchronous all-reduce (sum), in place: fires BeforeCollective and
  // hands `t` to the backend, which runs collectives one at a time in the
  // order they were started (the same order on every rank keeps them
  // matched). Wait() blocks until it finished, fires AfterCollective and
  // turns a backend failure into a Status like the synchronous calls'.
  // WaitFor() gives up after `timeout` (false: still running; wait again).
  // Each rank's values are first multiplied by `prescale` (DDP's divide by
  // world size before the sum): in place before Gloo, or fused into the
  // reduction on the shared-memory path.
  StatusOr<PendingCollective> StartAllReduceSum(const at::Tensor& t, int64_t step, double prescale = 1.0);
  Status Wait(PendingCollective& pending);
  bool WaitFor(PendingCollective& pending, std::chrono::milliseconds timeout, Status* result);

  // Collective: sets up a shared-memory region of `bytes_per_rank` for
  // all-reduces among ranks on this host (shm_transport.h). True when every
  // rank mapped it; false leaves everything on Gloo.
  StatusOr<bool> EnableSharedMemory(int64_t bytes_per_rank);
  // A zeroed fp32 tensor in this rank's shared region, after
  // EnableSharedMemory() returned true. All-reduces of it (or of a slice)
  // skip Gloo. Every rank must allocate the same sizes in the same order.
  // The memory outlives this object as long as the tensor does.
  StatusOr<at::Tensor> AllocateShared(int64_t numel);
  bool shared_memory() const;

  // Synchronous collectives for probes (Gloo only; contiguous 1-D tensors).
  // All-gather: `out` holds world x in.numel() elements, rank r's part at
  // r x in.numel(). Reduce-scatter (sum): `in` holds world equal parts and
  // rank r gets the sum of everyone's part r in `out`. Gloo in LibTorch 1.13
  // has no reduce_scatter, so it is an all-to-all followed by a local sum:
  // each rank moves (n-1)/n of the buffer, the bytes of a ring's
  // reduce-scatter.
  Status AllGather(const at::Tensor& in, at::Tensor& out, int64_t step);
  Status ReduceScatterSum(const at::Tensor& in, at::Tensor& out, int64_t step);
  // Point-to-point: blocks until `t` is sent to / received from `peer`.
  // `tag` matches a send with its receive.
  Status Send(const at::Tensor& t, int peer, int tag, int64_t step);
  Status Recv(at::Tensor& t, int peer, int tag, int64_t step);
  // The same, started without waiting (Wait() for them): a pipeline stage
  // posts its sends and goes on, so two stages sending to each other never
  // wait on each other (Megatron's isend/irecv). `t` must not be touched
  // until the wait returned.
  StatusOr<PendingCollective> StartSend(const at::Tensor& t, int peer, int tag, int64_t step);
  StatusOr<PendingCollective> StartRecv(const at::Tensor& t, int peer, int tag, int64_t step);

  // Collective: a second group over the same ranks and store (keys under
  // `tag`), with its own Gloo connections, sequence numbers and timeout, and
  // no flight recorder: probes run on one so that they never share a
  // sequence number or a failure with training. Every rank must call it.
  StatusOr<std::unique_ptr<ProcessGroup>> NewGroup(const std::string& tag, std::chrono::milliseconds timeout);

  // A group of some of this group's ranks (`members`, by their rank here;
  // this rank must be one of them, and group rank i is members[i]), with
  // its own Gloo connections over the same store, sequence numbers and
  // timeout: a tensor-, pipeline- or data-parallel group of a mesh
  // (parallel/mesh.h). Only the members call it; every member passes the
  // same `name` and `members`. Collectives take group ranks (Send's peer,
  // Broadcast's root); errors name job ranks and the group ("rank 5 step
  // 3: tp allreduce #7 (64.0 kB)"). Gloo only, no flight recorder; this
  // rank's link faults apply as on the whole group.
  StatusOr<std::unique_ptr<ProcessGroup>> NewSubgroup(const std::string& name,
                                                      const std::vector<int>& members,
                                                      std::chrono::milliseconds timeout);

  // Benchmarks only (bench/busbw_bench.cc): times in-place fp32 sum
  // all-reduces of each size, `warmup` untimed then `iters` timed, straight
  // on a new c10d ProcessGroupGloo over this group's store (keys under
  // `tag`), bypassing this wrapper: the reference the probes are measured
  // against. Collective. Mean microseconds per iteration, per size.
  StatusOr<std::vector<double>> RawGlooAllReduceUs(const std::string& tag, const std::vector<int64_t>& sizes,
                                                   int warmup, int iters);

  // Sequence number of the last collective issued by this rank (1-based).
  int64_t seq() const { return seq_; }
  int rank() const { return opts_.rank; }
  int world_size() const { return opts_.world_size; }
  // This rank's (or group rank `r`'s) rank in the job.
  int job_rank() const { return job_rank(opts_.rank); }
  int job_rank(int r) const {
    return r >= 0 && r < static_cast<int>(opts_.members.size()) ? opts_.members[r] : r;
  }

 private:
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl, const GroupOptions& opts);
  // The next collective's sequence number and labels.
  CollectiveInfo Next(const char* op, int64_t bytes, int64_t step);
  // Posts `op` on the backend that runs it (shared memory when it can).
  StatusOr<PendingCollective> Post(Op op, const std::string& peer_note = "");
  // Waits without a limit of its own; errors labelled with `op.info` and
  // `peer_note` (" to rank 2").
  Status Run(Op op, const std::string& peer_note = "");
  Status PointToPoint(OpType type, const at::Tensor& t, int peer, int tag, int64_t step);
  StatusOr<PendingCollective> StartPointToPoint(OpType type, const at::Tensor& t, int peer, int tag,
                                                int64_t step);
  // Wraps a bare backend in the decorators this group's options ask for.
  std::shared_ptr<Backend> Decorate(std::shared_ptr<Backend> bare) const;
  std::unique_ptr<Impl> impl_;
  GroupOptions opts_;
  int64_t seq_ = 0;
};

}  // namespace firedrill::agent::comm
