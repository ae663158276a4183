// The seams a fault acts on. A fault kind never reaches into the trainer,
// the loader or the collective layer: it applies a change to one or more
// seams and takes it back on recovery. The agent provides the seams of its
// process (agent/trainer.cc wires them); what stands behind a seam (a sleep,
// a CPU quota, a queueing discipline) is the seam's business, not the kind's.
//
// Several faults may hold one seam at once (two slow reads, a straggler on a
// slow link): every change is keyed by the fault that made it, taking a
// fault's change back leaves the others', and applying the same change twice
// is the same as once.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "common/status.h"

namespace firedrill::faults {

using Nanos = std::chrono::nanoseconds;
// A fault's index in the run's fault list: the key of its changes.
using FaultId = int;

// The rank's compute: forward, backward and the optimiser step (the
// device's work) take `factor` times as long.
class ComputeSeam {
 public:
  virtual ~ComputeSeam() = default;
  virtual void Slow(FaultId id, double factor) = 0;
  virtual void Restore(FaultId id) = 0;
};

// The data source: every sample read costs this much more storage latency.
class DataSeam {
 public:
  virtual ~DataSeam() = default;
  virtual void AddReadLatency(FaultId id, double ms_per_sample) = 0;
  virtual void Restore(FaultId id) = 0;
};

// The rank's link to its peers: a latency per collective plus the bytes the
// rank moves over it (as a ring would) at a capped bandwidth.
class LinkSeam {
 public:
  virtual ~LinkSeam() = default;
  virtual void Degrade(FaultId id, double latency_us, double bandwidth_gbps) = 0;
  virtual void Restore(FaultId id) = 0;
};

// The process's environment as the communication library reads it
// (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME, ...).
class EnvironmentSeam {
 public:
  virtual ~EnvironmentSeam() = default;
  virtual Status Set(FaultId id, const std::string& name, const std::string& value) = 0;
  virtual void Restore(FaultId id) = 0;
};

// The rank's copy of the model's parameters, as the device's memory holds
// them.
class ParameterSeam {
 public:
  virtual ~ParameterSeam() = default;
  // Flips bit `bit` (0 = the lowest of the fp32 value) of element `element`
  // of parameter `tensor` (both taken modulo what the model has). Once per
  // fault: a second call does nothing, and there is nothing to take back
  // (the weights keep the wrong bit until they are reloaded).
  virtual Status FlipBit(FaultId id, int64_t tensor, int64_t element, int bit) = 0;
};

// The host under the rank: the storage its checkpoint shards lie on, and
// the process itself.
class HostSeam {
 public:
  virtual ~HostSeam() = default;
  // Damages this rank's shard, as it lies on disk, in each of the newest
  // `count` complete checkpoints (step directories with a manifest) under
  // the job's checkpoint directory: "bit_rot" flips one bit at an offset
  // drawn from `seed`, "truncated" cuts the file's tail off. Once per fault.
  virtual Status DamageShards(FaultId id, const std::string& damage, int count, uint64_t seed) = 0;
  // The host goes down: the process dies at once, without a word. Where it
  // cannot (ranks that are threads of one process), the run fails with
  // `why` instead: the returned error.
  virtual Status Crash(FaultId id, const std::string& why) = 0;
};

// What a process offers; a seam it cannot offer is null, and a fault that
// needs it fails to apply with a message that says so.
struct Seams {
  ComputeSeam* compute = nullptr;
  DataSeam* data = nullptr;
  LinkSeam* link = nullptr;
  EnvironmentSeam* environment = nullptr;
  ParameterSeam* parameters = nullptr;
  HostSeam* host = nullptr;
};

// ---- the plain implementations: state that the trainer, the loader and the
// collective layer read. Thread-safe: faults change them at step boundaries
// on the training thread while collectives run on others.

// One number per fault holding a seam.
class PerFault {
 public:
  void Set(FaultId id, double v);
  void Erase(FaultId id);
  double Product() const;
  double Sum() const;

 private:
  mutable std::mutex mu_;
  std::map<FaultId, double> by_fault_;
};

// Multiplies the factors of every fault holding it.
class ComputeSlowdown : public ComputeSeam {
 public:
  void Slow(FaultId id, double factor) override { f_.Set(id, factor); }
  void Restore(FaultId id) override { f_.Erase(id); }
  double factor() const { return f_.Product(); }

 private:
  PerFault f_;
};

// Sums the latencies of every fault holding it.
class StorageLatency : public DataSeam {
 public:
  void AddReadLatency(FaultId id, double ms_per_sample) override { ms_.Set(id, ms_per_sample); }
  void Restore(FaultId id) override { ms_.Erase(id); }
  double extra_ms() const { return ms_.Sum(); }

 private:
  PerFault ms_;
};

// Each degradation costs its latency plus the link bytes at its bandwidth;
// several add up (each is a stretch of the path the bytes cross).
class LinkModel : public LinkSeam {
 public:
  void Degrade(FaultId id, double latency_us, double bandwidth_gbps) override;
  void Restore(FaultId id) override;
  // What a collective moving `link_bytes` over this rank's link waits.
  Nanos DelayFor(int64_t link_bytes) const;
  bool degraded() const;

 protected:
  // The bandwidth the degradations add up to in series (GB/s; 0: none).
  double SeriesBandwidthGbps() const;
  // While set, DelayFor waits out the latencies only: the kernel queues the
  // bytes (ShapedLink).
  void SetBandwidthShaped(bool on);

 private:
  struct Shape {
    double latency_us;
    double bandwidth_gbps;
  };
  mutable std::mutex mu_;
  std::map<FaultId, Shape> by_fault_;
  bool bandwidth_shaped_ = false;
};

// The variables faults set in the environment the communication library is
// configured from (the trainer reads them where PyTorch's ProcessGroupGloo
// binding reads GLOO_SOCKET_IFNAME). Kept beside the process's own
// environment, not written into it: setenv(3) while other threads may call
// getenv(3) is undefined behaviour, and ranks that are threads of one
// process (tests) must not see each other's.
class FaultEnvironment : public EnvironmentSeam {
 public:
  Status Set(FaultId id, const std::string& name, const std::string& value) override;
  void Restore(FaultId id) override;
  // The value of the first fault (lowest id) that set `name`; nullopt if none.
  std::optional<std::string> Get(const std::string& name) const;

 private:
  mutable std::mutex mu_;
  std::multimap<FaultId, std::pair<std::string, std::string>> by_fault_;  // name, value
};

}  // namespace firedrill::faults
