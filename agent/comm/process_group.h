// The agent's only door to c10d: a TCPStore for rendezvous and a Gloo process
// group for collectives. This header stays free of c10d so that the c10d API
// (which differs between LibTorch 1.13 here and 2.x on GPU machines) is
// confined to process_group.cc. Errors come back as Status, never exceptions.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "agent/comm/flight_recorder.h"
#include "faults/hook_bus.h"

namespace firedrill::agent::comm {

struct GroupOptions {
  int rank = 0;
  int world_size = 1;
  // Address the Gloo device binds; peers connect to it, so it must be this
  // rank's address as they see it.
  std::string device_host = "127.0.0.1";
  // Bounds store connects, the full-mesh rendezvous and every collective.
  std::chrono::milliseconds timeout{30000};
  faults::HookBus* hooks = nullptr;  // may be null
  // Lets EnableSharedMemory() take the shared-memory path when every rank
  // can (see shm_transport.h). Off on any rank keeps all ranks on Gloo.
  bool allow_shared_memory = true;
  // Every collective is recorded here when set (outlives the group).
  std::shared_ptr<FlightRecorder> recorder;
  // Bind Gloo to this network interface instead of device_host's address.
  std::string socket_ifname;
};

class ProcessGroup;

// A collective in flight. Its tensor must not be touched until Wait()
// returns. Destroying a handle without waiting leaves the collective to
// finish (or fail) in the background; the process group keeps what it needs.
class PendingCollective {
 public:
  PendingCollective();
  ~PendingCollective();
  PendingCollective(PendingCollective&&) noexcept;
  PendingCollective& operator=(PendingCollective&&) noexcept;

  bool valid() const { return state_ != nullptr; }
  int64_t seq() const;
  int64_t bytes() const;
  // When the collective was handed to the backend, and when the backend
  // finished it (set by the backend's thread; valid once Wait() returned).
  std::chrono::steady_clock::time_point launched() const;
  std::chrono::steady_clock::time_point completed() const;

 private:
  friend class ProcessGroup;
  struct State;
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
  // Each rank's values are first multiplied by `prescale` (DDP's divide by
  // world size before the sum): in place before Gloo, or fused into the
  // reduction on the shared-memory path.
  StatusOr<PendingCollective> StartAllReduceSum(const at::Tensor& t, int64_t step, double prescale = 1.0);
  Status Wait(PendingCollective& pending);

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

  // Sequence number of the last collective issued by this rank (1-based).
  int64_t seq() const { return seq_; }

 private:
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl, const GroupOptions& opts);
  // root < 0: all-reduce (sum); otherwise broadcast from root.
  StatusOr<PendingCollective> Start(const char* op, const at::Tensor& t, int64_t step, int root,
                                    double prescale = 1.0);
  std::unique_ptr<Impl> impl_;
  GroupOptions opts_;
  int64_t seq_ = 0;
};

// "512 B", "3.4 kB", "2.1 MB": sizes as errors and logs print them.
std::string FormatBytes(int64_t bytes);

}  // namespace firedrill::agent::comm
