// gpt-tiny: a small GPT-style decoder (nanoGPT's shape) in LibTorch.
//
//   tokens -> wte + wpe -> h.0 .. h.{L-1} -> ln_f -> lm_head -> logits
//   block:  x + attn(ln_1(x)),  then  x + mlp(ln_2(x))        (pre-norm)
//   attn:   causal multi-head self-attention; padded keys are masked too
//   mlp:    Linear(d, r*d) -> GELU -> Linear(r*d, d)
//
// A model may be one shard of the whole (GptConfig's tp_* and stage fields):
// - tensor parallel, Megatron-LM style (Shoeybi et al. 2019, section 3): a
//   rank holds heads/tp of each block's attention heads (c_attn's q, k and
//   v rows, c_proj's matching columns) and r*d/tp of the MLP's hidden units
//   (c_fc's rows, c_proj's columns). Before each column-parallel layer the
//   input passes f (identity forward, all-reduce of its gradient backward),
//   after each row-parallel one g (all-reduce forward, identity backward),
//   so a block costs two all-reduces of [B, T, d] forward and two backward.
//   Embeddings, LayerNorms, the row-parallel biases and the head are
//   replicated: each TP rank computes them alike and gets the same
//   gradients. (Megatron also splits the vocabulary; at these sizes the
//   head is small, and replicating it is stated, not hidden: it counts in
//   this rank's FLOPs.)
// - a pipeline stage: blocks [first_block, first_block + stage_blocks);
//   the stage with block 0 also holds the embeddings, the stage with the
//   last block ln_f and the head. With tied embeddings a last stage that is
//   not also the first holds its own copy of wte for the head (Megatron's
//   arrangement): the trainer keeps the two copies equal by summing their
//   gradients between the first and the last stage.
// Shards take their weights from the whole model's init (the same draws,
// then their part), so a sharded job starts from the same model as DP.
//
// Parameter names follow nanoGPT ("h.0.attn.c_attn.weight", ...) so a
// consolidated export reads naturally next to PyTorch code. Weights are drawn
// from an explicit generator (GPT-2 init), never the process-global RNG that
// the ranks running as threads share.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <stdexcept>

#include "agent/seam.h"
#include "common/status.h"

namespace firedrill::agent {

struct GptConfig {
  int64_t vocab_size = 256;
  int64_t seq_len = 64;  // context: the longest sequence (position table size)
  int64_t d_model = 64;
  int64_t layers = 2;
  int64_t heads = 2;
  int64_t mlp_ratio = 4;
  bool tie_embeddings = true;  // lm_head reuses wte (GPT-2); no separate head weight
  // Recompute each block's activations in backward instead of keeping them
  // (torch.utils.checkpoint's trade: less activation memory, ~1 more forward).
  bool activation_checkpointing = false;
  // This rank's shard (see the top of this file); the defaults hold all.
  int64_t tp_size = 1;
  int64_t tp_rank = 0;
  int64_t first_block = 0;
  int64_t stage_blocks = -1;  // -1: every block from first_block on
};

// How a tensor-parallel shard reaches the other shards of its layers.
struct TensorParallelOps {
  // Sums `t` (contiguous fp32) in place over the tensor-parallel group. A
  // failure aborts the forward or backward pass it happens in (thrown as a
  // TensorParallelError).
  std::function<Status(at::Tensor& t)> all_reduce;
};

// A tensor-parallel collective that failed inside a forward or backward
// pass: thrown through autograd with its Status, so that a timeout stays a
// timeout (and the agent still dumps its flight recorder) wherever it is
// caught.
class TensorParallelError : public std::runtime_error {
 public:
  explicit TensorParallelError(Status s) : std::runtime_error(s.message()), status_(std::move(s)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// How each parameter is split across a tensor-parallel group.
enum class TpSplit {
  kReplicated,
  kQkvRows,  // c_attn: rows r/tp of each of q, k and v (this rank's heads)
  kRows,     // column-parallel (c_fc): output features r/tp
  kCols,     // row-parallel (c_proj): input features r/tp
};
TpSplit TpSplitOf(const std::string& param_name);
// Rank `tp_rank`'s part of the whole parameter `full` named `name` (a view;
// the whole tensor itself when replicated).
at::Tensor TpShard(const std::string& name, const at::Tensor& full, int64_t tp_rank, int64_t tp_size);

Status ValidateGptConfig(const GptConfig& c);

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const GptConfig& cfg);  // parameters uninitialised: call Init

  // GPT-2 init from `seed`: weights N(0, 0.02), residual projections
  // N(0, 0.02/sqrt(2L)), biases 0, LayerNorm 1/0.
  void Init(uint64_t seed);

  // inputs [B, T] int64 (T <= seq_len); mask [B, T] bool, true at real
  // tokens, or undefined when nothing is padded. Returns logits [B, T, V].
  // A whole model only (one stage): StageForward otherwise.
  at::Tensor Logits(const at::Tensor& inputs, const at::Tensor& mask) const;
  // Mean next-token cross-entropy over targets != -100 (padding).
  at::Tensor Loss(const at::Tensor& inputs, const at::Tensor& targets, const at::Tensor& mask) const;

  // This stage's part of the forward pass: `in` is the tokens [B, T] on the
  // first stage, the previous stage's output [B, T, d] on the others (the
  // mask, from the same batch, is every stage's). Returns [B, T, d] for the
  // next stage, or on the last stage the logits.
  at::Tensor StageForward(const at::Tensor& in, const at::Tensor& mask) const;
  // The last stage's loss from its logits (as Loss()).
  at::Tensor LossFromLogits(const at::Tensor& logits, const at::Tensor& targets) const;
  bool first_stage() const { return cfg_.first_block == 0; }
  bool last_stage() const { return cfg_.first_block + stage_blocks() == cfg_.layers; }
  int64_t stage_blocks() const {
    return cfg_.stage_blocks < 0 ? cfg_.layers - cfg_.first_block : cfg_.stage_blocks;
  }

  const GptConfig& config() const { return cfg_; }
  // Weights that take part in matrix products: the blocks' linears and the
  // head (d x V, tied or not). Embedding lookups, LayerNorms and biases do
  // no matmul and are left out, as in the usual 6N convention. A shard
  // counts what it computes: its blocks' parts, and the head on the last
  // stage (replicated across TP ranks, so each computes all of it).
  int64_t MatmulParams() const;
  // Training (forward + backward) FLOPs per token at context length T:
  //   6 * MatmulParams()  +  12 * layers * d_model * T
  // 6N: 2 FLOPs per multiply-add forward, twice that backward. The attention
  // term is QK^T and AV (2*T*d multiply-adds per token per layer, x6 for the
  // same reason). T is the padded length actually computed; the full T x T
  // score matrix is computed despite the causal mask, and counted.
  // (Kaplan et al. 2020; PaLM appendix B: 6N + 12*L*H*Q*T.)
  double TrainFlopsPerToken(int64_t context) const;

  ComputeSeam seam;  // see ComputeSeam; empty = fp32
  TensorParallelOps tp;  // set when config().tp_size > 1

 private:
  friend struct CheckpointedBlock;
  friend struct CopyToTensorParallel;
  friend struct ReduceFromTensorParallel;
  struct BlockParams {
    at::Tensor ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b;
    at::Tensor ln2_w, ln2_b, fc_w, fc_b, mlp_proj_w, mlp_proj_b;
    std::vector<at::Tensor> all;  // in registration order (checkpointing's inputs)
  };
  // One block; `blocked` [B or 1, 1, T, T] bool is true where a query may not
  // look at a key.
  at::Tensor Block(const BlockParams& p, const at::Tensor& x, const at::Tensor& blocked) const;
  // A row-parallel linear: x w^T, summed over the TP group (g), then + b.
  at::Tensor RowParallel(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) const;
  // f: the input of a column-parallel linear.
  at::Tensor ColumnParallelInput(const at::Tensor& x) const;

  GptConfig cfg_;
  at::Tensor wte_, wpe_, lnf_w_, lnf_b_, head_w_;
  std::vector<BlockParams> blocks_;
};
TORCH_MODULE(Gpt);

// Validates, builds and initialises.
StatusOr<Gpt> BuildGpt(const GptConfig& cfg, uint64_t seed);

}  // namespace firedrill::agent
