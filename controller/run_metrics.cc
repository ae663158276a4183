#include "controller/run_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "analysis/straggler.h"

namespace firedrill::controller {

int64_t JobSamplesPerStep(const v1::JobSpec& job) {
  const int model_parallel = std::max(1, job.parallel().tp()) * std::max(1, job.parallel().pp());
  const int64_t replicas = std::max(1, job.world_size() / model_parallel);
  return replicas * job.data().batch_size() * std::max(1, job.grad_accum_steps());
}

void FillRankWindow(const std::vector<v1::StepReport>& steps, int window, v1::RankStatus* out) {
  if (steps.empty()) return;
  const size_t n = std::min(steps.size(), static_cast<size_t>(std::max(window, 1)));
  double step = 0, data = 0, fwd = 0, bwd = 0, comm = 0, opt = 0, sps = 0;
  double tps = 0, pad = 0, comm_total = 0, ckpt = 0, flops = 0, allreduces = 0, allreduce_bytes = 0;
  double tp_comm = 0, pp_wait = 0, bubble = 0;
  for (size_t i = steps.size() - n; i < steps.size(); ++i) {
    const auto& s = steps[i];
    step += s.step_ms();
    data += s.data_ms();
    fwd += s.forward_ms();
    bwd += s.backward_ms();
    comm += s.comm_ms();
    opt += s.optim_ms();
    sps += s.samples_per_s();
    tps += s.tokens_per_s();
    pad += s.padding_fraction();
    comm_total += s.comm_total_ms();
    ckpt += s.checkpoint_ms();
    flops += s.model_flops_per_s();
    allreduces += s.allreduces();
    allreduce_bytes += static_cast<double>(s.allreduce_bytes());
    tp_comm += s.tp_comm_ms();
    pp_wait += s.pp_wait_ms();
    bubble += s.pp_bubble_fraction();
  }
  const double k = static_cast<double>(n);
  const auto& last = steps.back();
  out->set_step(last.step());
  out->set_loss(last.loss());
  out->set_step_ms(step / k);
  out->set_data_ms(data / k);
  out->set_forward_ms(fwd / k);
  out->set_backward_ms(bwd / k);
  out->set_comm_ms(comm / k);
  out->set_optim_ms(opt / k);
  out->set_samples_per_s(sps / k);
  out->set_tokens_per_s(tps / k);
  out->set_padding_fraction(pad / k);
  out->set_comm_total_ms(comm_total / k);
  out->set_checkpoint_ms(ckpt / k);
  out->set_model_flops_per_s(flops / k);
  out->set_allreduces_per_step(allreduces / k);
  out->set_allreduce_bytes_per_step(allreduce_bytes / k);
  if (last.has_mesh()) {
    *out->mutable_mesh() = last.mesh();
    out->set_tp_comm_ms(tp_comm / k);
    out->set_pp_wait_ms(pp_wait / k);
    out->set_pp_bubble_fraction(bubble / k);
  }
  out->set_peak_flops_per_s(last.peak_flops_per_s());
  out->set_cpus(last.cpus());
  out->set_compute_threads(last.compute_threads());
  // Model FLOPs utilisation: useful model FLOPs per second over the rank's
  // measured peak matmul rate.
  out->set_mfu(last.peak_flops_per_s() > 0 ? flops / k / last.peak_flops_per_s() : 0.0);
  out->set_window_steps(static_cast<int>(n));
  // Optimiser state, counters and memory: the last step's values.
  out->set_loss_scale(last.loss_scale());
  out->set_loss_scaling(last.loss_scaling());
  out->set_skipped_total(last.skipped_total());
  out->set_grad_norm(last.grad_norm());
  out->set_lr(last.lr());
  out->set_global_batch(last.global_batch());
  out->set_mem_peak_bytes(last.mem_peak_bytes());
  out->set_mem_activation_peak_bytes(last.mem_activation_peak_bytes());
  out->set_mem_params_bytes(last.mem_params_bytes());
  out->set_mem_grads_bytes(last.mem_grads_bytes());
  out->set_mem_optim_bytes(last.mem_optim_bytes());
}

const std::vector<std::string>& WithheldSettings() {
  static const std::vector<std::string> kNames = {"lr", "loss_scale", "global_batch"};
  return kNames;
}

void MarkSlowRanks(double slow_ratio, std::vector<v1::RankStatus>* ranks) {
  std::vector<double> busy;
  for (const auto& r : *ranks) {
    if (r.window_steps() > 0) busy.push_back(analysis::RankBusyMs(r));
  }
  const double med = Median(busy);
  for (auto& r : *ranks) {
    if (r.window_steps() == 0 || med <= 0) continue;
    const double ratio = analysis::RankBusyMs(r) / med;
    r.set_busy_vs_median(ratio);
    r.set_slow(ratio >= slow_ratio);
  }
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

namespace {

// One rank's stretch over blocks of kStretchBlockSteps timed steps (the
// median block; a lone partial block if no block filled), and how many of
// its steps carried thread times.
struct Stretch {
  std::vector<double> blocks;
  int timed_steps = 0;
  double busy = 0, cpu = 0;  // the block being filled
  int in_block = 0;

  void Add(const v1::StepReport& s) {
    // A checkpoint write is the job's cadence, not a rank's pace: left out
    // (a write every step would otherwise add wall time to every block and
    // dilute a straggler's stretch).
    const double own_ms = BusyMs(s) - s.checkpoint_ms();
    if (s.thread_cpu_ns() <= 0 || own_ms <= 0) return;
    ++timed_steps;
    busy += own_ms;
    cpu += static_cast<double>(s.thread_cpu_ns()) / 1e6;
    if (++in_block < kStretchBlockSteps) return;
    blocks.push_back(busy / cpu);
    busy = cpu = 0;
    in_block = 0;
  }
  double Rate() const { return blocks.empty() && in_block > 0 ? busy / cpu : Median(blocks); }
};

}  // namespace

WindowStats MeasureWindow(const std::vector<std::vector<v1::StepReport>>& per_rank, int64_t first_step,
                          int64_t count, int global_batch) {
  WindowStats out;
  if (per_rank.empty() || count <= 0) return out;
  const int64_t last = first_step + count - 1;
  std::vector<double> rank_step_ms, rank_busy_ms, rank_stretch, step_ms_all;
  bool stretch_everywhere = true;
  // Steps per ms of the slowest rank over its window, end to end (a rank
  // that reported fewer steps is rated on its own).
  double slowest_rate = std::numeric_limits<double>::infinity();
  double data = 0, compute = 0, comm = 0, pad = 0, tokens = 0, loss = 0, bubble = 0, tp_comm = 0;
  int64_t n = 0, skipped = 0;
  int64_t measured = count;
  for (const auto& steps : per_rank) {
    std::vector<double> step_ms, busy, tps;
    Stretch stretch;
    for (const auto& s : steps) {
      if (s.step() < first_step || s.step() > last) continue;
      step_ms.push_back(s.step_ms());
      busy.push_back(BusyMs(s));
      stretch.Add(s);
      tps.push_back(s.tokens_per_s());
      step_ms_all.push_back(s.step_ms());
      data += s.data_ms();
      compute += s.forward_ms() + s.backward_ms();
      comm += s.comm_ms();
      pad += s.padding_fraction();
      bubble += s.pp_bubble_fraction();
      tp_comm += s.tp_comm_ms();
      loss += s.loss();  // NaN and inf stay in the sum: a non-finite step shows
      skipped += s.skipped() ? 1 : 0;
      ++n;
    }
    measured = std::min(measured, static_cast<int64_t>(step_ms.size()));
    double sum = 0;
    for (double ms : step_ms) sum += ms;
    if (sum > 0) slowest_rate = std::min(slowest_rate, static_cast<double>(step_ms.size()) / sum);
    if (!step_ms.empty()) {
      rank_step_ms.push_back(Median(step_ms));
      rank_busy_ms.push_back(Percentile(busy, kBusyQuantile));
      // Half the steps at least: a rank whose thread times were mostly
      // missing is rated with the others on busy time instead.
      if (stretch.timed_steps * 2 < static_cast<int>(step_ms.size())) stretch_everywhere = false;
      rank_stretch.push_back(stretch.Rate());
      tokens += Median(tps);
    }
  }
  out.steps = measured;
  if (measured == 0 || rank_step_ms.empty()) return out;
  const double job_step_ms = *std::max_element(rank_step_ms.begin(), rank_step_ms.end());
  out.throughput_samples_per_s = job_step_ms > 0 ? global_batch * 1000.0 / job_step_ms : 0;
  out.clock_samples_per_s = std::isfinite(slowest_rate) ? global_batch * 1000.0 * slowest_rate : 0;
  out.tokens_per_s = tokens;
  out.median_step_ms = Median(step_ms_all);
  const std::vector<double>& own = stretch_everywhere ? rank_stretch : rank_busy_ms;
  const double med_own = Median(own);
  out.rank_step_skew = med_own > 0 ? *std::max_element(own.begin(), own.end()) / med_own : 0;
  out.rank_skew_of_stretch = stretch_everywhere;
  out.data_ms = data / static_cast<double>(n);
  out.compute_ms = compute / static_cast<double>(n);
  out.comm_ms = comm / static_cast<double>(n);
  out.padding_fraction = pad / static_cast<double>(n);
  out.pp_bubble_fraction = bubble / static_cast<double>(n);
  out.tp_comm_ms = tp_comm / static_cast<double>(n);
  out.mean_loss = loss / static_cast<double>(n);
  out.skipped_fraction = static_cast<double>(skipped) / static_cast<double>(n);
  return out;
}

double LossRatio(const WindowStats& healthy, const WindowStats& fixed) {
  if (!std::isfinite(fixed.mean_loss) || !std::isfinite(healthy.mean_loss) || !(healthy.mean_loss > 0))
    return std::numeric_limits<double>::infinity();
  return fixed.mean_loss / healthy.mean_loss;
}

v1::MetricsRow MetricsRowOf(const v1::StepReport& s) {
  v1::MetricsRow r;
  r.set_step(s.step());
  r.set_loss(s.loss());
  r.set_grad_norm(s.grad_norm());
  r.set_loss_scale(s.loss_scale());
  r.set_loss_scaling(s.loss_scaling());
  r.set_skipped(s.skipped());
  r.set_skipped_total(s.skipped_total());
  r.set_lr(s.lr());
  r.set_samples_per_s(s.samples_per_s());
  r.set_tokens_per_s(s.tokens_per_s());
  r.set_step_ms(s.step_ms());
  r.set_global_batch(s.global_batch());
  r.set_consumed_samples(s.consumed_samples());
  r.set_checkpoint_ms(s.checkpoint_ms());
  r.set_end_unix_ms(s.end_unix_ns() / 1000000);
  return r;
}

void AppendHistory(const v1::StepReport& s, size_t cap, History* h) {
  if (s.step() % h->stride != 0) return;
  h->rows.push_back(MetricsRowOf(s));
  if (h->rows.size() < std::max<size_t>(cap, 2)) return;
  const int64_t next = 2 * h->stride;
  h->rows.erase(std::remove_if(h->rows.begin(), h->rows.end(),
                               [&](const v1::MetricsRow& r) { return r.step() % next != 0; }),
                h->rows.end());
  h->stride = next;
}

double Throughput(const WindowStats& w, const std::string& unit) {
  return unit == "tokens" ? w.tokens_per_s : w.throughput_samples_per_s;
}

void FillSummary(const WindowStats& w, v1::RunSummary* out) {
  out->set_throughput_samples_per_s(w.throughput_samples_per_s);
  out->set_tokens_per_s(w.tokens_per_s);
  out->set_median_step_ms(w.median_step_ms);
  out->set_rank_step_skew(w.rank_step_skew);
  out->set_data_ms(w.data_ms);
  out->set_compute_ms(w.compute_ms);
  out->set_comm_ms(w.comm_ms);
  out->set_padding_fraction(w.padding_fraction);
  out->set_clock_samples_per_s(w.clock_samples_per_s);
  out->set_pp_bubble_fraction(w.pp_bubble_fraction);
  out->set_tp_comm_ms(w.tp_comm_ms);
}

bool VerdictDecided(const std::vector<MeasuredPair>& pairs, int planned, const v1::VerifySpec& spec) {
  const int measured = static_cast<int>(pairs.size());
  if (measured >= planned) return true;
  if (planned % 2 == 0 || measured == 0) return false;
  // The rest at their best, and at their worst: a verdict that holds for
  // both holds for anything between.
  MeasuredPair best, worst;
  for (MeasuredPair* p : {&best, &worst}) {
    p->healthy.throughput_samples_per_s = p->healthy.tokens_per_s = 1;
    p->healthy.mean_loss = 1;
    p->fixed.steps = spec.window_steps();
  }
  best.fixed.throughput_samples_per_s = best.fixed.tokens_per_s = std::numeric_limits<double>::max();
  best.fixed.rank_step_skew = 1;
  best.fixed.mean_loss = 0;
  best.fixed.skipped_fraction = 0;
  best.fixed.pp_bubble_fraction = 0;
  worst.fixed.throughput_samples_per_s = worst.fixed.tokens_per_s = 0;
  worst.fixed.rank_step_skew = std::numeric_limits<double>::max();
  worst.fixed.mean_loss = std::numeric_limits<double>::infinity();
  worst.fixed.skipped_fraction = 1;
  worst.fixed.pp_bubble_fraction = 1;
  // Skew fails at both ends (none measured reads 0): the worst is either.
  MeasuredPair unmeasured = worst;
  unmeasured.fixed.rank_step_skew = 0;
  auto passes_with = [&](const MeasuredPair& rest) {
    std::vector<MeasuredPair> all = pairs;
    all.insert(all.end(), static_cast<size_t>(planned - measured), rest);
    return Verify(all, spec).passed();
  };
  return !passes_with(best) || (passes_with(worst) && passes_with(unmeasured));
}

v1::Verification Verify(const std::vector<MeasuredPair>& pairs, const v1::VerifySpec& spec) {
  const std::string unit = spec.throughput_unit() == "tokens" ? "tokens" : "samples";
  v1::Verification v;
  v.set_done(true);
  v.set_unit(unit);
  v.set_throughput_ratio_min(spec.throughput_vs_baseline_min());
  v.set_rank_step_skew_max(spec.rank_step_skew_max());
  const bool judge_loss = spec.loss_vs_baseline_max() > 0, judge_skips = spec.has_skipped_steps_max();
  const bool judge_bubble = spec.has_pp_bubble_max();
  std::vector<double> ratios, skews, healthy, fixed, loss_ratios, skips, bubbles;
  size_t of_stretch = 0;  // pairs whose skew is of stretch
  int64_t steps = pairs.empty() ? 0 : INT64_MAX;
  for (const auto& p : pairs) {
    const double a = Throughput(p.healthy, unit), b = Throughput(p.fixed, unit);
    v1::VerifyPair* vp = v.add_pairs();
    vp->set_healthy(a);
    vp->set_fixed(b);
    vp->set_ratio(a > 0 ? b / a : 0);
    vp->set_fixed_skew(p.fixed.rank_step_skew);
    vp->set_healthy_loss(p.healthy.mean_loss);
    vp->set_fixed_loss(p.fixed.mean_loss);
    vp->set_fixed_skipped_fraction(p.fixed.skipped_fraction);
    vp->set_fixed_bubble(p.fixed.pp_bubble_fraction);
    bubbles.push_back(p.fixed.pp_bubble_fraction);
    loss_ratios.push_back(LossRatio(p.healthy, p.fixed));
    skips.push_back(p.fixed.skipped_fraction);
    ratios.push_back(vp->ratio());
    skews.push_back(p.fixed.rank_step_skew);
    of_stretch += p.fixed.rank_skew_of_stretch ? 1 : 0;
    healthy.push_back(a);
    fixed.push_back(b);
    steps = std::min(steps, p.fixed.steps);
  }
  const double ratio = Median(ratios), skew = Median(skews);
  v.set_throughput_ratio(ratio);
  v.set_throughput_samples_per_s(Median(fixed));
  v.set_baseline_samples_per_s(Median(healthy));
  v.set_rank_step_skew(skew);
  const bool steps_ok = !pairs.empty() && steps >= spec.window_steps();
  const bool tput_ok = ratio >= spec.throughput_vs_baseline_min();
  const bool skew_ok = skew > 0 && skew <= spec.rank_step_skew_max();
  const double loss_ratio = Median(loss_ratios), skipped = Median(skips);
  const bool loss_ok = !judge_loss || (!pairs.empty() && loss_ratio <= spec.loss_vs_baseline_max());
  const bool skips_ok = !judge_skips || (!pairs.empty() && skipped <= spec.skipped_steps_max());
  const double bubble = Median(bubbles);
  const bool bubble_ok = !judge_bubble || (!pairs.empty() && bubble <= spec.pp_bubble_max());
  if (judge_bubble) {
    v.set_pp_bubble(bubble);
    v.set_pp_bubble_max(spec.pp_bubble_max());
  }
  if (judge_loss) {
    v.set_loss_ratio(loss_ratio);
    v.set_loss_ratio_max(spec.loss_vs_baseline_max());
  }
  if (judge_loss || judge_skips) v.set_skipped_fraction(skipped);
  v.set_passed(steps_ok && tput_ok && skew_ok && loss_ok && skips_ok && bubble_ok);
  auto list = [](const std::vector<double>& xs) {
    std::string each;
    for (double r : xs) {
      char b[16];
      std::snprintf(b, sizeof(b), "%.2f", r);
      each += (each.empty() ? "" : ", ") + std::string(b);
    }
    return each;
  };
  const std::string each = list(ratios);
  const char* skew_name = of_stretch == 0 || of_stretch == pairs.size()
                              ? SkewName(of_stretch > 0)
                              : "rank skew (stretch on some pairs, busy time on others)";
  char buf[640];
  std::snprintf(
      buf, sizeof(buf),
      "throughput %.0f %s/s = %.2fx the healthy job's %.0f (median of %zu healthy/fixed pairs: %s), "
      "need >= %.2f %s; %s %.2f (need <= %.2f) %s; %lld/%d steps measured%s",
      Median(fixed), unit.c_str(), ratio, Median(healthy), pairs.size(), each.c_str(),
      spec.throughput_vs_baseline_min(), tput_ok ? "ok" : "FAIL", skew_name, skew, spec.rank_step_skew_max(),
      skew_ok ? "ok" : "FAIL", static_cast<long long>(pairs.empty() ? 0 : steps), spec.window_steps(),
      steps_ok ? "" : " FAIL");
  std::string detail = buf;
  if (judge_loss) {
    std::vector<double> fixed_loss, healthy_loss;
    // NaN sorts nowhere: a non-finite loss is shown as inf.
    auto finite_or_inf = [](double x) { return std::isnan(x) ? std::numeric_limits<double>::infinity() : x; };
    for (const auto& p : pairs) {
      fixed_loss.push_back(finite_or_inf(p.fixed.mean_loss));
      healthy_loss.push_back(finite_or_inf(p.healthy.mean_loss));
    }
    std::snprintf(buf, sizeof(buf),
                  "; mean loss %.4g over the same steps = %.2fx the healthy job's %.4g (pairs: %s), need <= %.2f %s",
                  Median(fixed_loss), loss_ratio, Median(healthy_loss), list(loss_ratios).c_str(),
                  spec.loss_vs_baseline_max(), loss_ok ? "ok" : "FAIL");
    detail += buf;
  }
  if (judge_skips) {
    std::snprintf(buf, sizeof(buf), "; optimiser steps skipped %.1f%% (need <= %.1f%%) %s", 100 * skipped,
                  100 * spec.skipped_steps_max(), skips_ok ? "ok" : "FAIL");
    detail += buf;
  }
  if (judge_bubble) {
    std::snprintf(buf, sizeof(buf),
                  "; pipeline bubble %.2f of the pipeline's span (pairs: %s), need <= %.2f %s", bubble,
                  list(bubbles).c_str(), spec.pp_bubble_max(), bubble_ok ? "ok" : "FAIL");
    detail += buf;
  }
  v.set_detail(detail);
  return v;
}

CadenceVerdict JudgeCadence(const CadenceInputs& in, const v1::VerifySpec& spec) {
  CadenceVerdict v;
  const double mtbf = spec.mtbf_s();
  v.min = spec.goodput_vs_best_min();
  char buf[768];
  if (in.writes == 0 || in.write_ms <= 0 || in.step_ms <= 0) {
    v.detail = "goodput: no checkpoint write of this job could be measured, so its cost is unknown FAIL";
    return v;
  }
  const double write_s = in.write_ms / 1000, step_s = in.step_ms / 1000;
  // Of each interval and its write, the interval trains; a failure loses
  // half of an interval and its write on average.
  auto goodput = [&](double interval_s) {
    return std::max(0.0, interval_s / (interval_s + write_s) - (interval_s + write_s) / 2 / mtbf);
  };
  const double best_interval_s = std::sqrt(2 * write_s * mtbf);
  v.best = goodput(best_interval_s);
  v.best_every = std::max<int64_t>(1, std::llround(best_interval_s / step_s));
  std::snprintf(buf, sizeof(buf),
                "the best cadence for these costs (Young: sqrt(2 x %.0f ms x %.0f s) = %.1f s, about every %lld "
                "steps) keeps %.1f%%, need >= %.2f of it",
                in.write_ms, mtbf, best_interval_s, static_cast<long long>(v.best_every), 100 * v.best, v.min);
  const std::string best = buf;
  if (in.every <= 0) {
    v.detail = "goodput: no checkpoints, so a failure (every " + std::to_string(std::llround(mtbf)) +
               " s on average) loses all the training since the start; " + best + " FAIL";
    return v;
  }
  const double interval_s = static_cast<double>(in.every) * step_s;
  const double write_share = write_s / (interval_s + write_s), lost_share = (interval_s + write_s) / 2 / mtbf;
  v.goodput = goodput(interval_s);
  v.passed = v.best > 0 && v.goodput >= v.min * v.best;
  std::snprintf(buf, sizeof(buf),
                "goodput %.1f%%: a checkpoint every %lld steps of %.1f ms = %.2f s, a write of %.0f ms (measured now: the slowest "
                "rank's median; %d writes over the ranks) takes %.1f%% of the time, and a failure every %.0f s loses half an "
                "interval, %.1f%%; ",
                100 * v.goodput, static_cast<long long>(in.every), in.step_ms, interval_s, in.write_ms, in.writes,
                100 * write_share, mtbf, 100 * lost_share);
  v.detail = std::string(buf) + best + (v.passed ? " ok" : " FAIL");
  return v;
}

int64_t FaultOnsetUnixMs(const google::protobuf::RepeatedPtrField<v1::ResolvedFault>& faults,
                         const v1::StepReport& s) {
  if (faults.empty() || s.start_unix_ns() <= 0) return 0;
  int64_t first = INT64_MAX;
  for (const auto& f : faults) first = std::min(first, f.trigger_step());
  return s.step() >= first ? s.start_unix_ns() / 1000000 : 0;
}

}  // namespace firedrill::controller
