#include "parallel/memory_model.h"

#include <algorithm>

namespace firedrill::parallel {

std::string Strategy::Name() const {
  std::string n;
  auto add = [&](const char* what, int k) {
    if (k > 1) n += (n.empty() ? "" : " x ") + std::string(what) + std::to_string(k);
  };
  add("DP", dp);
  add("TP", tp);
  add("PP", pp);
  if (n.empty()) n = "1 rank";
  if (zero_stage == 1) n += " ZeRO-1";
  if (pp > 1 && gpipe) n += " (gpipe)";
  return n;
}

namespace {

// Per block: the weights split across TP ranks and those every TP rank holds.
int64_t BlockSplitParams(const GptShape& g) {
  const int64_t d = g.d_model, r = g.mlp_ratio;
  return (3 * d * d + 3 * d) + d * d + (r * d * d + r * d) + r * d * d;
}
int64_t BlockReplicatedParams(const GptShape& g) { return 4 * g.d_model + 2 * g.d_model; }

}  // namespace

int64_t ParamCount(const GptShape& g) {
  const int64_t d = g.d_model;
  return g.vocab * d + g.seq * d + g.layers * (BlockSplitParams(g) + BlockReplicatedParams(g)) + 2 * d +
         (g.tied ? 0 : g.vocab * d);
}

void StageBlocks(int64_t layers, int stage, int pp, int64_t* first, int64_t* n) {
  const int64_t base = layers / pp, extra = layers % pp;
  *first = stage * base + std::min<int64_t>(stage, extra);
  *n = base + (stage < extra ? 1 : 0);
}

int64_t BlockActivationBytes(const GptShape& g, int64_t b, int tp, int bytes, int64_t blocks) {
  const int64_t s = g.seq, h = g.d_model, r = g.mlp_ratio, a = g.heads;
  // Whole on every TP rank: the LayerNorms' inputs and outputs, their
  // statistics; split: q, k, v, the attention output, the MLP's two, the
  // attention probabilities.
  const int64_t whole = 4 * s * b * h + 4 * s * b;
  const int64_t split = (4 + 2 * r) * s * b * h / tp + a * s * s * b / tp;
  return blocks * bytes * (whole + split);
}

int64_t HeadSavedBytes(const GptShape& g, int64_t b, int bytes) {
  const int64_t s = g.seq, h = g.d_model, v = g.vocab;
  return bytes * (2 * s * b * h + 2 * s * b + s * b * v);
}

int64_t HeadBackwardBytes(const GptShape& g, int64_t b, int bytes) { return bytes * 2 * g.seq * b * g.vocab; }

double TextbookActivationBytesPerLayer(const GptShape& g, int64_t b, int tp) {
  const double s = g.seq, h = g.d_model, a = g.heads, t = tp;
  return s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t));
}

StrategyPlan PlanStrategy(const GptShape& g, const Workload& w, const Strategy& st, int64_t budget) {
  StrategyPlan plan;
  plan.strategy = st;
  const int m = std::max(1, w.micro_batches);
  plan.bubble = st.pp > 1 ? static_cast<double>(st.pp - 1) / (m + st.pp - 1) : 0.0;
  if (g.heads % st.tp != 0 || (g.mlp_ratio * g.d_model) % st.tp != 0)
    plan.why_not.push_back("TP " + std::to_string(st.tp) + " does not divide the " + std::to_string(g.heads) +
                           " heads and the MLP width " + std::to_string(g.mlp_ratio * g.d_model));
  if (st.pp > g.layers)
    plan.why_not.push_back("PP " + std::to_string(st.pp) + " leaves a stage without a block (" +
                           std::to_string(g.layers) + " layers)");
  if (st.zero_stage == 1 && st.dp < 2)
    plan.why_not.push_back("ZeRO-1 partitions over data-parallel ranks: DP is 1");
  if (!plan.why_not.empty()) {
    plan.fits = false;
    return plan;
  }
  const int64_t d = g.d_model;
  const int states = w.optimizer == "adamw" ? 2 : (w.momentum ? 1 : 0);
  for (int stage = 0; stage < st.pp; ++stage) {
    RankMemory rm;
    rm.stage = stage;
    int64_t first = 0, n = 0;
    StageBlocks(g.layers, stage, st.pp, &first, &n);
    const bool first_stage = stage == 0, last_stage = stage == st.pp - 1;
    rm.params = n * (BlockSplitParams(g) / st.tp + BlockReplicatedParams(g));
    if (first_stage) rm.params += g.vocab * d + g.seq * d;
    if (last_stage) rm.params += 2 * d + (g.tied ? (first_stage ? 0 : g.vocab * d) : g.vocab * d);
    rm.param_bytes = 4 * rm.params;  // fp32 weights (precision modes cast in compute)
    rm.grad_bytes = 4 * rm.params;
    rm.optimizer_bytes = 4 * states * rm.params;
    // ZeRO-1 (agent/zero.h): each replica keeps the state of its 1/dp of the
    // parameters, and the flat fp32 copy of those parameters and their
    // gradients that its optimiser steps (8 bytes a parameter more).
    if (st.zero_stage == 1) rm.optimizer_bytes = (rm.optimizer_bytes + 8 * rm.params + st.dp - 1) / st.dp;
    rm.in_flight = st.pp == 1 ? 1 : (st.gpipe ? m : std::min(m, st.pp - stage));
    const int64_t b = w.micro_batch;
    int64_t per_micro;
    if (w.activation_checkpointing) {
      // Each block's input, and one block's activations while it is recomputed.
      per_micro = n * w.activation_bytes * g.seq * b * d;
    } else {
      per_micro = BlockActivationBytes(g, b, st.tp, w.activation_bytes, n);
    }
    if (last_stage) per_micro += HeadSavedBytes(g, b, w.activation_bytes);
    rm.activation_bytes =
        rm.in_flight * per_micro +
        (w.activation_checkpointing ? BlockActivationBytes(g, b, st.tp, w.activation_bytes, 1) : 0) +
        (last_stage ? HeadBackwardBytes(g, b, w.activation_bytes) : 0);
    plan.stages.push_back(rm);

    StepTraffic tr;
    const int64_t act = 4 * b * g.seq * d;  // one [b, s, h] fp32 tensor
    if (st.dp > 1) {
      tr.dp = 2 * (st.dp - 1) * rm.grad_bytes / st.dp;
      if (st.zero_stage == 1) tr.dp += (st.dp - 1) * rm.param_bytes / st.dp;
    }
    // Two all-reduces forward and two backward per block; recomputing a
    // checkpointed block runs its forward's two again.
    const int per_block = w.activation_checkpointing ? 6 : 4;
    if (st.tp > 1) tr.tp = static_cast<int64_t>(m) * n * per_block * (2 * (st.tp - 1) * act / st.tp);
    if (st.pp > 1) tr.pp = static_cast<int64_t>(m) * act * ((last_stage ? 0 : 1) + (first_stage ? 0 : 1));
    if (stage == 0 || rm.total() > plan.worst.total()) {
      plan.worst = rm;
      plan.traffic = tr;
    }
  }
  if (budget > 0 && plan.worst.total() > budget) {
    plan.fits = false;
    plan.why_not.push_back((st.pp > 1 ? "stage " + std::to_string(plan.worst.stage) + " needs"
                                      : std::string("each rank needs")) +
                           " more than the device holds");
  }
  return plan;
}

std::vector<Strategy> CandidateStrategies(int world, const GptShape& g) {
  std::vector<Strategy> out;
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp != 0 || g.heads % tp != 0 || (g.mlp_ratio * g.d_model) % tp != 0) continue;
    for (int pp = 1; pp <= world / tp; ++pp) {
      if ((world / tp) % pp != 0 || pp > g.layers) continue;
      Strategy s;
      s.tp = tp;
      s.pp = pp;
      s.dp = world / (tp * pp);
      out.push_back(s);
      if (s.dp > 1 && tp * pp == 1) {
        s.zero_stage = 1;
        out.push_back(s);
      }
    }
  }
  return out;
}

}  // namespace firedrill::parallel
