// What a gpt-tiny training job needs per rank, predicted from its shape:
// parameters, gradients, optimiser state and activations under a parallel
// strategy (DP, ZeRO-1, TP, PP and their combinations), and what each rank
// sends per step. `firedrill plan` prints it for every strategy a world
// size allows; `probe memory` sets it beside what the tracking allocator
// measured. No LibTorch: the counts are this repository's model
// (agent/gpt.h) written out, checked against measured runs in
// tests/unit/model_parallel_test.cc.
//
// Activations are those autograd keeps for backward, per block and
// micro-batch of b sequences of s tokens, hidden h, a heads, MLP ratio r,
// in fp32 (4 bytes) and without dropout:
//   LayerNorm 1 and 2 inputs and outputs        4 sbh
//   q, k, v (contiguous copies for the batched products)  3 sbh
//   softmax output (the attention probabilities)  a s^2 b
//   attention output before its projection      1 sbh
//   MLP: c_fc's output (GELU's input), GELU's output  2 r sbh
//   LayerNorm statistics (mean, 1/std)           4 sb
// = 4 x (sbh (8 + 2r) + a s^2 b + 4 sb) bytes: with r = 4, s b h (64 + 4 a s / h)
// bytes beside the textbook s b h (34 + 5 a s / h) (Korthikanti et al. 2022:
// 2-byte activations, 1-byte dropout masks, Megatron's fused kernels).
// Tensor parallelism splits what depends on the heads and the MLP width
// (4 sbh stay whole on every rank), pipeline stages hold their blocks'
// activations for each micro-batch in flight (GPipe: m; 1F1B: min(m, p-s)),
// activation checkpointing keeps each block's input and recomputes one
// block at a time in backward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace firedrill::parallel {

struct GptShape {
  int64_t vocab = 256;
  int64_t seq = 64;  // tokens per sequence (the context)
  int64_t d_model = 64;
  int64_t layers = 2;
  int64_t heads = 2;
  int64_t mlp_ratio = 4;
  bool tied = true;  // the head reuses the embedding
};

struct Workload {
  int64_t micro_batch = 8;          // sequences per micro-batch per data-parallel replica
  int micro_batches = 1;            // per optimiser step (accumulation; the pipeline's m)
  std::string optimizer = "adamw";  // adamw: 2 states; sgd: momentum's 1 (0 without momentum)
  bool momentum = true;             // sgd only
  bool activation_checkpointing = false;
  int activation_bytes = 4;  // fp32; 2 where a precision mode stores 2-byte activations
};

struct Strategy {
  int dp = 1, tp = 1, pp = 1;
  int zero_stage = 0;        // 1: the optimiser state partitioned over dp
  bool gpipe = false;        // pipeline schedule; false: 1F1B
  std::string Name() const;  // "DP4", "DP4 ZeRO-1", "TP2 x DP2", "DP2 x TP2 x PP2", "PP4 (gpipe)"
};

// Whole model: parameters of gpt-tiny with this shape.
int64_t ParamCount(const GptShape& g);

struct RankMemory {
  int stage = 0;
  int64_t params = 0;  // parameters this rank holds
  int64_t param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0, activation_bytes = 0;
  int in_flight = 1;  // micro-batches whose activations are held at once
  int64_t total() const { return param_bytes + grad_bytes + optimizer_bytes + activation_bytes; }
};

// Bytes each rank sends per optimiser step, as a ring moves them.
struct StepTraffic {
  int64_t dp = 0;  // gradient all-reduce (and ZeRO-1's parameter all-gather)
  int64_t tp = 0;  // activation all-reduces inside the blocks
  int64_t pp = 0;  // activations and their gradients to the neighbour stages
  int64_t total() const { return dp + tp + pp; }
};

struct StrategyPlan {
  Strategy strategy;
  std::vector<RankMemory> stages;  // one per pipeline stage (ranks of a stage alike)
  RankMemory worst;                // the stage that needs the most
  StepTraffic traffic;             // of the worst stage
  double bubble = 0;               // (p-1)/(m+p-1)
  bool fits = true;
  std::vector<std::string> why_not;  // each reason it cannot run or does not fit
};

// Activations one micro-batch leaves for backward in `blocks` blocks of a
// `tp`-way shard (no checkpointing), bytes.
int64_t BlockActivationBytes(const GptShape& g, int64_t micro_batch, int tp, int activation_bytes,
                             int64_t blocks);
// The head's (last stage), per micro-batch in flight: ln_f's input and
// output and the log-softmax kept for the loss; and once, while the loss's
// backward runs, two vocabulary-wide buffers besides.
int64_t HeadSavedBytes(const GptShape& g, int64_t micro_batch, int activation_bytes);
int64_t HeadBackwardBytes(const GptShape& g, int64_t micro_batch, int activation_bytes);
// The textbook figure per layer (Korthikanti et al. 2022, tensor parallel
// without sequence parallelism): s b h (10 + 24/t + 5 a s / (h t)) bytes,
// s b h (34 + 5 a s / h) at t = 1.
double TextbookActivationBytesPerLayer(const GptShape& g, int64_t micro_batch, int tp = 1);

// Pipeline stage `stage` of `pp` holds blocks [first, first + n): an even
// split, the first stages taking one more where it does not divide.
void StageBlocks(int64_t layers, int stage, int pp, int64_t* first, int64_t* n);

StrategyPlan PlanStrategy(const GptShape& g, const Workload& w, const Strategy& s, int64_t budget_bytes);
// Every strategy a world of `world` ranks allows for this model: each
// (tp, pp) dividing the world with tp dividing the heads and the MLP width
// and pp at most the layers, ZeRO-1 beside each with dp > 1, 1F1B.
std::vector<Strategy> CandidateStrategies(int world, const GptShape& g);

}  // namespace firedrill::parallel
