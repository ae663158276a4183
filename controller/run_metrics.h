// Turns per-rank step telemetry into the numbers learners and the verifier
// read. Pure functions over StepReports: unit-tested without processes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/stats.h"
#include "firedrill/v1/controller.pb.h"
#include "firedrill/v1/scenario.pb.h"
#include "firedrill/v1/telemetry.pb.h"

namespace firedrill::controller {

using ::firedrill::Median;

// A rank's busy time in a step: everything but waiting for peers in the
// gradient all-reduce. In synchronous data parallel every rank's step time
// equals the slowest rank's, so busy time is what tells ranks apart.
inline double BusyMs(const v1::StepReport& s) { return s.step_ms() - s.comm_ms() - s.pp_wait_ms(); }

// The fault's onset as step `s` of the faulty run shows it: the step's start
// (ms since the epoch) when it is at or past the earliest trigger step of
// `faults`, else 0. The time rubric counts from here.
int64_t FaultOnsetUnixMs(const google::protobuf::RepeatedPtrField<v1::ResolvedFault>& faults,
                         const v1::StepReport& s);

// The last `window` reports (all if fewer) into a RankStatus's numeric
// fields: times and rates (step_ms, phases, comm_total_ms, checkpoint_ms,
// samples/s, tokens/s, padding fraction) are window means; step, loss,
// loss scale, skipped total, grad norm, lr, global batch and memory are the
// last report's values.
void FillRankWindow(const std::vector<v1::StepReport>& steps, int window, v1::RankStatus* out);

// The settings a fault may change (lr, loss scale, global batch) as a
// healthy run's reports carry them: left out of everything a learner reads
// of the baseline or a healthy verification run, which would otherwise
// show, beside the deployed config, what the fault changed. The names are
// the MetricsRow series'.
const std::vector<std::string>& WithheldSettings();
template <typename Report>
void WithholdSettings(Report* r) {
  r->clear_lr();
  r->clear_loss_scale();
  r->clear_loss_scaling();  // whether the healthy job scaled is a setting too
  r->clear_global_batch();
}

// busy_vs_median and the slow flag for every rank with data.
void MarkSlowRanks(double slow_ratio, std::vector<v1::RankStatus>* ranks);

// Linear-interpolated quantile q in [0, 1] of v.
double Percentile(std::vector<double> v, double q);

// Where ranks report no thread times (the skew's fallback, WindowStats),
// per-rank busy time is summarised by a low quantile: on a shared machine
// the OS preempts ranks at random, which only ever adds time, while a slow
// host adds it to every step. The 25th percentile keeps the second and
// drops most of the first.
inline constexpr double kBusyQuantile = 0.25;

struct WindowStats {
  int64_t steps = 0;                    // steps measured on every rank
  double throughput_samples_per_s = 0;  // whole job, from its median step
  // Whole job, by the clock: the window's samples over the time its slowest
  // rank took for all of its steps (periodic stalls such as checkpoint
  // writes count here; the median step leaves them out).
  double clock_samples_per_s = 0;
  double tokens_per_s = 0;              // whole job: sum over ranks of their median real tokens/s
  double median_step_ms = 0;
  // How much more slowly one rank works than the others: max/median over
  // ranks of each rank's stretch, the busy time of its steps (step minus the
  // exposed all-reduce wait and any checkpoint write) over its training
  // thread's CPU time in them (the median over blocks of timed steps,
  // kStretchBlockSteps below). The stretch is a rank's own: a batch of long
  // sequences takes more wall time and more CPU time alike, a peer's fair
  // share of a shared core stretches every rank alike, while a throttled
  // device (a CPU quota, a sleep, a slow disk the thread waits on)
  // stretches one rank's wall time alone.
  // Without thread times (a report that lacks them on more than half its
  // steps): max/median of each rank's busy-time p25 instead.
  double rank_step_skew = 0;
  bool rank_skew_of_stretch = false;  // which of the two rank_step_skew is
  // Means over ranks and steps: what the job spent its steps on.
  double data_ms = 0;
  double compute_ms = 0;                // forward + backward
  double comm_ms = 0;                   // exposed collective wait
  double padding_fraction = 0;
  // Model-parallel jobs: the pipeline's measured bubble (a stage's idle
  // share of the schedule) and the tensor-parallel all-reduces' time.
  double pp_bubble_fraction = 0;
  double tp_comm_ms = 0;
  // The training signals: mean loss over ranks and steps (NaN or inf when
  // any step's loss was), and the share of steps whose optimiser update was
  // skipped (inf/NaN gradients).
  double mean_loss = 0;
  double skipped_fraction = 0;
};

// What rank_step_skew measured, for a line a learner reads.
inline const char* SkewName(bool of_stretch) {
  return of_stretch ? "rank stretch skew (busy time per CPU ms)" : "rank busy-time skew";
}

// A rank's stretch is taken over blocks of this many consecutive steps, and
// the median block rates it: a CPU quota throttles in bursts (a short step
// may run whole within one period's quota, the next waits out the rest of
// a period), which a block of steps averages over, while one step stalled
// by the OS or a checkpoint write stays in one block of the median's tail.
inline constexpr int kStretchBlockSteps = 5;

// Throughput of a window in a verification unit: "tokens" or samples.
double Throughput(const WindowStats& w, const std::string& unit);

// The window's numbers into a run summary.
void FillSummary(const WindowStats& w, v1::RunSummary* out);

// Samples one optimiser step of `job` trains on: micro-batch x
// micro-batches x data-parallel replicas (the ranks of a model-parallel
// replica share theirs). The unit a run's throughput is measured in, so a
// fix that changes the split of the same global batch (accumulation, the
// parallel strategy) is measured in the same samples.
int64_t JobSamplesPerStep(const v1::JobSpec& job);

// Measures steps [first_step, first_step + count) on every rank.
// per_rank[r] holds rank r's reports in step order. global_batch: the
// samples of one step (JobSamplesPerStep). The job moves at its slowest rank's median step time
// (medians, so one step stalled by the OS does not decide a verification).
WindowStats MeasureWindow(const std::vector<std::vector<v1::StepReport>>& per_rank, int64_t first_step,
                          int64_t count, int global_batch);

// One healthy (A) and one fixed (B) window measured back to back.
struct MeasuredPair {
  WindowStats healthy, fixed;
};

// fixed/healthy mean loss of one pair; +inf when the fixed loss is not
// finite (or the healthy one is not a positive finite number, so no ratio
// can say the fix is as good).
double LossRatio(const WindowStats& healthy, const WindowStats& fixed);

// A run's training signals, step by step, for `firedrill metrics`: the
// whole run, thinned when long. Rows are admitted when their step is a
// multiple of `stride`; when `cap` rows are held, every other one goes and
// the stride doubles, so a run of any length keeps an even sample.
struct History {
  int64_t stride = 1;
  std::vector<v1::MetricsRow> rows;
  std::string host;  // where the rank ran this run (a replaced host's curve keeps its name)
};
v1::MetricsRow MetricsRowOf(const v1::StepReport& s);
void AppendHistory(const v1::StepReport& s, size_t cap, History* h);

// Judges a fix on paired windows: the median over pairs of fixed/healthy
// throughput (in the spec's unit) against the floor, the median of the
// fixed windows' rank skew against the ceiling, and every fixed window
// measured in full. Numerics drills (spec.loss_vs_baseline_max,
// spec.skipped_steps_max) also judge the median of the per-pair loss ratios
// and of the fixed windows' skipped shares.
v1::Verification Verify(const std::vector<MeasuredPair>& pairs, const v1::VerifySpec& spec);

// Checkpoint-cadence drills: the fixed job's expected goodput, from what its
// costs measured. A checkpoint write of write_ms every `every` steps of
// step_ms each (a run's median step: the steps without a write), hosts that
// fail every mtbf_s on average, each failure losing half an interval and its
// write: goodput = interval/(interval + write) - (interval + write)/2/mtbf.
// The best is taken at Young's interval sqrt(2 x write x mtbf), within a
// hair of the true optimum. No checkpoints (every 0) lose everything at a
// failure.
struct CadenceInputs {
  int64_t every = 0;
  double step_ms = 0;
  double write_ms = 0;  // a write as verification measured them (its slowest rank's median)
  int writes = 0;       // how many were measured, over every rank
};
struct CadenceVerdict {
  bool passed = false;
  double goodput = 0, best = 0, min = 0;
  int64_t best_every = 0;  // Young's interval in steps
  std::string detail;
};
CadenceVerdict JudgeCadence(const CadenceInputs& in, const v1::VerifySpec& spec);

// Whether the pairs measured so far decide Verify over `planned` pairs,
// whatever the rest would measure. With an odd number planned each
// criterion is a median, which passes exactly when most pairs pass it: once
// most have passed every criterion, or most have failed one, the rest cannot
// change the verdict (the remaining pairs are taken as completed windows;
// one that fails to complete fails verification on its own). An even
// number's median averages two values: decided only when all are measured.
bool VerdictDecided(const std::vector<MeasuredPair>& pairs, int planned, const v1::VerifySpec& spec);

}  // namespace firedrill::controller
