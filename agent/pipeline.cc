#include "agent/pipeline.h"

#include <torch/torch.h>

#include <algorithm>

#include "agent/comm/process_group.h"
#include "agent/error_text.h"
#include "agent/gpt.h"

namespace firedrill::agent {

using Clock = std::chrono::steady_clock;

StatusOr<PipelineSchedule> ParsePipelineSchedule(const std::string& name) {
  if (name.empty() || name == "1f1b") return PipelineSchedule::kOneFOneB;
  if (name == "gpipe") return PipelineSchedule::kGpipe;
  return InvalidArgument("parallel.schedule '" + name + "' is not one of gpipe, 1f1b");
}

const char* PipelineScheduleName(PipelineSchedule s) {
  return s == PipelineSchedule::kGpipe ? "gpipe" : "1f1b";
}

std::vector<PipelineOp> StageSchedule(PipelineSchedule s, int stage, int stages, int micro_batches) {
  std::vector<PipelineOp> ops;
  const int m = micro_batches;
  if (s == PipelineSchedule::kGpipe) {
    for (int i = 0; i < m; ++i) ops.push_back({true, i});
    for (int i = 0; i < m; ++i) ops.push_back({false, i});
    return ops;
  }
  const int warmup = std::min(stages - stage - 1, m);
  for (int i = 0; i < warmup; ++i) ops.push_back({true, i});
  for (int i = 0; i < m - warmup; ++i) {
    ops.push_back({true, warmup + i});
    ops.push_back({false, i});
  }
  for (int i = m - warmup; i < m; ++i) ops.push_back({false, i});
  return ops;
}

double IdealBubbleFraction(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

namespace {

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

class GroupLinks : public StageLinks {
 public:
  explicit GroupLinks(comm::ProcessGroup* g) : g_(g) {}
  Status Send(const at::Tensor& t, bool forward, int, int64_t step) override {
    auto p = g_->StartSend(t, g_->rank() + (forward ? 1 : -1), forward ? kActivation : kGradient, step);
    if (!p.ok()) return p.status();
    sends_.push_back(std::move(p).value());
    return Status::Ok();
  }
  Status Recv(at::Tensor& t, bool forward, int, int64_t step) override {
    return g_->Recv(t, g_->rank() + (forward ? -1 : 1), forward ? kActivation : kGradient, step);
  }
  Status Flush(int64_t) override {
    Status first;
    for (auto& p : sends_) {
      Status st = g_->Wait(p);
      if (first.ok() && !st.ok()) first = st;
    }
    sends_.clear();
    return first;
  }

 private:
  static constexpr int kActivation = 1, kGradient = 2;
  comm::ProcessGroup* g_;
  std::vector<comm::PendingCollective> sends_;
};

}  // namespace

std::unique_ptr<StageLinks> GroupStageLinks(comm::ProcessGroup* pipeline_group) {
  return std::make_unique<GroupLinks>(pipeline_group);
}

StatusOr<StageStep> RunStageStep(const GptImpl& model, const std::vector<PipelineOp>& order, int stage,
                                 int stages, const std::vector<MicroBatch>& micro, StageLinks& links,
                                 int64_t step, Clock::time_point t_step, const StageHooks& hooks) {
  const bool first = stage == 0, last = stage == stages - 1;
  const int m = static_cast<int>(micro.size());
  const int64_t d = model.config().d_model;
  // Per micro-batch while in flight: this stage's input (a leaf whose
  // gradient goes back) and its output (or the last stage's loss).
  std::vector<at::Tensor> inputs(m), outputs(m);
  int in_flight = 0, backwards = 0;
  const int total_backwards = static_cast<int>(
      std::count_if(order.begin(), order.end(), [](const PipelineOp& o) { return !o.forward; }));
  StageStep out;
  const std::string who = "stage " + std::to_string(stage) + " step " + std::to_string(step);
  for (const PipelineOp& op : order) {
    const std::string what =
        who + " micro-batch " + std::to_string(op.micro) + (op.forward ? " forward" : " backward");
    if (op.micro < 0 || op.micro >= m) return InvalidArgument(what + ": no such micro-batch");
    const MicroBatch& b = micro[op.micro];
    try {
      if (op.forward) {
        at::Tensor in = b.inputs;
        if (!first) {
          auto t0 = Clock::now();
          in = at::empty({b.inputs.size(0), b.inputs.size(1), d}, at::kFloat);
          if (Status st = links.Recv(in, true, op.micro, step); !st.ok())
            return Status(st.code(), what + ": " + st.message());
          out.recv_wait_ms += Ms(t0, Clock::now());
          in.requires_grad_(true);
        }
        const auto t0 = Clock::now();
        if (hooks.compute) hooks.compute(true);
        at::Tensor y = model.StageForward(in, b.mask);
        if (last) y = model.LossFromLogits(y, b.targets) / m;
        if (hooks.compute) hooks.compute(false);
        const auto t1 = Clock::now();
        out.slices.push_back({true, op.micro, Ms(t_step, t0), Ms(t0, t1)});
        out.compute_ms += Ms(t0, t1);
        if (last) {
          out.loss += y.item<double>();
        } else {
          const at::Tensor act = y.detach().contiguous();
          if (Status st = links.Send(act, true, op.micro, step); !st.ok())
            return Status(st.code(), what + ": " + st.message());
          out.sent_bytes += static_cast<int64_t>(act.numel()) * static_cast<int64_t>(act.element_size());
        }
        inputs[op.micro] = in;
        outputs[op.micro] = y;
        out.max_in_flight = std::max(out.max_in_flight, ++in_flight);
      } else {
        if (!outputs[op.micro].defined()) return FailedPrecondition(what + ": before its forward");
        at::Tensor grad;
        if (!last) {
          auto t0 = Clock::now();
          grad = at::empty_like(outputs[op.micro], at::MemoryFormat::Contiguous);
          if (Status st = links.Recv(grad, false, op.micro, step); !st.ok())
            return Status(st.code(), what + ": " + st.message());
          out.recv_wait_ms += Ms(t0, Clock::now());
        }
        if (hooks.before_backward) hooks.before_backward(++backwards == total_backwards);
        const auto t0 = Clock::now();
        if (hooks.compute) hooks.compute(true);
        if (last) {
          outputs[op.micro].backward();
        } else {
          outputs[op.micro].backward(grad);
        }
        if (hooks.compute) hooks.compute(false);
        const auto t1 = Clock::now();
        out.slices.push_back({false, op.micro, Ms(t_step, t0), Ms(t0, t1)});
        out.compute_ms += Ms(t0, t1);
        if (!first) {
          at::Tensor g = inputs[op.micro].grad();
          if (!g.defined()) return Internal(what + ": the stage's input got no gradient");
          const at::Tensor gc = g.contiguous();
          if (Status st = links.Send(gc, false, op.micro, step); !st.ok())
            return Status(st.code(), what + ": " + st.message());
          out.sent_bytes += static_cast<int64_t>(gc.numel()) * static_cast<int64_t>(gc.element_size());
        }
        // The micro-batch's activations go with its graph.
        inputs[op.micro] = at::Tensor();
        outputs[op.micro] = at::Tensor();
        --in_flight;
      }
    } catch (const c10::OutOfMemoryError&) {
      throw;  // the trainer reports the device's out-of-memory as such
    } catch (const TensorParallelError& e) {
      return Status(e.status().code(), what + ": " + e.status().message());
    } catch (const std::exception& e) {
      return Internal(what + " failed: " + ErrorText(e));
    }
  }
  const auto t0 = Clock::now();
  if (Status st = links.Flush(step); !st.ok()) return Status(st.code(), who + ": " + st.message());
  out.send_wait_ms = Ms(t0, Clock::now());
  return out;
}

}  // namespace firedrill::agent
