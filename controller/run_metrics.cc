#include "controller/run_metrics.h"

#include <algorithm>
#include <cstdio>

namespace firedrill::controller {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2) return v[mid];
  const double hi = v[mid];
  return (*std::max_element(v.begin(), v.begin() + mid) + hi) / 2;
}

void FillRankWindow(const std::vector<v1::StepReport>& steps, int window, v1::RankStatus* out) {
  if (steps.empty()) return;
  const size_t n = std::min(steps.size(), static_cast<size_t>(std::max(window, 1)));
  double step = 0, data = 0, fwd = 0, bwd = 0, comm = 0, opt = 0, sps = 0;
  for (size_t i = steps.size() - n; i < steps.size(); ++i) {
    const auto& s = steps[i];
    step += s.step_ms();
    data += s.data_ms();
    fwd += s.forward_ms();
    bwd += s.backward_ms();
    comm += s.comm_ms();
    opt += s.optim_ms();
    sps += s.samples_per_s();
  }
  const double k = static_cast<double>(n);
  out->set_step(steps.back().step());
  out->set_loss(steps.back().loss());
  out->set_step_ms(step / k);
  out->set_data_ms(data / k);
  out->set_forward_ms(fwd / k);
  out->set_backward_ms(bwd / k);
  out->set_comm_ms(comm / k);
  out->set_optim_ms(opt / k);
  out->set_samples_per_s(sps / k);
  out->set_window_steps(static_cast<int>(n));
}

void MarkSlowRanks(double slow_ratio, std::vector<v1::RankStatus>* ranks) {
  std::vector<double> busy;
  for (const auto& r : *ranks) {
    if (r.window_steps() > 0) busy.push_back(r.step_ms() - r.comm_ms());
  }
  const double med = Median(busy);
  for (auto& r : *ranks) {
    if (r.window_steps() == 0 || med <= 0) continue;
    const double ratio = (r.step_ms() - r.comm_ms()) / med;
    r.set_busy_vs_median(ratio);
    r.set_slow(ratio >= slow_ratio);
  }
}

WindowStats MeasureWindow(const std::vector<std::vector<v1::StepReport>>& per_rank, int64_t first_step,
                          int64_t count, int global_batch) {
  WindowStats out;
  if (per_rank.empty() || count <= 0) return out;
  const int64_t last = first_step + count - 1;
  std::vector<double> total_ms, busy_medians, step_ms_all;
  int64_t measured = count;
  for (const auto& steps : per_rank) {
    double total = 0;
    int64_t n = 0;
    std::vector<double> busy;
    for (const auto& s : steps) {
      if (s.step() < first_step || s.step() > last) continue;
      total += s.step_ms();
      busy.push_back(BusyMs(s));
      step_ms_all.push_back(s.step_ms());
      ++n;
    }
    measured = std::min(measured, n);
    if (n > 0) {
      total_ms.push_back(total * static_cast<double>(count) / static_cast<double>(n));
      busy_medians.push_back(Median(busy));
    }
  }
  out.steps = measured;
  if (measured == 0 || total_ms.empty()) return out;
  const double slowest_ms = *std::max_element(total_ms.begin(), total_ms.end());
  out.throughput_samples_per_s = slowest_ms > 0 ? global_batch * static_cast<double>(count) * 1000.0 / slowest_ms : 0;
  out.median_step_ms = Median(step_ms_all);
  const double med_busy = Median(busy_medians);
  out.rank_step_skew = med_busy > 0 ? *std::max_element(busy_medians.begin(), busy_medians.end()) / med_busy : 0;
  return out;
}

v1::Verification Verify(const v1::RunSummary& baseline, const WindowStats& run, const v1::VerifySpec& spec) {
  v1::Verification v;
  v.set_done(true);
  v.set_throughput_samples_per_s(run.throughput_samples_per_s);
  v.set_baseline_samples_per_s(baseline.throughput_samples_per_s());
  const double ratio = baseline.throughput_samples_per_s() > 0
                           ? run.throughput_samples_per_s / baseline.throughput_samples_per_s()
                           : 0;
  v.set_throughput_ratio(ratio);
  v.set_throughput_ratio_min(spec.throughput_vs_baseline_min());
  v.set_rank_step_skew(run.rank_step_skew);
  v.set_rank_step_skew_max(spec.rank_step_skew_max());
  const bool steps_ok = run.steps >= spec.window_steps();
  const bool tput_ok = ratio >= spec.throughput_vs_baseline_min();
  const bool skew_ok = run.rank_step_skew > 0 && run.rank_step_skew <= spec.rank_step_skew_max();
  v.set_passed(steps_ok && tput_ok && skew_ok);
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "throughput %.0f samples/s = %.2fx baseline %.0f (need >= %.2f) %s; rank busy-time skew %.2f "
                "(need <= %.2f) %s; %lld/%d steps measured%s",
                run.throughput_samples_per_s, ratio, baseline.throughput_samples_per_s(),
                spec.throughput_vs_baseline_min(), tput_ok ? "ok" : "FAIL", run.rank_step_skew,
                spec.rank_step_skew_max(), skew_ok ? "ok" : "FAIL", static_cast<long long>(run.steps),
                spec.window_steps(), steps_ok ? "" : " FAIL");
  v.set_detail(buf);
  return v;
}

}  // namespace firedrill::controller
