#include "faults/throttled_compute.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/stats.h"

namespace firedrill::faults {

namespace {

constexpr size_t kHealthySteps = 8;  // the healthy time is the median of these
constexpr size_t kMinHealthy = 3;    // a slowdown takes hold once this many are measured
constexpr size_t kSteerSteps = 4;    // steps per steering decision
constexpr double kMinCores = 0.02;   // 4 ms in every 200: a quota still makes progress

template <typename Values>
double MedianOf(const Values& v) {
  return Median(std::vector<double>(v.begin(), v.end()));
}

double Seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double OnlineCpus() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<double>(n) : 1.0;
}

}  // namespace

ThrottledCompute::ThrottledCompute(std::string cgroup) : cgroup_(std::move(cgroup)) {}

ThrottledCompute::~ThrottledCompute() = default;  // the quota lifts itself and goes

std::string ThrottledCompute::Capability(const std::string& probe_name) {
  auto q = CpuQuota::Create(probe_name);
  if (!q.ok()) return "a slowed rank here sleeps out its slowdown (no CPU quota: " + q.status().message() + ")";
  return std::string("a slowed rank here runs under a CPU quota (cgroup ") + ((*q)->v2() ? "v2" : "v1") + ")";
}

void ThrottledCompute::Slow(FaultId id, double factor) {
  factors_.Set(id, factor);
  std::lock_guard<std::mutex> lock(mu_);
  if (tried_) return;
  tried_ = true;
  if (cgroup_.empty()) {
    fallback_ = "this rank has no process of its own to throttle";
    return;
  }
  (void)CpuQuota::CleanLeftovers();
  auto q = CpuQuota::Create(cgroup_);
  if (!q.ok()) {
    fallback_ = q.status().message();
    return;
  }
  // The device is what is slow: the training thread alone where the
  // kernel allows it, the process where it does not.
  Status st = (*q)->JoinThisThread();
  if (!st.ok()) st = (*q)->Join();
  if (!st.ok()) {
    fallback_ = st.message();
    return;
  }
  quota_ = std::move(q).value();
}

void ThrottledCompute::Restore(FaultId id) {
  factors_.Erase(id);
  std::lock_guard<std::mutex> lock(mu_);
  window_.clear();
  if (factors_.Product() > 1.0 || !quota_ || cores_ == 0) return;
  if (Status st = quota_->Unlimit(); !st.ok()) DropQuota(st.message());
  cores_ = 0;
}

void ThrottledCompute::OnStep(double compute_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  const double f = factors_.Product();
  if (f <= 1.0 || !quota_ || (cores_ == 0 && base_ms_ == 0)) {
    // A healthy step (or one run before the quota took hold): the baseline.
    const double cpu = Seconds(CLOCK_THREAD_CPUTIME_ID);
    if (compute_ms > 0 && last_cpu_s_ > 0) {
      healthy_ms_.push_back(compute_ms);
      healthy_cpu_s_.push_back(cpu - last_cpu_s_);
    }
    last_cpu_s_ = cpu;
    if (healthy_ms_.size() > kHealthySteps) {
      healthy_ms_.pop_front();
      healthy_cpu_s_.pop_front();
    }
    if (f <= 1.0 || !quota_ || healthy_ms_.size() < kMinHealthy) return;
    base_ms_ = MedianOf(healthy_ms_);
    // First guess: the share of a core the training thread got while it
    // computed (its CPU time per step over its compute time: the quota acts
    // on the bursts, not on the step's average), divided by the slowdown;
    // the steering below corrects it.
    double cpu_s = 0, wall_s = 0;
    for (size_t i = 0; i < healthy_ms_.size(); ++i) {
      cpu_s += healthy_cpu_s_[i];
      wall_s += healthy_ms_[i] / 1e3;
    }
    const double share = wall_s > 0 ? std::clamp(cpu_s / wall_s, 0.05, 1.0) : 1.0;
    cores_ = std::clamp(share / f, kMinCores, OnlineCpus());
    window_.clear();
    Apply();
    return;
  }
  Steer(compute_ms, f);
}

void ThrottledCompute::Steer(double compute_ms, double f) {
  if (compute_ms <= 0 || base_ms_ <= 0) return;
  if (cores_ == 0) {  // slowed again (flapping): where it was
    cores_ = resume_cores_ > 0 ? resume_cores_ : kMinCores;
    window_.clear();
    Apply();
    return;
  }
  // Steered on the median of a few steps (a step on shared cores varies by
  // +-30%, a throttled one by up to a period, and now and then one stalls
  // for several times its length, which a mean would chase), damped; the
  // limit is rewritten only when it moves, since each write refills the
  // quota.
  window_.push_back(compute_ms);
  if (window_.size() < kSteerSteps) return;
  const double typical = MedianOf(window_);
  window_.clear();
  // Compute slower than asked: more CPU; faster: less.
  const double next = std::clamp(cores_ * std::sqrt(typical / (f * base_ms_)), kMinCores, OnlineCpus());
  if (std::abs(next / cores_ - 1.0) < 0.05) return;
  cores_ = next;
  Apply();
}

void ThrottledCompute::Apply() {
  resume_cores_ = cores_;
  if (paused_) return;  // Resume() applies it
  if (Status st = quota_->Limit(cores_); !st.ok()) DropQuota(st.message());
}

void ThrottledCompute::DropQuota(const std::string& why) {
  // A quota that cannot be set must not leave the rank unslowed: the sleep
  // fallback takes over (the quota lifts itself as it goes).
  fallback_ = why;
  quota_.reset();
  cores_ = 0;
}

void ThrottledCompute::Pause() {
  std::lock_guard<std::mutex> lock(mu_);
  if (paused_ || !quota_) return;
  paused_ = true;
  if (cores_ > 0) {
    if (Status st = quota_->Unlimit(); !st.ok()) DropQuota(st.message());
  }
}

void ThrottledCompute::Resume() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!paused_) return;
  paused_ = false;
  if (quota_ && cores_ > 0) Apply();
}

double ThrottledCompute::sleep_factor() const {
  std::lock_guard<std::mutex> lock(mu_);
  return quota_ ? 1.0 : factors_.Product();
}

std::string ThrottledCompute::fallback() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fallback_;
}

CpuStat ThrottledCompute::Stat() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!quota_) return {};
  auto s = quota_->Stat();
  return s.ok() ? *s : CpuStat{};
}

double ThrottledCompute::limit_cores() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cores_;
}

}  // namespace firedrill::faults
