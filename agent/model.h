// The models a rank trains, behind one interface so that the trainer calls
// either the same way:
//
//   auto model = CreateModel(job.model(), seed);        // StatusOr<unique_ptr<TrainModel>>
//   auto loss = (*model)->Loss(batch);                   // StatusOr<at::Tensor>, scalar with graph
//   loss->backward();
//   params = (*model)->parameters();                     // registration order
//   flops = batch.tokens * (*model)->TrainFlopsPerToken(batch.x.size(1));   // gpt-tiny
//   flops = batch.rows() * (*model)->TrainFlopsPerToken(0);                   // mlp
//
// - mlp: input -> hidden x layers ([LayerNorm] ReLU) -> classes; the batch is a
//   classification batch (agent/data.h, kClassification).
// - gpt-tiny: agent/gpt.h; the batch is a token batch (kTokens).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/data.h"
#include "agent/gpt.h"
#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::agent {

// Checks a ModelSpec without building anything.
Status ValidateModelSpec(const v1::ModelSpec& spec);

// Builds the mlp with parameters drawn from an explicit generator seeded
// by `seed` (same distribution as PyTorch's nn.Linear default), so that the
// result never depends on the process-global RNG that other threads share.
StatusOr<torch::nn::Sequential> BuildModel(const v1::ModelSpec& spec, uint64_t seed);

// gpt-tiny's settings from a ModelSpec (hidden = d_model, layers = blocks,
// vocab_size 0 = 256, mlp_ratio 0 = 4).
GptConfig GptConfigFromSpec(const v1::ModelSpec& spec);

class TrainModel {
 public:
  virtual ~TrainModel() = default;

  virtual const std::string& kind() const = 0;  // "mlp" | "gpt-tiny"
  // Mean loss of the batch with its autograd graph: cross-entropy over the
  // rows (mlp) or over the real target tokens (gpt-tiny; padding ignored).
  // LibTorch errors come back as a Status.
  virtual StatusOr<at::Tensor> Loss(const Batch& batch) = 0;
  // Training (forward + backward) FLOPs per token at context length
  // `context` (gpt-tiny: see GptImpl::TrainFlopsPerToken), or per sample for
  // the mlp (6 * weights; `context` ignored).
  virtual double TrainFlopsPerToken(int64_t context) const = 0;

  // The module holding the parameters (named_parameters() for checkpoints).
  virtual torch::nn::Module& module() = 0;
  virtual const torch::nn::Module& module() const = 0;
  // Where a precision mode hooks in (agent/gpt.h ComputeSeam).
  virtual ComputeSeam& seam() = 0;
  // gpt-tiny itself (its stages and tensor-parallel links); null for mlp.
  virtual GptImpl* gpt() { return nullptr; }

  std::vector<at::Tensor> parameters() const { return module().parameters(); }
  int64_t num_parameters() const;
};

// Builds the model `spec` names, initialised from `seed` without touching the
// global RNG. For mlp the parameters equal BuildModel(spec, seed)'s.
StatusOr<std::unique_ptr<TrainModel>> CreateModel(const v1::ModelSpec& spec, uint64_t seed);

// One rank's part of a model-parallel gpt-tiny (agent/gpt.h): its
// tensor-parallel shard and pipeline stage. The defaults are the whole.
struct ModelShard {
  int64_t tp_size = 1;
  int64_t tp_rank = 0;
  int64_t first_block = 0;
  int64_t stage_blocks = -1;
};
// Pipeline stage `stage` of `stages` over `layers` blocks: an even split,
// the first stages taking one more where it does not divide (Megatron's
// uniform split). Sets first_block and stage_blocks.
void AssignStage(int64_t layers, int stage, int stages, ModelShard* shard);
StatusOr<std::unique_ptr<TrainModel>> CreateModel(const v1::ModelSpec& spec, uint64_t seed,
                                                  const ModelShard& shard);

}  // namespace firedrill::agent
