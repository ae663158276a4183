// Communication probes: nccl-tests-style sweeps (all-reduce, all-gather,
// reduce-scatter) and a point-to-point bandwidth matrix across the job's
// ranks, run by the trainer between two training steps on a process group of
// their own, so that a probe never shares a sequence number, a buffer or a
// failure with training. Which step boundary is agreed through the gradient
// all-reduce: any rank with a request waiting votes, and every rank then
// takes its copy of the request from its mailbox.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <atomic>

#include "common/status.h"
#include "firedrill/v1/agent.pb.h"
#include "firedrill/v1/telemetry.pb.h"

namespace firedrill::agent {

namespace comm {
class ProcessGroup;
}

// Where the agent leaves probe requests for the training thread, and where
// the training thread hands back its report. Thread-safe.
class ProbeMailbox {
 public:
  explicit ProbeMailbox(std::function<void(const v1::ProbeReport&)> on_report = nullptr)
      : on_report_(std::move(on_report)) {}
  void Post(const v1::RunProbe& req);
  bool pending() const { return pending_.load(std::memory_order_relaxed); }
  // The waiting request, waiting up to `timeout` for one to arrive.
  std::optional<v1::RunProbe> Take(std::chrono::milliseconds timeout);
  void Report(const v1::ProbeReport& r) {
    if (on_report_) on_report_(r);
  }

 private:
  std::function<void(const v1::ProbeReport&)> on_report_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<v1::RunProbe> req_;
  std::atomic<bool> pending_{false};
};

// Runs `spec` on `group` (every rank at once) and fills this rank's part of
// the report: per size its mean time per iteration and its count of wrong
// elements; for p2p, the pairs it sent (time) and received (wrong). The
// spec must be complete (controller/probe_merge.h fills the defaults).
// Before each size (each pair) the ranks all-reduce their `stop` flags, so
// a job told to stop leaves a long probe together, at the same point.
Status RunProbe(comm::ProcessGroup& group, const v1::ProbeSpec& spec, int64_t step, v1::ProbeReport* out,
                const std::atomic<bool>* stop = nullptr);

// The sizes a sweep visits: min, min x factor, ... up to max.
std::vector<int64_t> ProbeSizes(const v1::ProbeSpec& spec);

}  // namespace firedrill::agent
