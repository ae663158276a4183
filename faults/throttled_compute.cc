#include "faults/throttled_compute.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace firedrill::faults {

namespace {

constexpr size_t kHealthySteps = 8;  // the healthy stretch is measured on these
constexpr size_t kMinHealthy = 3;    // a slowdown takes hold once this many are measured
constexpr size_t kSteerSteps = 4;    // steps per steering decision, at least
constexpr double kSteerPeriods = 4;  // the quota's periods per steering decision, at least
constexpr double kMinCores = 0.02;   // 4 ms in every 200: a quota still makes progress

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
  StartWindow();
  // Recovered: what it shares from now on is measured from now on, not on
  // its steps before the slowdown (found by review).
  if (factors_.Product() <= 1.0) healthy_.clear();
  if (factors_.Product() > 1.0 || !quota_ || cores_ == 0) return;
  if (Status st = quota_->Unlimit(); !st.ok()) DropQuota(st.message());
  cores_ = 0;
}

double ThrottledCompute::Stretch(const std::vector<Sample>& steps) {
  std::vector<Sample> s;
  double total = 0;
  for (const Sample& x : steps) {
    if (x.cpu_ms <= 0 || x.wall_ms <= 0) continue;
    s.push_back(x);
    total += x.cpu_ms;
  }
  if (s.empty()) return 0;
  std::sort(s.begin(), s.end(),
            [](const Sample& a, const Sample& b) { return a.wall_ms * b.cpu_ms < b.wall_ms * a.cpu_ms; });
  double seen = 0;
  for (const Sample& x : s) {
    seen += x.cpu_ms;
    // One thread cannot compute for longer than it ran: at least 1.
    if (seen >= total / 2) return std::max(1.0, x.wall_ms / x.cpu_ms);
  }
  return std::max(1.0, s.back().wall_ms / s.back().cpu_ms);
}

void ThrottledCompute::OnStep(double compute_ms, double cpu_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  if (++steps_ == 1 || compute_ms <= 0 || cpu_ms <= 0) return;  // the first step warms up
  const Sample step{compute_ms, cpu_ms};
  const double f = factors_.Product();
  // Slowed by the sleep fallback: a slowed step (not a healthy one to
  // measure or share), and no quota to steer.
  if (f > 1.0 && !quota_) return;
  if (f <= 1.0 || (cores_ == 0 && base_stretch_ == 0)) {
    // A healthy step (or one run before the quota took hold): the baseline.
    healthy_.push_back(step);
    if (healthy_.size() > kHealthySteps) healthy_.pop_front();
    if (f <= 1.0 || healthy_.size() < kMinHealthy) return;
    base_stretch_ = Stretch(std::vector<Sample>(healthy_.begin(), healthy_.end()));
    if (base_stretch_ <= 0) return;
    // First guess: the share of a core the training thread got while it
    // computed (1 over its stretch: the quota acts on the bursts, not on
    // the step's average), divided by the slowdown; the steering below
    // corrects it.
    cores_ = std::clamp(1.0 / (base_stretch_ * f), kMinCores, OnlineCpus());
    StartWindow();
    Apply();
    return;
  }
  Steer(step, f);
}

void ThrottledCompute::OnPeers(double stretch) {
  std::lock_guard<std::mutex> lock(mu_);
  // None reported (every rank slowed, or one alone), or this rank is not
  // slowed and steers nothing. At least 1: a mean of ranks that all read
  // 1.0 may come back a rounding below it from the fp32 sums.
  if (!(stretch > 0) || factors_.Product() <= 1.0) return;
  peers_sum_ += std::max(1.0, stretch);
  ++peers_n_;
}

double ThrottledCompute::SharedStretch() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (factors_.Product() > 1.0 || healthy_.empty()) return 0;
  double wall = 0, cpu = 0;
  for (const Sample& x : healthy_) wall += x.wall_ms, cpu += x.cpu_ms;
  return cpu > 0 ? std::max(1.0, wall / cpu) : 0;
}

void ThrottledCompute::StartWindow() {
  window_ = Sample{};
  window_steps_ = 0;
  peers_sum_ = 0;
  peers_n_ = 0;
}

void ThrottledCompute::Steer(const Sample& step, double f) {
  if (base_stretch_ <= 0) return;
  if (cores_ == 0) {  // slowed again (flapping): where it was
    cores_ = resume_cores_ > 0 ? resume_cores_ : kMinCores;
    StartWindow();
    Apply();
    return;
  }
  // Steered on the stretch of several steps together (their wall time over
  // their CPU time, over at least kSteerPeriods of the quota's periods),
  // damped, towards `f` times the reference; the limit is rewritten only
  // when it moves, since each write refills the quota.
  //
  // The reference is what a healthy rank's compute is stretched by now:
  // the mean the job's unslowed ranks reported over the same steps
  // (OnPeers), or, with none, this rank's own before its slowdown. Not its
  // own alone: that was measured on the run's first steps, and once the
  // slowdown held, its compute ran while its peers waited for it, alone on
  // a core, while theirs shared the cores; at 1.8 times its own reference
  // it was barely slower than they were (thermal-throttle's wrong fix
  // verified under the burner at skew 1.03; bench/RESULTS.md). Nor the
  // stretch of its own steps run now and then without the quota: alone on
  // a core for the same reason, they read 1.0-1.1 where the peers read
  // 1.6-1.7.
  //
  // Together, not step by step: a step shorter than the quota's bursts
  // (about 4 ms of compute, against a 4 ms quota) runs whole inside its
  // quota or waits out a period, so single steps read 1 or several times
  // the slowdown, and a median of them chased whichever it read (4 ms
  // steps asked 1.8x took 2.7x-16x of their healthy total).
  window_.wall_ms += step.wall_ms;
  window_.cpu_ms += step.cpu_ms;
  const double wall = window_.wall_ms, cpu = window_.cpu_ms;
  const double period_ms = static_cast<double>(CpuQuota::kQuotaUs) / 1e3 / cores_;
  if (++window_steps_ < kSteerSteps || wall < kSteerPeriods * period_ms) return;
  const double reference = peers_n_ > 0 ? peers_sum_ / peers_n_ : base_stretch_;
  StartWindow();
  if (cpu <= 0) return;
  // One thread cannot compute for longer than it ran: at least 1.
  const double stretch = std::max(1.0, wall / cpu);
  // Stretched less than asked: less CPU; more: more.
  const double next = std::clamp(cores_ * std::sqrt(stretch / (f * reference)), kMinCores, OnlineCpus());
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
  StartWindow();  // the steps around the probe ran without the quota
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
