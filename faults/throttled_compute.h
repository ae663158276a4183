// The compute seam on a real mechanism: a slowed rank runs under a CPU
// bandwidth quota (faults/cpu_quota.h), so the kernel throttles its process
// the way a hot or power-capped device throttles: forward and backward take
// longer because the process gets less CPU time, its gradient buckets leave
// late because backward reaches them late, and cpu.stat counts throttled
// periods.
//
// A quota is a rate, a slowdown is a ratio: the quota is steered like a
// governor. Before the first slowdown the rank's healthy compute time per
// step is measured (the median of its last steps; a slowdown from step 0
// waits for three); from then on, after every step, the quota is moved so
// that compute takes `factor` times that (measured, so it holds whether the
// rank shares its cores with three peers or has one to itself).
//
// Where no cgroup can be written, the slowdown is slept out instead
// (sleep_factor()): the trainer stretches forward and backward, and backward
// before each bucket launch, so buckets still leave late.
#pragma once

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

  void Slow(FaultId id, double factor) override;
  void Restore(FaultId id) override;

  // After each step, on the training thread: its forward + backward time
  // (ms). Measures the healthy time and steers the quota.
  void OnStep(double compute_ms);

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

 private:
  // mu_ held for both.
  void Steer(double compute_ms, double factor);
  void Apply();  // the quota to cores_
  const std::string cgroup_;
  PerFault factors_;
  mutable std::mutex mu_;
  std::unique_ptr<CpuQuota> quota_;
  bool tried_ = false;
  std::string fallback_;
  std::deque<double> healthy_ms_;  // the last healthy steps' compute time
  double base_ms_ = 0;             // frozen at the first slowdown that took hold
  double cores_ = 0;               // the limit now; 0: unlimited
  double resume_cores_ = 0;        // the last limit, where a flapping fault resumes
  struct Mark {
    double wall, cpu;  // seconds
  };
  std::deque<Mark> cpu_marks_;  // the process's CPU time at the healthy steps' ends
  std::vector<double> window_;  // slowed steps' compute since the last steering
};

}  // namespace firedrill::faults
