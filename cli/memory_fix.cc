#include "cli/memory_fix.h"

#include <algorithm>
#include <cmath>

#include "cli/plan.h"
#include "common/format.h"
#include "scenario/job_keys.h"

namespace firedrill::cli {

namespace {

using parallel::Strategy;
using parallel::Workload;

constexpr int64_t kMiB = 1024 * 1024;

struct Candidate {
  std::string name;
  Workload w;
  Strategy s;
  std::vector<std::pair<std::string, std::string>> settings;
  double cost = 1;
};

}  // namespace

StatusOr<std::vector<MemoryRemedy>> MemoryRemedies(const v1::JobSpec& job,
                                                   const std::vector<std::string>& may_change) {
  auto shape = ShapeOfJob(job);
  if (!shape.ok()) return shape.status();
  const parallel::GptShape& g = *shape;
  const Workload w = WorkloadOfJob(job);
  const int world = std::max(1, job.world_size());
  Strategy now;
  now.tp = std::max(1, job.parallel().tp());
  now.pp = std::max(1, job.parallel().pp());
  now.dp = std::max(1, world / (now.tp * now.pp));
  now.zero_stage = job.optim().zero_stage();
  now.gpipe = job.parallel().schedule() == "gpipe";
  const bool split_ok = scenario::KeyAllowed("data.batch_size", may_change) &&
                        scenario::KeyAllowed("grad_accum_steps", may_change);
  const bool accumulate_ok = scenario::KeyAllowed("grad_accum_steps", may_change);
  const bool fp32 = job.precision().empty() || job.precision() == "fp32";

  std::vector<Candidate> all;
  // The micro-batch split into k, accumulated k times as often: the same
  // samples a step, the activations of one k-th.
  auto splits = [&](const Candidate& base) {
    if (!split_ok) return;
    for (int k : {2, 4, 8, 16}) {
      if (base.w.micro_batch % k != 0) continue;
      Candidate c = base;
      c.w.micro_batch = base.w.micro_batch / k;
      c.w.micro_batches = base.w.micro_batches * k;
      c.name += (c.name.empty() ? "" : ", ") + std::string("micro-batch ") + std::to_string(c.w.micro_batch) +
                " x " + std::to_string(c.w.micro_batches);
      // Accumulation's own setting last: a layout's may already name it.
      c.settings.erase(std::remove_if(c.settings.begin(), c.settings.end(),
                                      [](const auto& kv) { return kv.first == "grad_accum_steps"; }),
                       c.settings.end());
      c.settings.push_back({"data.batch_size", std::to_string(c.w.micro_batch)});
      c.settings.push_back({"grad_accum_steps", std::to_string(c.w.micro_batches)});
      // Smaller matrix products run less efficiently, and every
      // micro-batch pays the step's fixed costs again.
      c.cost *= 1 + 0.08 * std::log2(static_cast<double>(k));
      all.push_back(c);
    }
  };
  Candidate base{"", w, now, {}, 1.0};
  // Partitioning the optimiser state over the replicas: the gradient
  // all-reduce, then an all-gather of the updated partitions. Free on a
  // GPU's links, not on these cores: adamw-migration's AdamW job took 119
  // to 128 against 71 to 77 ms a step with it (`firedrill-train`, gradients
  // over Gloo; bench/RESULTS.md), so a split of the micro-batch or
  // recomputation, where either fits, costs less.
  const bool zero_ok = now.zero_stage == 0 && now.tp * now.pp == 1 && now.dp > 1;
  constexpr double kZeroCost = 1.6;
  if (zero_ok) {
    Candidate c = base;
    c.name = "ZeRO-1";
    c.s.zero_stage = 1;
    c.settings = {{"optim.zero_stage", "1"}};
    c.cost = kZeroCost;
    all.push_back(c);
  }
  splits(base);
  if (zero_ok) {
    Candidate z = all.front();  // ZeRO-1, above
    splits(z);
  }
  // Recomputing each block's activations in backward: a second forward,
  // about a third of a step's compute.
  if (!w.activation_checkpointing) {
    Candidate c = base;
    c.name = "activation checkpointing";
    c.w.activation_checkpointing = true;
    c.settings = {{"model.activation_checkpointing", "true"}};
    c.cost = 1.33;
    all.push_back(c);
    splits(c);
    if (zero_ok) {
      Candidate z = c;
      z.name = "ZeRO-1, activation checkpointing";
      z.s.zero_stage = 1;
      z.settings.push_back({"optim.zero_stage", "1"});
      z.cost *= kZeroCost;
      all.push_back(z);
    }
  }
  // Another layout: the model split over tp x pp ranks, the global batch
  // kept by accumulating as many more micro-batches as replicas are lost.
  // (What the trainer's layouts need: fp32, no ZeRO, no checkpoints, the
  // micro-batch losses averaged and the gradients all-reduced once a step.)
  const bool layouts_ok = fp32 && now.zero_stage == 0 && job.checkpoint().every() <= 0 &&
                          job.checkpoint().resume_from().empty() &&
                          job.optim().accumulation_loss() != "sum" &&
                          job.comm().accumulation_sync() != "every_micro_batch";
  if (layouts_ok) {
    for (const Strategy& s : parallel::CandidateStrategies(world, g)) {
      if (s.zero_stage != 0 || s.tp * s.pp == 1 || (s.tp == now.tp && s.pp == now.pp)) continue;
      if (now.dp % s.dp != 0) continue;
      const int m = w.micro_batches * (now.dp / s.dp);
      if (m != w.micro_batches && !accumulate_ok) continue;
      Candidate c = base;
      c.s = s;
      c.s.gpipe = now.gpipe;
      c.w.micro_batches = m;
      c.name = s.Name() + (m != w.micro_batches ? ", " + std::to_string(m) + " micro-batches" : "");
      c.settings.clear();
      if (s.tp != now.tp) c.settings.push_back({"parallel.tp", std::to_string(s.tp)});
      if (s.pp != now.pp) c.settings.push_back({"parallel.pp", std::to_string(s.pp)});
      if (m != w.micro_batches) c.settings.push_back({"grad_accum_steps", std::to_string(m)});
      // On these cores a tensor-parallel step moves activations twice per
      // block (bench/RESULTS.md: TP2 at 0.45x DP2's samples/s), a pipeline
      // idles its bubble.
      const double bubble = s.pp > 1 ? static_cast<double>(s.pp - 1) / (m + s.pp - 1) : 0;
      c.cost = (s.tp > 1 ? 1.0 + 0.6 * (s.tp - 1) : 1.0) / (1 - bubble) * 1.05;
      all.push_back(c);
      if (s.pp > 1) splits(c);  // more, smaller micro-batches: a smaller bubble and less held
    }
  }
  const int64_t budget = static_cast<int64_t>(job.memory().device_budget_mb() * kMiB);
  std::vector<MemoryRemedy> out;
  for (const auto& c : all) {
    const parallel::StrategyPlan p = parallel::PlanStrategy(g, c.w, c.s, budget);
    int64_t worst = 0;
    for (const auto& st : p.stages) worst = std::max(worst, st.total());
    out.push_back({c.name, c.settings, worst, c.cost});
  }
  std::stable_sort(out.begin(), out.end(), [](const MemoryRemedy& a, const MemoryRemedy& b) {
    return a.cost != b.cost ? a.cost < b.cost : a.predicted_bytes < b.predicted_bytes;
  });
  return out;
}

AutopilotFinding PlanMemoryFix(const AutopilotFinding& oom, const v1::JobSpec& job,
                               const std::vector<std::string>& may_change, double headroom) {
  const double budget = job.memory().device_budget_mb() * kMiB;
  if (budget <= 0) return oom;
  auto remedies = MemoryRemedies(job, may_change);
  if (!remedies.ok() || remedies->empty()) return oom;
  const auto shape = ShapeOfJob(job);
  const parallel::StrategyPlan as_is = parallel::PlanStrategy(
      *shape, WorkloadOfJob(job),
      [&] {
        Strategy s;
        s.tp = std::max(1, job.parallel().tp());
        s.pp = std::max(1, job.parallel().pp());
        s.dp = std::max(1, job.world_size() / (s.tp * s.pp));
        s.zero_stage = job.optim().zero_stage();
        s.gpipe = job.parallel().schedule() == "gpipe";
        return s;
      }(),
      static_cast<int64_t>(budget));
  int64_t now = 0;
  for (const auto& st : as_is.stages) now = std::max(now, st.total());
  AutopilotFinding f = oom;
  std::string tried;
  for (const auto& r : *remedies) {
    const std::string line = r.name + " " + Bytes(r.predicted_bytes) + " (" +
                             Num(100.0 * r.predicted_bytes / budget, 0) + "% of the device)";
    if (r.predicted_bytes > headroom * budget) {
      tried += (tried.empty() ? "" : "; ") + line;
      continue;
    }
    f.fix.clear_settings();
    for (const auto& [k, v] : r.settings) {
      auto* s = f.fix.add_settings();
      s->set_key(k);
      s->set_value(v);
    }
    // The error as the finding quoted it, without the generic remedy after it.
    const size_t quoted = oom.evidence.find("\". ");
    f.evidence = (quoted == std::string::npos ? oom.evidence : oom.evidence.substr(0, quoted + 1)) +
                 ". `firedrill plan` predicts " + Bytes(now) + " per rank for the job as it is, on a " +
                 Bytes(static_cast<int64_t>(budget)) + " device" +
                 (tried.empty() ? std::string() : "; cheaper remedies leave too little room: " + tried) +
                 ". The cheapest that fits with room to spare: " + line + ".";
    return f;
  }
  return oom;
}

}  // namespace firedrill::cli
