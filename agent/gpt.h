// gpt-tiny: a small GPT-style decoder (nanoGPT's shape) in LibTorch.
//
//   tokens -> wte + wpe -> h.0 .. h.{L-1} -> ln_f -> lm_head -> logits
//   block:  x + attn(ln_1(x)),  then  x + mlp(ln_2(x))        (pre-norm)
//   attn:   causal multi-head self-attention; padded keys are masked too
//   mlp:    Linear(d, r*d) -> GELU -> Linear(r*d, d)
//
// Parameter names follow nanoGPT ("h.0.attn.c_attn.weight", ...) so a
// consolidated export reads naturally next to PyTorch code. Weights are drawn
// from an explicit generator (GPT-2 init), never the process-global RNG that
// the ranks running as threads share.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>

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
};

Status ValidateGptConfig(const GptConfig& c);

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const GptConfig& cfg);  // parameters uninitialised: call Init

  // GPT-2 init from `seed`: weights N(0, 0.02), residual projections
  // N(0, 0.02/sqrt(2L)), biases 0, LayerNorm 1/0.
  void Init(uint64_t seed);

  // inputs [B, T] int64 (T <= seq_len); mask [B, T] bool, true at real
  // tokens, or undefined when nothing is padded. Returns logits [B, T, V].
  at::Tensor Logits(const at::Tensor& inputs, const at::Tensor& mask) const;
  // Mean next-token cross-entropy over targets != -100 (padding).
  at::Tensor Loss(const at::Tensor& inputs, const at::Tensor& targets, const at::Tensor& mask) const;

  const GptConfig& config() const { return cfg_; }
  // Weights that take part in matrix products: the blocks' linears and the
  // head (d x V, tied or not). Embedding lookups, LayerNorms and biases do
  // no matmul and are left out, as in the usual 6N convention.
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

 private:
  friend struct CheckpointedBlock;
  struct BlockParams {
    at::Tensor ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b;
    at::Tensor ln2_w, ln2_b, fc_w, fc_b, mlp_proj_w, mlp_proj_b;
    std::vector<at::Tensor> all;  // in registration order (checkpointing's inputs)
  };
  // One block; `blocked` [B or 1, 1, T, T] bool is true where a query may not
  // look at a key.
  at::Tensor Block(const BlockParams& p, const at::Tensor& x, const at::Tensor& blocked) const;

  GptConfig cfg_;
  at::Tensor wte_, wpe_, lnf_w_, lnf_b_, head_w_;
  std::vector<BlockParams> blocks_;
};
TORCH_MODULE(Gpt);

// Validates, builds and initialises.
StatusOr<Gpt> BuildGpt(const GptConfig& cfg, uint64_t seed);

}  // namespace firedrill::agent
