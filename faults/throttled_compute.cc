#include "faults/throttled_compute.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/log.h"

namespace firedrill::faults {

namespace {

constexpr size_t kHealthySteps = 8;  // the healthy time is the median of these
constexpr size_t kMinHealthy = 3;    // a slowdown takes hold once this many are measured
constexpr double kMinCores = 0.02;   // 2 of every 100 ms: a quota still makes progress
constexpr size_t kSteerSteps = 4;    // steps per steering decision

double Median(std::deque<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
  Status st = q.ok() ? (*q)->Join() : q.status();
  if (!st.ok()) {
    fallback_ = st.message();
    spdlog::warn("no CPU quota for the slowdown ({}); it is slept out instead", fallback_);
    return;
  }
  quota_ = std::move(q).value();
}

void ThrottledCompute::Restore(FaultId id) {
  factors_.Erase(id);
  std::lock_guard<std::mutex> lock(mu_);
  if (factors_.Product() > 1.0 || !quota_ || cores_ == 0) return;
  if (Status st = quota_->Unlimit(); !st.ok()) spdlog::warn("lifting the CPU quota: {}", st.message());
  cores_ = 0;
}

void ThrottledCompute::OnStep(double compute_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  const double f = factors_.Product();
  if (f <= 1.0 || !quota_ || (cores_ == 0 && base_ms_ == 0)) {
    // A healthy step (or one run before the quota took hold): the baseline.
    if (compute_ms > 0) healthy_ms_.push_back(compute_ms);
    if (healthy_ms_.size() > kHealthySteps) healthy_ms_.pop_front();
    cpu_marks_.push_back({Seconds(CLOCK_MONOTONIC), Seconds(CLOCK_PROCESS_CPUTIME_ID)});
    if (cpu_marks_.size() > kHealthySteps + 1) cpu_marks_.pop_front();
    if (f <= 1.0 || !quota_ || healthy_ms_.size() < kMinHealthy || cpu_marks_.size() < 2) return;
    base_ms_ = Median(healthy_ms_);
    // First guess: the CPU the process used per second while healthy,
    // divided by the slowdown; the steering below corrects it.
    const auto& a = cpu_marks_.front();
    const auto& b = cpu_marks_.back();
    const double rate = b.wall > a.wall ? (b.cpu - a.cpu) / (b.wall - a.wall) : 1.0;
    cores_ = std::clamp(rate / f, kMinCores, OnlineCpus());
    Apply();
    return;
  }
  Steer(compute_ms, f);
}

void ThrottledCompute::Steer(double compute_ms, double f) {
  if (compute_ms <= 0 || base_ms_ <= 0) return;
  if (cores_ == 0) {  // slowed again (flapping): where it was
    cores_ = resume_cores_ > 0 ? resume_cores_ : kMinCores;
    Apply();
    return;
  }
  // Steered on the mean of a few steps (a step on shared cores varies by
  // +-30%, and a throttled one by up to a period), damped; the limit is
  // rewritten only when it moves, since each write refills the quota.
  window_.push_back(compute_ms);
  if (window_.size() < kSteerSteps) return;
  double mean = 0;
  for (double v : window_) mean += v / static_cast<double>(window_.size());
  window_.clear();
  // Compute slower than asked: more CPU; faster: less.
  const double next = std::clamp(cores_ * std::sqrt(mean / (f * base_ms_)), kMinCores, OnlineCpus());
  if (std::abs(next / cores_ - 1.0) < 0.05) return;
  cores_ = next;
  Apply();
}

void ThrottledCompute::Apply() {
  resume_cores_ = cores_;
  if (Status st = quota_->Limit(cores_); !st.ok() && fallback_.empty()) {
    spdlog::warn("setting the CPU quota: {}", st.message());
    fallback_ = st.message();
  }
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
