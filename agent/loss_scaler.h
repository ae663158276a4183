// Loss scaling for fp16 training: a pure state machine (no LibTorch here, so
// the checkpoint and telemetry code can use it without the 20 s torch
// headers). "dynamic" reproduces torch.cuda.amp.GradScaler exactly.
//
// GradScaler's documented algorithm (torch/cuda/amp/grad_scaler.py and the
// kernel behind torch._amp_update_scale_, PyTorch 1.13), which Update()
// mirrors line for line:
//   * the scale is a float32 tensor, the growth tracker an int32 tensor;
//   * scaler.step(opt) skips opt.step() when any gradient was inf/NaN;
//   * scaler.update():
//       if found_inf:  scale = scale * backoff_factor; tracker = 0
//       else:          successful = tracker + 1
//                      if successful == growth_interval:
//                          new_scale = float(scale * growth_factor)
//                          if isfinite(new_scale): scale = new_scale
//                          tracker = 0
//                      else: tracker = successful
//   * defaults: init_scale 2**16, growth_factor 2.0, backoff_factor 0.5,
//     growth_interval 2000.
// A test replaying these sequences through the real GradScaler is not
// possible here: GradScaler in 1.13 needs CUDA tensors, and this project's
// LibTorch is CPU-only. The unit tests check the documented behaviour.
//
// How the trainer uses it, once per optimiser step (K micro-batches):
//
//   // at startup
//   auto scaler = LossScaler::FromJob(job);           // StatusOr
//   // per step
//   for (micro in 0..K-1)
//     (loss / K * scaler->scale()).backward();        // scale the loss
//   ...all-reduce gradients (so every rank sees the same inf/NaN)...
//   bool found_inf = scaler->enabled() &&
//                    UnscaleAndCheck(flat_grads, scaler->inv_scale());  // precision.h
//   // grad-norm / clipping go here, on unscaled gradients
//   if (!scaler->ShouldSkipStep(found_inf)) optimizer.step();
//   scaler->Update(found_inf);
//   report.loss_scale = scaler->scale(); report.skipped = scaler->last_step_skipped();
//   report.skipped_total = scaler->skipped_total();
//   // checkpoints: scaler->state().Serialize() / LossScaler::State::Parse + set_state
//
// Modes:
//   none    — no scaling (scale 1) and no skipping: what training without a
//             GradScaler does; an inf gradient reaches the optimiser.
//   static  — constant scale, and a step with inf/NaN gradients IS skipped.
//             PyTorch users have no single convention here: apex's static
//             scale does not skip (the inf corrupts the weights), DeepSpeed's
//             fp16 optimiser does. We skip, because a non-finite update
//             destroys the model irrecoverably and the drill is about the
//             scale being wrong, not about NaN weights; the skip is counted.
//   dynamic — GradScaler.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace firedrill::v1 {
class LossScaleSpec;
class JobSpec;
}  // namespace firedrill::v1

namespace firedrill::agent {

class LossScaler {
 public:
  enum class Mode { kNone, kStatic, kDynamic };

  struct Options {
    Mode mode = Mode::kDynamic;
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int32_t growth_interval = 2000;
  };

  // What a checkpoint must carry to resume bit-identically.
  struct State {
    float scale = 65536.0f;
    int32_t growth_tracker = 0;
    int64_t skipped_total = 0;
    // "scale=<hex float> growth_tracker=N skipped_total=N": exact round trip.
    std::string Serialize() const;
    static StatusOr<State> Parse(const std::string& text);
    bool operator==(const State& o) const {
      return scale == o.scale && growth_tracker == o.growth_tracker && skipped_total == o.skipped_total;
    }
  };

  // Fields equal to 0 take their defaults. An empty mode means "dynamic" for
  // precision "fp16" and "none" otherwise (scenario.proto). init_scale
  // defaults to 65536 for dynamic and 1 for static. Like GradScaler, growth
  // must be > 1, backoff in (0, 1) and the interval > 0.
  static StatusOr<LossScaler> FromSpec(const v1::LossScaleSpec& spec, const std::string& precision);
  static StatusOr<LossScaler> FromJob(const v1::JobSpec& job);
  static StatusOr<LossScaler> Create(const Options& opts);

  Mode mode() const { return opts_.mode; }
  const char* mode_name() const;
  bool enabled() const { return opts_.mode != Mode::kNone; }

  // The factor to multiply the loss by (1 when disabled).
  double scale() const { return static_cast<double>(state_.scale); }
  // GradScaler's inv_scale = scale.double().reciprocal().float().
  double inv_scale() const;

  // True when the optimiser step must not run (static/dynamic and found_inf).
  bool ShouldSkipStep(bool found_inf) const { return enabled() && found_inf; }
  // Advances the state machine; call exactly once per optimiser step, after
  // the step ran or was skipped. Counts the skip.
  void Update(bool found_inf);

  bool last_step_skipped() const { return last_skipped_; }
  int64_t skipped_total() const { return state_.skipped_total; }
  int32_t growth_tracker() const { return state_.growth_tracker; }

  const State& state() const { return state_; }
  // Restores a checkpointed state; refuses a non-finite or non-positive scale.
  // skipped_total is always restored; scale and growth tracker only in
  // dynamic mode (a static scale is configuration, so a resume with a new
  // static scale takes the new one).
  Status set_state(const State& s);

 private:
  explicit LossScaler(const Options& opts);
  Options opts_;
  State state_;
  bool last_skipped_ = false;
};

}  // namespace firedrill::agent
