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
};

class ProcessGroup {
 public:
  // Rank 0: starts the store server on an ephemeral port (its own client
  // connects through `bind_host`); store_port() then says which port.
  static StatusOr<std::unique_ptr<ProcessGroup>> HostStore(const GroupOptions& opts, const std::string& bind_host);
  // Ranks > 0: connects to rank 0's store.
  static StatusOr<std::unique_ptr<ProcessGroup>> JoinStore(const GroupOptions& opts, const std::string& host, int port);
  ~ProcessGroup();

  int store_port() const;

  // Builds the Gloo group: blocks until every rank has joined or the
  // timeout passes.
  Status Connect();

  // Collectives, in place and synchronous. `step` only labels hooks and
  // errors. A failure names rank, op, sequence number and size.
  Status AllReduceSum(at::Tensor& t, int64_t step);
  Status Broadcast(at::Tensor& t, int root, int64_t step);

  // Sequence number of the last collective issued by this rank (1-based).
  int64_t seq() const { return seq_; }

 private:
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl, const GroupOptions& opts);
  // root < 0: all-reduce (sum); otherwise broadcast from root.
  Status Collective(const char* op, at::Tensor& t, int64_t step, int root);
  std::unique_ptr<Impl> impl_;
  GroupOptions opts_;
  int64_t seq_ = 0;
};

// "512 B", "3.4 kB", "2.1 MB": sizes as errors and logs print them.
std::string FormatBytes(int64_t bytes);

}  // namespace firedrill::agent::comm
