// `firedrill node`: what each rank's host says about its CPU, as
// `nvidia-smi -q -d PERFORMANCE` says what limits a GPU's clocks: the CPU
// bandwidth limit over the training thread (its cgroup's quota) and how
// often the kernel throttled it (cpu.stat), and where the training thread's
// step went (on a CPU, runnable but waiting for one, or off CPU), from the
// scheduler's counters. Measurements from the ranks' step reports, no
// verdicts: every rank is shown the same way.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "firedrill/v1/controller.pb.h"

namespace firedrill::cli {

struct NodeView {
  int rank = 0;
  std::string host;
  int steps = 0;             // in the window
  int64_t first_step = 0, last_step = 0;
  // The cgroup, at the window's last step.
  bool cgroup = false;       // its counters could be read
  std::string cgroup_error;
  int64_t quota_us = -1, period_us = 0;
  // Over the window: counter deltas from the first step's end to the
  // last's, step by step (see NodeViews).
  int64_t periods = 0, throttled_periods = 0;
  double throttled_ms_per_step = 0;
  // Per step, means over the window.
  double step_ms = 0, cpu_ms = 0, wait_ms = 0, off_cpu_ms = 0, comm_wait_ms = 0;
  // The process's CPUs (nproc) and its compute threads (OMP_NUM_THREADS), latest.
  int cpus = 0, compute_threads = 0;
};

// One view per rank of `trace` (steps in the trace's order), `rank` < 0: all.
std::vector<NodeView> NodeViews(const v1::TraceResponse& trace, int rank);
void PrintNode(const v1::TraceResponse& trace, const std::vector<NodeView>& views, std::ostream& out);
std::string NodeJson(const v1::TraceResponse& trace, const std::vector<NodeView>& views);

}  // namespace firedrill::cli
