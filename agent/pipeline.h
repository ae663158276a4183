// Pipeline parallelism: one stage's part of an optimiser step, its
// micro-batches run in the order a schedule gives, activations and their
// gradients exchanged with the neighbouring stages, and every forward and
// backward timed so the bubble is measured, not assumed.
//
//   auto order = StageSchedule(PipelineSchedule::kOneFOneB, stage, stages, m);
//   auto step = RunStageStep(*gpt_stage, order, stage, stages, micro_batches, links, step_no, t_step);
//   // gradients are in the stage's parameters; step->slices is its timeline
//
// Schedules (Huang et al. 2019, GPipe; Narayanan et al. 2021, PipeDream-
// Flush / Megatron's 1F1B): GPipe runs every forward, then every backward,
// so stage 0 holds all m micro-batches' activations; 1F1B runs p-s-1
// forwards, then alternates one forward and one backward, then drains, so
// stage s holds at most p-s. Both leave the same idle time, (p-1)/(m+p-1)
// of the step when stages take equal time.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace firedrill::agent {

class GptImpl;
namespace comm {
class ProcessGroup;
}

enum class PipelineSchedule { kGpipe, kOneFOneB };

// "gpipe" | "1f1b" (empty: 1f1b).
StatusOr<PipelineSchedule> ParsePipelineSchedule(const std::string& name);
const char* PipelineScheduleName(PipelineSchedule s);

struct PipelineOp {
  bool forward = true;
  int micro = 0;
  bool operator==(const PipelineOp& o) const { return forward == o.forward && micro == o.micro; }
};

// The order stage `stage` of `stages` runs the forward and the backward of
// each of `micro_batches` micro-batches.
std::vector<PipelineOp> StageSchedule(PipelineSchedule s, int stage, int stages, int micro_batches);

// The bubble the schedule leaves when every stage takes the same time per
// micro-batch: (p-1)/(m+p-1).
double IdealBubbleFraction(int stages, int micro_batches);

// What a stage exchanges with its neighbours. Sends may return before the
// peer received (Flush waits for them all); receives block until the
// tensor arrived.
class StageLinks {
 public:
  virtual ~StageLinks() = default;
  // Forward: this stage's output of micro-batch `micro` to the next stage.
  // Backward: the gradient of this stage's input to the previous stage.
  virtual Status Send(const at::Tensor& t, bool forward, int micro, int64_t step) = 0;
  // Into `t` (allocated with the right shape): the previous stage's output
  // (forward) or the next stage's gradient of this stage's output.
  virtual Status Recv(at::Tensor& t, bool forward, int micro, int64_t step) = 0;
  virtual Status Flush(int64_t step) = 0;
};

// Links over a pipeline group whose group rank is the stage (a mesh's PP
// group): sends are started and waited for in Flush; activations and
// gradients travel under tags of their own, in schedule order.
std::unique_ptr<StageLinks> GroupStageLinks(comm::ProcessGroup* pipeline_group);

struct MicroBatch {
  at::Tensor inputs;   // [B, T] tokens (every stage reads the batch: the shape, the mask, the targets)
  at::Tensor targets;  // [B, T], -100 at padding
  at::Tensor mask;     // [B, T] bool, or undefined
};

struct StageStep {
  struct Slice {
    bool forward = true;
    int micro = 0;
    double start_ms = 0;  // from the step's start
    double dur_ms = 0;    // the stage's compute only
  };
  std::vector<Slice> slices;
  double compute_ms = 0;    // forward and backward compute, summed
  double recv_wait_ms = 0;  // blocked on a neighbour's activation or gradient
  double send_wait_ms = 0;  // the flush at the end
  double loss = 0;          // last stage: the mean over the micro-batches
  int max_in_flight = 0;    // most micro-batches whose activations were held at once
  int64_t sent_bytes = 0;   // handed to the neighbours (activations and gradients)
};

// What the trainer does around each forward and backward (the pipeline's
// own waits excluded): `before_backward` just before each backward, with
// whether it is this stage's last of the step (where a data-parallel
// reducer arms its all-reduces: DDP's no_sync() on the others); `compute`
// at the start (true) and the end (false) of each forward's and backward's
// compute, inside its timed slice (a slowed device's sleep goes there).
struct StageHooks {
  std::function<void(bool last)> before_backward;
  std::function<void(bool begin)> compute;
};

// Runs this stage's forward and backward of every micro-batch in `order`;
// gradients accumulate into the stage's parameters (each micro-batch's loss
// divided by their count, as one large batch's mean). Timestamps count
// from `t_step`. Errors name the stage, micro-batch and direction; a
// tensor-parallel collective's failure keeps its code.
StatusOr<StageStep> RunStageStep(const GptImpl& stage_model, const std::vector<PipelineOp>& order, int stage,
                                 int stages, const std::vector<MicroBatch>& micro, StageLinks& links,
                                 int64_t step, std::chrono::steady_clock::time_point t_step,
                                 const StageHooks& hooks = {});

}  // namespace firedrill::agent
