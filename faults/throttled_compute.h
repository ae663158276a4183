// The compute seam on a real mechanism: a slowed rank's training thread runs
// under a CPU bandwidth quota (faults/cpu_quota.h), so the kernel throttles
// it the way a hot or power-capped device throttles: forward, backward and
// the optimiser step take longer because the thread gets less CPU time, and
// its gradient buckets leave late because backward reaches them late. Its
// loader workers and its communication threads are not throttled (a slow
// GPU's network is not slow), and the quota is lifted while a probe runs.
// On cgroup v1 the training thread joins alone; on v2 (threads move only
// within a threaded subtree) the whole process joins.
//
// A quota is a rate, a slowdown is a ratio: the quota is steered like a
// governor, on the stretch of the rank's compute (its wall time over the
// training thread's CPU time in it). The work of a step varies (a batch of
// long sequences costs several times one of short ones), its CPU time
// varies with it, and a quota stretches wall time alone; so the stretch is
// the same for a short step and a long one, healthy, and `factor` times
// that, slowed. "Healthy" is what the job's unslowed ranks measure now:
// every rank reports its compute's stretch with its gradients, and a
// slowed rank steers, every few steps and quota periods together, to
// `factor` times their mean (OnPeers). On a GPU cluster a hot device is
// slower than its healthy peers; here the ranks share the host's cores, a
// healthy rank's compute is stretched by that sharing, and the sharing
// changes during a run (a burner, a straggler whose peers wait for it
// while it computes alone). Measured against the peers at the same time,
// the slowdown holds through all of it. Before the first slowdown this
// rank's own healthy stretch is measured (from its last steps; a slowdown
// from step 0 waits for three): the first limit, and the reference where
// no peer reports one. A governor that kept that own reference left
// thermal-throttle's straggler barely slower than its peers under load,
// and one that steered a step's wall time to `factor` times a few early
// steps' let a straggler go unslowed when those steps held short batches
// (bench/RESULTS.md).
//
// Where no cgroup can be written, the slowdown is slept out instead
// (sleep_factor()): the trainer stretches forward and backward, and backward
// before each bucket launch, so buckets still leave late. Nothing here logs:
// only the slowed rank would, which would name it; Capability() says once,
// on every rank alike, which way slowdowns go on this host.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "faults/cpu_quota.h"
#include "faults/seams.h"

namespace firedrill::faults {

class ThrottledCompute : public ComputeSeam {
 public:
  // `cgroup`: the quota's name under firedrill/, ending in -<pid> (see
  // CpuQuota::CleanLeftovers). Empty: always the sleep fallback.
  explicit ThrottledCompute(std::string cgroup);
  ~ThrottledCompute() override;

  // On the training thread (the fault runner's): the thread that joins.
  void Slow(FaultId id, double factor) override;
  void Restore(FaultId id) override;

  // After each step, on the training thread: its device work (forward,
  // backward and optimiser), in wall time and the thread's CPU time (ms).
  // Measures the healthy stretch and steers the quota.
  void OnStep(double compute_ms, double cpu_ms);
  // Each step, on the training thread, before OnStep: the mean stretch of
  // the compute of the job's unslowed ranks (each one's SharedStretch(),
  // exchanged with the step's gradients); 0 when none reported one. A
  // slowed rank steers to `factor` times it.
  void OnPeers(double stretch);
  // What this rank reports for the exchange: its compute's stretch over
  // its last healthy steps (since it last recovered); 0 while it is slowed
  // and before its first measured step (the second: the first warms up).
  double SharedStretch() const;
  // Around a probe: the quota is lifted, then put back.
  void Pause();
  void Resume();

  // What the trainer still sleeps out: the factor in the fallback, 1 while
  // the quota carries it (or before it took hold).
  double sleep_factor() const;
  // The combined slowdown asked for (1: none).
  double factor() const { return factors_.Product(); }
  // Empty while the quota works (or none was needed yet); otherwise why the
  // fallback sleeps.
  std::string fallback() const;
  // The quota's cpu.stat (throttled periods and time); zeros without one.
  CpuStat Stat() const;
  // The quota's current limit in cores (0: none).
  double limit_cores() const;

  // Whether a slowed rank here would run under a quota: a probe cgroup is
  // made and removed. One line for the agent's log, the same on every rank.
  static std::string Capability(const std::string& probe_name);

 private:
  struct Sample {
    double wall_ms = 0, cpu_ms = 0;
  };
  // The stretch of most of these steps' work: the median of wall/CPU,
  // weighted by CPU time (so a long step counts as much as its work, and a
  // step stalled by the host is one outlier among several).
  static double Stretch(const std::vector<Sample>& steps);
  // mu_ held for these.
  void Steer(const Sample& step, double factor);
  void Apply();         // the quota to cores_
  void StartWindow();   // a steering window from now
  void DropQuota(const std::string& why);  // the sleep fallback from now on
  const std::string cgroup_;
  PerFault factors_;
  mutable std::mutex mu_;
  std::unique_ptr<CpuQuota> quota_;
  bool tried_ = false;
  bool paused_ = false;
  std::string fallback_;
  int64_t steps_ = 0;               // steps seen (the first, a warm-up, is not measured)
  std::deque<Sample> healthy_;      // the last healthy steps
  double base_stretch_ = 0;         // frozen at the first slowdown that took hold
  double cores_ = 0;                // the limit now; 0: unlimited
  double resume_cores_ = 0;         // the last limit, where a flapping fault resumes
  Sample window_;                   // the slowed steps since the last steering, summed
  size_t window_steps_ = 0;         // and how many
  double peers_sum_ = 0;            // the peers' stretch over the window's steps: sum,
  int peers_n_ = 0;                 // and how many steps reported one
};

}  // namespace firedrill::faults
