// All-reduce through shared memory for ranks that share a host, the way
// NCCL's intra-node transport avoids the network. Over loopback TCP, Gloo
// spends most of an all-reduce copying through the kernel (measured on the
// 2-core machines: 9.5 MB took 8.7 ms, 6 ms of it CPU in system calls), CPU
// that the ranks' compute needs. Here every rank's gradient buckets live in
// one shared segment at the same offsets; for each collective, rank r sums
// its 1/world slice across all ranks' copies and writes the sum back into
// every copy: each element is read and written once per rank, and one rank
// computes it, so all ranks get the same bits.
//
// Only tensors allocated from the segment go this way; everything else (and
// ranks on different hosts or in different containers, which cannot map the
// segment) uses Gloo. Free of c10d: the store is reached through StoreOps.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "agent/comm/backend.h"
#include "common/status.h"

namespace firedrill::agent::comm {

// Key/value exchange through the job's store.
struct StoreOps {
  std::function<Status(const std::string& key, const std::string& value)> set;
  // Blocks until the key exists or the store's timeout passes.
  std::function<StatusOr<std::string>(const std::string& key)> get;
};

class ShmAllReduce {
 public:
  // Collective: rank 0 creates a segment of `bytes_per_rank` per rank, the
  // others map it, and all agree through the store whether every rank
  // could. nullptr (with OK) when some rank could not or `allow` is false
  // on some rank: the caller then keeps using Gloo. `tag` keeps store keys
  // apart when called more than once.
  static StatusOr<std::shared_ptr<ShmAllReduce>> Create(int rank, int world, int64_t bytes_per_rank,
                                                        std::chrono::milliseconds timeout, bool allow,
                                                        const std::string& tag, const StoreOps& store);
  ~ShmAllReduce();  // tells peers this rank left; stops the worker

  // Carves `numel` floats (zeroed, 64-byte aligned) from this rank's region.
  // Every rank must allocate the same sizes in the same order. The memory
  // stays mapped while `keepalive` (or this object) lives.
  StatusOr<float*> Allocate(int64_t numel, std::shared_ptr<void>* keepalive);
  // Whether [p, p + numel) lies in this rank's region.
  bool Contains(const float* p, int64_t numel) const;

  // Starts an in-place sum over ranks of the floats at `data` (in this
  // rank's region), each rank's value multiplied by `prescale` first (in
  // fp32, as a separate rounding: the same bits as scaling in place and
  // then summing). Collectives must be started in the same order on every
  // rank; a mismatch in size, offset or scale is reported as a desync.
  StatusOr<int64_t> Start(const float* data, int64_t numel, float prescale);
  // Blocks until collective `ticket` is complete on every rank; stamps when
  // it completed (steady clock, ns). A peer that left, died or fell behind by
  // more than the timeout fails it, and every later one.
  Status Wait(int64_t ticket, int64_t* completed_ns);
  // The same within `timeout` (negative: none of its own): false while the
  // collective is still running then.
  bool WaitFor(int64_t ticket, std::chrono::milliseconds timeout, Status* result, int64_t* completed_ns);

  struct Impl;

 private:
  explicit ShmAllReduce(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The shared-memory backend (backend.h): runs the all-reduces of fp32
// tensors inside `shm`'s region and nothing else.
std::shared_ptr<Backend> ShmBackend(std::shared_ptr<ShmAllReduce> shm);

}  // namespace firedrill::agent::comm
