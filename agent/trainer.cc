// One data-parallel rank. Gradients live as views into the reducer's bucket
// buffers, so backward writes straight into what is all-reduced; the buckets
// start from autograd hooks while backward still runs, and the last one also
// carries the ranks' votes to stop, so stopping costs no extra collective.
#include "agent/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <time.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "agent/checkpoint.h"
#include "agent/comm/process_group.h"
#include "agent/data.h"
#include "agent/error_text.h"
#include "agent/loss_scaler.h"
#include "agent/memory.h"
#include "agent/model.h"
#include "agent/optim.h"
#include "agent/peak_flops.h"
#include "agent/pipeline.h"
#include "agent/precision.h"
#include "agent/probe.h"
#include "agent/reducer.h"
#include "agent/train_state.h"
#include "agent/zero.h"
#include "common/rng.h"
#include "common/stats.h"
#include "faults/cpu_quota.h"
#include "faults/runner.h"
#include "faults/seams.h"
#include "faults/shaped_link.h"
#include "faults/throttled_compute.h"
#include "parallel/mesh.h"
#include "scenario/loader.h"

namespace firedrill::agent {

namespace {

// The calling thread's time on a CPU and runnable but waiting for one, from
// the scheduler's own counters (zeros where the kernel has no schedstat).
struct SchedTimes {
  int64_t cpu_ns = 0, wait_ns = 0;
};
SchedTimes ThreadSchedTimes() {
  std::ifstream in("/proc/thread-self/schedstat");
  SchedTimes t;
  in >> t.cpu_ns >> t.wait_ns;
  return t;
}

void FillCpuThrottling(v1::CpuThrottling* c) {
  auto l = faults::ReadThreadCpuLimit();
  c->set_available(l.ok());
  if (!l.ok()) {
    c->set_error(l.status().message());
    return;
  }
  c->set_quota_us(l->quota_us);
  c->set_period_us(l->period_us);
  c->set_nr_periods(l->stat.periods);
  c->set_nr_throttled(l->stat.throttled);
  c->set_throttled_ns(static_cast<int64_t>(l->stat.throttled_s * 1e9));
}

using Clock = std::chrono::steady_clock;

// The calling thread's CPU time, ms: the work a compute phase did, which a
// CPU quota stretches in wall time but not in CPU time.
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
}

double MsSince(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// A step's gradient all-reduces, over every synchronising backward.
struct CommTally {
  double exposed_ms = 0;  // waiting for them after backward returned
  double total_ms = 0;    // start -> completion, summed
  int count = 0;
  int64_t bytes = 0;
};

// Adds one Finish()'s all-reduces to `tally` and, with a report, their
// slices of the step's timeline: the wait, then each bucket's all-reduce
// from when it was handed over or the one before it finished, whichever is
// later (the backend runs them one at a time, in launch order; the rest is
// queueing). `micro` is the micro-batch they followed (-1: the step's last).
void AddAllReduces(const ReduceStats& rs, Clock::time_point t_step, int micro, v1::StepReport* report,
                   CommTally* tally) {
  tally->exposed_ms += rs.exposed_ms;
  tally->total_ms += rs.total_ms;
  tally->count += rs.buckets;
  tally->bytes += rs.bytes;
  if (report == nullptr) return;
  const auto wait_end = rs.wait_start + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double, std::milli>(rs.exposed_ms));
  v1::Span* w = report->add_spans();
  w->set_name("allreduce wait");
  w->set_start_ms(MsSince(t_step, rs.wait_start));
  w->set_dur_ms(MsSince(rs.wait_start, wait_end));
  w->set_micro(micro);
  Clock::time_point prev_done{};
  for (size_t b = 0; b < rs.timings.size(); ++b) {
    const BucketTiming& bt = rs.timings[b];
    const Clock::time_point began = std::max(bt.launched, prev_done);
    prev_done = bt.completed;
    v1::Span* sp = report->add_spans();
    sp->set_name("allreduce");
    sp->set_start_ms(MsSince(t_step, began));
    sp->set_dur_ms(MsSince(began, bt.completed));
    sp->set_micro(micro);
    sp->set_seq(bt.seq);
    sp->set_bytes(bt.bytes);
    sp->set_bucket(static_cast<int>(b));
  }
}

Status WithPrefix(const std::string& prefix, const Status& st) {
  return Status(st.code(), prefix + st.message());
}

// Joining fails before any step ran; say which one the run was about to do.
Status BeforeStep(int64_t step, const Status& st) {
  if (st.ok()) return st;
  return Status(st.code(), st.message() + " (before step " + std::to_string(step) + ")");
}

Status ValidateJob(const TrainerOptions& o) {
  const auto& j = o.job;
  if (j.world_size() < 1) return InvalidArgument("job.world_size must be >= 1");
  if (o.rank < 0 || o.rank >= j.world_size()) {
    return InvalidArgument("rank " + std::to_string(o.rank) + " outside world of " +
                           std::to_string(j.world_size()));
  }
  FD_RETURN_IF_ERROR(ValidateModelSpec(j.model()));
  FD_RETURN_IF_ERROR(ValidateOptimSpec(j.optim()));
  if (j.grad_accum_steps() < 0) return InvalidArgument("grad_accum_steps must be >= 0 (0 = 1)");
  if (j.data().batch_size() <= 0) return InvalidArgument("data.batch_size must be > 0");
  if (j.data().num_workers() < 0) return InvalidArgument("data.num_workers must be >= 0");
  if (!j.comm().backend().empty() && j.comm().backend() != "gloo") {
    return InvalidArgument("comm.backend must be \"gloo\", got \"" + j.comm().backend() + "\"");
  }
  if (j.comm().timeout_s() < 0) return InvalidArgument("comm.timeout_s must be >= 0");
  if (const auto& a = j.comm().accumulation_sync(); !a.empty() && a != "once" && a != "every_micro_batch")
    return InvalidArgument("comm.accumulation_sync must be \"once\" or \"every_micro_batch\", got \"" + a + "\"");
  if (!(j.comm().bucket_mb() >= 0)) return InvalidArgument("comm.bucket_mb must be >= 0 (0 = 25)");
  if (!(j.comm().first_bucket_mb() >= 0)) return InvalidArgument("comm.first_bucket_mb must be >= 0 (0 = 1)");
  if (j.threads_per_rank() < 0) return InvalidArgument("threads_per_rank must be >= 0");
  if (o.max_steps < 0 || (o.max_steps == 0 && j.steps() <= 0))
    return InvalidArgument("no steps to run (max_steps and job.steps are 0)");
  if (j.checkpoint().every() < 0) return InvalidArgument("checkpoint.every must be >= 0 (0 = never)");
  if (j.checkpoint().keep() < 0) return InvalidArgument("checkpoint.keep must be >= 0 (0 = all)");
  if (j.checkpoint().keep_period() < 0)
    return InvalidArgument("checkpoint.keep_period must be >= 0 (0 = keep no checkpoint for good)");
  if (j.checkpoint().every() > 0 && j.checkpoint().dir().empty())
    return InvalidArgument("checkpoint.every is set but checkpoint.dir is empty: say where checkpoints go");
  if (j.checkpoint().resume_from() == "latest" && j.checkpoint().dir().empty())
    return InvalidArgument("checkpoint.resume_from is \"latest\" but checkpoint.dir is empty");
  if (auto parts = ParseRestoreParts(j.checkpoint().restore()); !parts.ok())
    return InvalidArgument("checkpoint.restore: " + parts.status().message());
  if (!(j.memory().device_budget_mb() >= 0)) return InvalidArgument("memory.device_budget_mb must be >= 0 (0 = unlimited)");
  if (o.rank > 0 && !o.await_store)
    return InvalidArgument("rank " + std::to_string(o.rank) + " needs await_store");
  // Model parallelism: the scenario's own checks (a mesh the world divides
  // into, gpt-tiny, what the model-parallel path does so far).
  if (std::max(1, j.parallel().tp()) * std::max(1, j.parallel().pp()) > 1)
    FD_RETURN_IF_ERROR(scenario::ValidateParallel(j, "rank " + std::to_string(o.rank)));
  return Status::Ok();
}

constexpr double kDefaultCommTimeoutS = 30.0;

// The parameter seam: the model's own fp32 parameters, changed in place
// under the lock the optimiser takes. Says nothing in the log: a flipped
// bit leaves no trace but the value.
class ParameterBits : public faults::ParameterSeam {
 public:
  ParameterBits(const std::vector<at::Tensor>* params, std::mutex* mu) : params_(params), mu_(mu) {}
  Status FlipBit(faults::FaultId id, int64_t tensor, int64_t element, int bit) override {
    if (bit < 0 || bit > 31) return InvalidArgument("bit " + std::to_string(bit) + " is not a bit of an fp32 value");
    std::lock_guard<std::mutex> lock(*mu_);
    if (done_.count(id)) return Status::Ok();
    // Before the job's first step the weights are not the job's yet: rank
    // 0's copy is still to be broadcast over every rank's (DDP does it when
    // it wraps the model), which would undo a flip here or spread one on
    // rank 0. Flips wait for Arm().
    if (!armed_) {
      pending_[id] = {tensor, element, bit};
      return Status::Ok();
    }
    return FlipLocked(id, tensor, element, bit);
  }
  // After the parameters are broadcast: the waiting flips happen now.
  Status Arm() {
    std::lock_guard<std::mutex> lock(*mu_);
    armed_ = true;
    for (const auto& [id, f] : pending_) FD_RETURN_IF_ERROR(FlipLocked(id, f.tensor, f.element, f.bit));
    pending_.clear();
    return Status::Ok();
  }

 private:
  struct Flip {
    int64_t tensor, element;
    int bit;
  };
  Status FlipLocked(faults::FaultId id, int64_t tensor, int64_t element, int bit) {
    if (params_->empty()) return FailedPrecondition("the model has no parameters");
    const at::Tensor& p = (*params_)[static_cast<size_t>(tensor) % params_->size()];
    if (p.scalar_type() != at::kFloat || !p.is_contiguous() || p.numel() == 0)
      return FailedPrecondition("parameter " + std::to_string(tensor) + " is not a dense fp32 tensor");
    float* v = p.data_ptr<float>() + element % p.numel();
    uint32_t u;
    std::memcpy(&u, v, sizeof u);
    u ^= 1u << bit;
    std::memcpy(v, &u, sizeof u);
    done_.insert(id);
    return Status::Ok();
  }
  const std::vector<at::Tensor>* params_;
  std::mutex* mu_;
  bool armed_ = false;
  std::map<faults::FaultId, Flip> pending_;
  std::set<faults::FaultId> done_;
};

// The host seam: this rank's shards on the checkpoint storage, and the
// process. A crash leaves no line in the log: a host that loses power does
// not write one.
class HostUnderRank : public faults::HostSeam {
 public:
  HostUnderRank(std::string root, int rank, std::function<void(const std::string&)> crash)
      : root_(std::move(root)), rank_(rank), crash_(std::move(crash)) {}
  Status DamageShards(faults::FaultId id, const std::string& damage, int count, uint64_t seed) override {
    if (!damaged_.insert(id).second) return Status::Ok();
    if (root_.empty()) return FailedPrecondition("the job writes no checkpoints (checkpoint.dir is empty)");
    // The wait stays well inside a collective timeout (the validator asks
    // for 10 s or more): the peers wait in this step's all-reduce meanwhile.
    return DamageNewestShards(root_, rank_, damage, count, seed, /*manifest_wait_s=*/3.0, nullptr);
  }
  Status Crash(faults::FaultId, const std::string& why) override {
    if (crash_) crash_(why);
    return Aborted("rank " + std::to_string(rank_) + ": " + why);
  }

 private:
  std::string root_;
  int rank_;
  std::function<void(const std::string&)> crash_;
  std::set<faults::FaultId> damaged_;
};

}  // namespace

struct Trainer::Impl {
  TrainerOptions opts;
  int rank = 0;
  int world = 1;
  int threads = 1;
  int accum = 1;  // micro-batches per optimiser step
  int64_t max_steps = 0;
  int64_t global_batch = 0;  // micro-batch x accum x world
  double target_lr = 0;      // after the scaling rule, before warmup
  // The seams this rank's faults act on (faults/seams.h) and the runner
  // that applies them on schedule.
  std::unique_ptr<faults::ThrottledCompute> compute;  // a CPU quota, or sleeps
  faults::StorageLatency storage;
  std::unique_ptr<faults::LinkModel> link;  // tc on the host's own interface, or waits
  faults::FaultEnvironment environment;
  std::unique_ptr<ParameterBits> parameter_bits;
  std::unique_ptr<HostUnderRank> host;
  faults::Seams seams;
  std::unique_ptr<faults::FaultRunner> faults;
  // The sleep fallback of a slowed compute phase: (factor - 1) x the compute
  // since `mark`, inside the phase's own timing; the mark moves past it.
  // Backward also stretches just before each bucket launches, so buckets
  // leave as late as on a slow device.
  void StretchSince(std::chrono::steady_clock::time_point& mark) const;
  std::chrono::steady_clock::time_point stretch_mark;  // training thread only
  std::unique_ptr<TrainModel> model;
  Precision precision;
  std::unique_ptr<LossScaler> scaler;
  DataOptions data;
  std::vector<at::Tensor> params;
  int64_t num_params = 0;
  int64_t param_bytes = 0;
  double peak_flops = 0;  // MFU's denominator, measured once per process
  int cpus = 0;           // CPUs this process may run on (sched_getaffinity), once per process
  std::unique_ptr<Reducer> reducer;
  std::unique_ptr<Optimizer> optim;
  ZeroOptimizer* zero = nullptr;  // optim, when it partitions its state (optim.zero_stage 1)
  std::string config_hash;
  // Set when the run continues from a checkpoint: where the loader resumes.
  std::unique_ptr<DataCursor> resume_cursor;
  std::atomic<int64_t> steps_done{0};
  mutable std::mutex param_mu;  // FlatParameters() may run beside training

  Status Resume(const std::string& who);
  Status Train(const std::atomic<bool>& stop, const std::function<void(const v1::StepReport&)>& on_step,
               comm::ProcessGroup& pg, int64_t& step);
  Status BroadcastParameters(comm::ProcessGroup& pg, int64_t step);
  // Every rank writes its shard; rank 0 gathers their digests through the
  // group and writes the manifest last. `steps` is the count of optimiser
  // steps the checkpoint holds. Collective.
  Status SaveCheckpoint(comm::ProcessGroup& pg, const DataLoader& loader, int64_t steps);
  // After `steps` steps, when some rank voted for a probe: runs it on a
  // fresh group of its own and reports; a failure is reported, not returned.
  void RunProbes(comm::ProcessGroup& pg, const DataLoader& loader, int64_t steps,
                 const std::atomic<bool>& stop);
  // `probe checksum`: a SHA-256 of every parameter tensor as this rank holds
  // it, in the model's order (what Megatron-LM's
  // check_param_hashes_across_dp_replicas compares).
  Status Checksums(v1::ProbeReport* out);
  // `probe activations`: the model's forward pass on this rank's last
  // batch again, without gradients, each named point's magnitudes (a
  // forward hook, as Hugging Face's DebugUnderflowOverflow has).
  Status Activations(const DataLoader& loader, v1::ProbeReport* out);
  // `probe scaling`: this rank's last batch trained again (forward,
  // backward, no optimiser step) by the first 1, 2, 4, ... and then all
  // ranks in turn, each size's ranks all-reducing their gradients in one
  // buffer over a group of their own while the rest wait at the probe
  // group's barrier: the single-device rate and what each more rank adds.
  // The gradients are taken with autograd::grad, never accumulated into the
  // parameters' .grad (the reducer's hooks stay out of it), and the weights
  // do not move: training goes on where it paused.
  Status Scaling(comm::ProcessGroup& group, const DataLoader& loader, const v1::ProbeSpec& spec,
                 int64_t steps, const std::atomic<bool>& stop, v1::ProbeReport* out);
  // The whole model in one digest: SHA-256 over the per-tensor SHA-256s
  // (hex, in the model's order). Empty if OpenSSL failed.
  std::string ParamsDigest();
  int64_t probe_rounds = 0;
  std::string who() const { return "rank " + std::to_string(rank); }

  // Model parallelism (job.parallel with tp x pp > 1): the mesh, this
  // rank's place, its groups (joined when the run starts) and this step's
  // tensor-parallel tally. Without it dp_* are the world's and the groups
  // empty: the job's own group carries everything, as before.
  std::optional<parallel::Mesh> mesh;
  parallel::Coords coords;
  int dp_size = 1, dp_rank = 0;
  PipelineSchedule schedule = PipelineSchedule::kOneFOneB;
  std::unique_ptr<comm::ProcessGroup> tp_group, pp_group, dp_group, emb_group;
  std::unique_ptr<StageLinks> stage_links;
  struct {
    double ms = 0;
    int count = 0;
    int64_t bytes = 0;
    // Each all-reduce's start and duration, for the trace (slices within
    // the layers' forward and backward); the first kMaxTpSpans of a step.
    std::vector<std::pair<std::chrono::steady_clock::time_point, double>> spans;
  } tp_tally;
  static constexpr size_t kMaxTpSpans = 128;
  int64_t current_step = 0;  // what the tensor-parallel all-reduces label
  // Joins this rank's TP, PP, DP and embedding groups (each member calls,
  // in the same order on every rank) and links the model's shards to them.
  Status JoinMeshGroups(comm::ProcessGroup& pg, std::chrono::milliseconds timeout);
  comm::ProcessGroup& DataGroup(comm::ProcessGroup& pg) { return dp_group ? *dp_group : pg; }
  // After the gradients are averaged over the data-parallel group: the
  // tied embedding's two copies (first and last stage) summed, so both
  // take the same step.
  Status SyncTiedEmbedding(int64_t step);
  // This rank's part of the job's squared gradient norm: each gradient once
  // over the whole job (replicated ones divided by the ranks holding them).
  double GradSquaredShare();
};

void Trainer::Impl::StretchSince(std::chrono::steady_clock::time_point& mark) const {
  const double f = compute->sleep_factor();
  if (f > 1.0) {
    const auto elapsed = std::chrono::steady_clock::now() - mark;
    std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed * (f - 1.0)));
  }
  mark = std::chrono::steady_clock::now();
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(TrainerOptions opts) {
  FD_RETURN_IF_ERROR(ValidateJob(opts));
  const std::string who = "rank " + std::to_string(opts.rank) + ": ";
  auto impl = std::make_unique<Impl>();
  const auto& job = opts.job;
  impl->rank = opts.rank;
  impl->world = job.world_size();
  impl->threads = std::max(1, job.threads_per_rank());
  impl->accum = std::max(1, job.grad_accum_steps());
  impl->max_steps = opts.max_steps > 0 ? opts.max_steps : job.steps();
  impl->dp_size = impl->world;
  impl->dp_rank = impl->rank;
  ModelShard shard;
  const int tp = std::max(1, job.parallel().tp()), pp = std::max(1, job.parallel().pp());
  if (tp * pp > 1) {
    auto mesh = parallel::Mesh::Create(impl->world, tp, pp, job.parallel().order());
    if (!mesh.ok()) return WithPrefix(who, mesh.status());
    auto schedule = ParsePipelineSchedule(job.parallel().schedule());
    if (!schedule.ok()) return WithPrefix(who, schedule.status());
    impl->schedule = *schedule;
    impl->mesh = *mesh;
    impl->coords = mesh->CoordsOf(impl->rank);
    impl->dp_size = mesh->size(parallel::Dim::kDp);
    impl->dp_rank = impl->coords.dp;
    shard.tp_size = tp;
    shard.tp_rank = impl->coords.tp;
    if (pp > 1) AssignStage(job.model().layers(), impl->coords.pp, pp, &shard);
  }
  // The data-parallel replicas share the batch; a model-parallel replica's
  // ranks train on the same one.
  impl->global_batch = static_cast<int64_t>(job.data().batch_size()) * impl->accum * impl->dp_size;
  impl->target_lr = ScaledLr(job.optim(), impl->global_batch);
  const uint64_t data_seed = job.data().seed() != 0 ? static_cast<uint64_t>(job.data().seed())
                                                    : SplitMix64(opts.seed ^ HashLabel("data"));
  auto prec = Precision::FromJob(job);
  if (!prec.ok()) return WithPrefix(who, prec.status());
  impl->precision = *prec;
  auto scaler = LossScaler::FromJob(job);
  if (!scaler.ok()) return WithPrefix(who, scaler.status());
  impl->scaler = std::make_unique<LossScaler>(std::move(scaler).value());
  auto data = DataOptionsFromJob(job, impl->rank, data_seed, impl->threads);
  if (!data.ok()) return WithPrefix(who, data.status());
  impl->data = *data;
  impl->data.rank = impl->dp_rank;
  impl->data.world_size = impl->dp_size;
  auto runner = faults::FaultRunner::Create(opts.faults);
  if (!runner.ok()) return WithPrefix(who, runner.status());
  impl->faults = std::move(runner).value();
  impl->compute = std::make_unique<faults::ThrottledCompute>(opts.cpu_cgroup);
  if (opts.link_ifname.empty()) {
    impl->link = std::make_unique<faults::LinkModel>();
  } else {
    impl->link = std::make_unique<faults::ShapedLink>(opts.link_ifname);
  }
  impl->parameter_bits = std::make_unique<ParameterBits>(&impl->params, &impl->param_mu);
  impl->host = std::make_unique<HostUnderRank>(job.checkpoint().dir(), impl->rank, opts.crash);
  impl->seams = faults::Seams{impl->compute.get(), &impl->storage, impl->link.get(), &impl->environment,
                              impl->parameter_bits.get(), impl->host.get()};
  // Measured before any budget applies (the probe's own GEMMs must never be
  // what runs out of simulated memory).
  if (opts.telemetry) impl->peak_flops = PeakMatmulFlops(impl->threads);
  {
    cpu_set_t set;
    CPU_ZERO(&set);
    impl->cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  }
  // Counted from here on: the model's parameters are the first allocations.
  InstallTrackingAllocator();
  // Every run sets it, none or not: an agent process runs one job after
  // another, and a budget is the device's, not the process's (a healthy
  // run after a sliced one must not inherit the slice).
  SetBudget(job.memory().device_budget_mb() > 0 ? static_cast<int64_t>(job.memory().device_budget_mb() * 1024 * 1024)
                                                : 0,
            impl->rank);
  try {
    at::set_num_threads(impl->threads);
    auto model = CreateModel(job.model(), SplitMix64(opts.seed ^ HashLabel("model.init")), shard);
    if (!model.ok()) return WithPrefix(who, model.status());
    impl->model = std::move(model).value();
    impl->model->seam() = MakeSeam(impl->precision);
    impl->params = impl->model->parameters();
    for (const auto& p : impl->params) impl->num_params += p.numel();
    impl->param_bytes = TensorBytes(impl->params);
  } catch (const c10::OutOfMemoryError& e) {
    return ResourceExhausted(who + "building the model: " + ErrorText(e));
  } catch (const std::exception& e) {
    return Internal(who + "building the model failed: " + ErrorText(e));
  }
  ReducerOptions ro;
  ro.first_bucket_bytes = BucketBytes(job.comm().first_bucket_mb(), kDefaultFirstBucketMb);
  ro.bucket_bytes = BucketBytes(job.comm().bucket_mb(), kDefaultBucketMb);
  ro.flat = job.comm().flat_allreduce();
  ro.world_size = impl->dp_size;
  ro.rank = impl->rank;
  ro.before_launch = [raw = impl.get()] { raw->StretchSince(raw->stretch_mark); };
  try {
    auto reducer = Reducer::Create(impl->params, ro);
    if (!reducer.ok()) return reducer.status();
    impl->reducer = std::move(reducer).value();
  } catch (const c10::OutOfMemoryError& e) {
    return ResourceExhausted(who + "allocating gradient buckets: " + ErrorText(e));
  }
  if (job.optim().zero_stage() == 1) {
    auto zero = ZeroOptimizer::Create(job.optim(), impl->params, impl->rank, impl->world);
    if (!zero.ok()) return WithPrefix(who, zero.status());
    impl->zero = zero->get();
    impl->optim = std::move(zero).value();
  } else {
    auto optim = Optimizer::Create(job.optim(), impl->params);
    if (!optim.ok()) return WithPrefix(who, optim.status());
    impl->optim = std::move(optim).value();
  }
  impl->config_hash = ConfigHash(*impl->model, impl->optim->kind());
  impl->opts = std::move(opts);
  FD_RETURN_IF_ERROR(impl->Resume(who));
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

Status Trainer::Impl::Resume(const std::string& who) {
  const auto& ck = opts.job.checkpoint();
  if (ck.resume_from().empty()) return Status::Ok();
  std::string dir = ck.resume_from();
  if (dir == "latest") {
    auto latest = LatestCheckpoint(ck.dir());
    if (latest.status().code() == StatusCode::kNotFound) {
      spdlog::info("{}no checkpoint under {}; starting from step 0", who, ck.dir());
      return Status::Ok();
    }
    if (!latest.ok()) return WithPrefix(who + "resume: ", latest.status());
    dir = *latest;
  }
  // The optimiser's state as the checkpoint laid it out, against this job's.
  auto manifest = ReadManifest(dir);
  if (!manifest.ok()) return WithPrefix(who + "resume from " + dir + ": ", manifest.status());
  const bool partitioned = !manifest->tensors.empty();
  if (partitioned != (zero != nullptr))
    return FailedPrecondition(
        who + "resume from " + dir + ": " +
        (partitioned ? "the checkpoint holds the optimiser's state partitioned across its " +
                           std::to_string(manifest->world_size) +
                           " ranks (ZeRO-1, format 2); resume it with optim.zero_stage=1"
                     : std::string("the checkpoint holds each rank's whole optimiser state (format 1); resume it "
                                   "with optim.zero_stage=0")));
  // DeepSpeed's words for the same refusal: "The checkpoint being loaded
  // used a DP world size of 4 but the current world size is 2".
  if (partitioned && ck.load() == "per_rank" && manifest->world_size != world)
    return FailedPrecondition(
        who + "resume from " + dir + ": the checkpoint was saved with a data-parallel world size of " +
        std::to_string(manifest->world_size) + " and this job has " + std::to_string(world) + " ranks: " +
        (rank < manifest->world_size
             ? ShardFileName(rank) + " holds 1/" + std::to_string(manifest->world_size) +
                   " of the optimiser state, not the 1/" + std::to_string(world) + " this rank needs"
             : "it has no " + ShardFileName(rank)) +
        ", and a per-rank load (checkpoint.load: per_rank) does not partition the state anew");
  auto parsed = ParseRestoreParts(ck.restore());
  if (!parsed.ok()) return InvalidArgument(who + "checkpoint.restore: " + parsed.status().message());
  const RestoreParts parts = *parsed;
  LoadExpect expect;
  expect.world_size = world;
  expect.config_hash = config_hash;
  auto shard = LoadRankState(dir, rank, opts.job, expect, parts.data);
  if (!shard.ok()) return WithPrefix(who + "resume from " + dir + ": ", shard.status());
  std::lock_guard<std::mutex> lock(param_mu);
  auto restored = RestoreTrainState(*shard, *model, *optim, *scaler, parts);
  if (!restored.ok()) return WithPrefix(who + "resume from " + dir + ": ", restored.status());
  steps_done.store(restored->step);
  resume_cursor = std::make_unique<DataCursor>(restored->cursor);
  // What a framework prints when it skips part of a checkpoint (Megatron's
  // "not loading optimizer state"): the one line that says so.
  if (manifest->world_size != world)
    spdlog::info("{}resharded {}: its {} ranks' partitions of the optimiser state cut into {} ({})", who, dir,
                 manifest->world_size, world,
                 parts.data ? "the data position carried by the samples consumed" : "the data position not restored");
  if (parts.All())
    spdlog::info("{}resumed from {} at step {}", who, dir, restored->step);
  else
    spdlog::info("{}resumed from {} at step {}: loaded {} (checkpoint.restore); not loaded: {}", who, dir,
                 restored->step, parts.ToString(), parts.Missing());
  return Status::Ok();
}

int64_t Trainer::steps_done() const { return impl_->steps_done.load(); }

std::vector<float> Trainer::FlatParameters() const {
  std::lock_guard<std::mutex> lock(impl_->param_mu);
  std::vector<float> out;
  out.reserve(impl_->num_params);
  for (const auto& p : impl_->params) {
    auto c = p.detach().contiguous();
    const float* d = c.data_ptr<float>();
    out.insert(out.end(), d, d + c.numel());
  }
  return out;
}

Status Trainer::ExportParameters(const std::string& path) const {
  try {
    c10::Dict<std::string, at::Tensor> dict;
    {
      std::lock_guard<std::mutex> lock(impl_->param_mu);
      for (const auto& kv : impl_->model->module().named_parameters())
        dict.insert(kv.key(), kv.value().detach().clone());
    }
    const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out)
      return Internal("rank " + std::to_string(impl_->rank) + ": writing parameters to " + path + " failed");
  } catch (const std::exception& e) {
    return Internal("rank " + std::to_string(impl_->rank) +
                    ": exporting parameters failed: " + ErrorText(e));
  }
  return Status::Ok();
}

Status Trainer::Run(const std::atomic<bool>& stop,
                    const std::function<void(const v1::StepReport&)>& on_step) {
  Impl& m = *impl_;
  const std::string who = "rank " + std::to_string(m.rank);
  int64_t step = m.steps_done.load();
  // Whatever the outcome, nothing a fault changed outlives the run.
  struct RecoverFaults {
    Impl& m;
    ~RecoverFaults() { m.faults->RecoverAll(m.seams); }
  } recover{m};
  try {
    // Thread-local under OpenMP: set it on the thread that trains.
    at::set_num_threads(m.threads);
    // Denormals flushed to zero (FTZ/DAZ, torch.set_flush_denormal(True)),
    // on this thread, where forward, backward (CPU autograd runs on the
    // calling thread) and the optimiser run. A GPU computes denormals at
    // full speed; an x86 core takes a microcode assist for each. A weight
    // whose gradient stays zero (a dead ReLU's) leaves AdamW's and
    // momentum's state decaying by 0.9 a step into the denormal range
    // after about 750 steps, and measured here that made every step 1.5x
    // slower from then on (platform-launcher's job: 6 ms, then 9 ms; 6 ms
    // throughout with the flush): a slowdown no GPU job has, which a
    // learner would chase as a fault. The flag is this thread's only:
    // intra-op worker threads (threads_per_rank > 1) keep denormals; every
    // shipped drill trains on one thread.
    if (!at::globalContext().setFlushDenormal(true))
      spdlog::warn("{}: this CPU cannot flush denormals; steps may slow down as optimiser state decays", who);
    // Faults that act from the first step are in place before the group is
    // built: Gloo's device is made from the environment as it is then.
    if (Status st = m.faults->At(step, m.seams); !st.ok()) return BeforeStep(step, WithPrefix(who + ": ", st));
    comm::GroupOptions go;
    go.rank = m.rank;
    go.world_size = m.world;
    go.device_host = m.opts.comm_host;
    const double timeout_s =
        m.opts.job.comm().timeout_s() > 0 ? m.opts.job.comm().timeout_s() : kDefaultCommTimeoutS;
    go.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::llround(timeout_s * 1000)));
    go.link = m.link.get();
    go.allow_shared_memory = m.opts.shared_memory_allreduce;
    if (!m.opts.recorder) m.opts.recorder = std::make_shared<comm::FlightRecorder>();
    go.recorder = m.opts.recorder;
    // The job's setting wins; otherwise the host's environment, as
    // PyTorch's ProcessGroupGloo binding reads GLOO_SOCKET_IFNAME.
    go.socket_ifname = m.opts.job.comm().socket_ifname();
    if (go.socket_ifname.empty()) go.socket_ifname = m.environment.Get("GLOO_SOCKET_IFNAME").value_or("");

    std::unique_ptr<comm::ProcessGroup> pg;
    if (m.rank == 0) {
      auto host = comm::ProcessGroup::HostStore(go, m.opts.store_bind_host);
      if (!host.ok()) return BeforeStep(step, host.status());
      pg = std::move(host).value();
      if (m.opts.store_ready) m.opts.store_ready(StoreAddress{m.opts.store_advertise_host, pg->store_port()});
    } else {
      auto addr = m.opts.await_store();
      if (!addr.ok())
        return BeforeStep(step, WithPrefix(who + ": waiting for rank 0's store address: ", addr.status()));
      auto join = comm::ProcessGroup::JoinStore(go, addr->host, addr->port);
      if (!join.ok()) return BeforeStep(step, join.status());
      pg = std::move(join).value();
    }
    FD_RETURN_IF_ERROR(BeforeStep(step, pg->Connect()));
    if (m.mesh) FD_RETURN_IF_ERROR(BeforeStep(step, m.JoinMeshGroups(*pg, go.timeout)));
    FD_RETURN_IF_ERROR(BeforeStep(step, m.reducer->Bind(&m.DataGroup(*pg))));
    // Skipping it leaves each rank with its own initial weights: the
    // mechanism of a silent-divergence fault. Model-parallel shards differ
    // by design: each takes its data-parallel group's first replica's.
    if (!m.opts.job.comm().skip_param_broadcast())
      FD_RETURN_IF_ERROR(m.BroadcastParameters(m.DataGroup(*pg), step));
    FD_RETURN_IF_ERROR(BeforeStep(step, m.parameter_bits->Arm()));
    return m.Train(stop, on_step, *pg, step);
  } catch (const std::exception& e) {
    return Internal(who + " step " + std::to_string(step) + ": " + ErrorText(e));
  } catch (...) {
    return Internal(who + " step " + std::to_string(step) + ": unknown exception");
  }
}

Status Trainer::Impl::JoinMeshGroups(comm::ProcessGroup& pg, std::chrono::milliseconds timeout) {
  using parallel::Dim;
  const parallel::Mesh& mm = *mesh;
  // Every rank joins its groups in the same order (TP, PP, DP, embedding),
  // so no rank waits in one group's rendezvous for a peer that is still in
  // another's.
  if (mm.size(Dim::kTp) > 1) {
    auto g = pg.NewSubgroup("tp", mm.Group(Dim::kTp, rank), timeout);
    if (!g.ok()) return g.status();
    tp_group = std::move(g).value();
    GptImpl* gpt = model->gpt();
    gpt->tp.all_reduce = [this, group = tp_group.get()](at::Tensor& t) {
      const auto t0 = Clock::now();
      Status st = group->AllReduceSum(t, current_step);
      const double ms = MsSince(t0, Clock::now());
      tp_tally.ms += ms;
      if (tp_tally.spans.size() < kMaxTpSpans) tp_tally.spans.emplace_back(t0, ms);
      tp_tally.count += 1;
      tp_tally.bytes += static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
      return st;
    };
  }
  if (mm.size(Dim::kPp) > 1) {
    auto g = pg.NewSubgroup("pp", mm.Group(Dim::kPp, rank), timeout);
    if (!g.ok()) return g.status();
    pp_group = std::move(g).value();
    stage_links = GroupStageLinks(pp_group.get());
  }
  auto dp = pg.NewSubgroup("dp", mm.Group(Dim::kDp, rank), timeout);
  if (!dp.ok()) return dp.status();
  dp_group = std::move(dp).value();
  // Tied embeddings over a pipeline: the first stage's wte and the last
  // stage's copy (Megatron's embedding group).
  const GptImpl* gpt = model->gpt();
  if (mm.size(Dim::kPp) > 1 && gpt->config().tie_embeddings && (gpt->first_stage() || gpt->last_stage())) {
    const std::vector<int> stages = mm.Group(Dim::kPp, rank);
    auto g = pg.NewSubgroup("emb", {stages.front(), stages.back()}, timeout);
    if (!g.ok()) return g.status();
    emb_group = std::move(g).value();
  }
  return Status::Ok();
}

Status Trainer::Impl::SyncTiedEmbedding(int64_t step) {
  if (!emb_group) return Status::Ok();
  auto named = model->module().named_parameters();
  at::Tensor* wte = named.find("wte.weight");
  if (wte == nullptr || !wte->grad().defined())
    return Internal(who() + " step " + std::to_string(step) +
                    ": the tied embedding has no gradient to share");
  at::Tensor g = wte->grad();
  return emb_group->AllReduceSum(g, step);
}

double Trainer::Impl::GradSquaredShare() {
  const GptImpl* gpt = model->gpt();
  const double tp = mesh ? mesh->size(parallel::Dim::kTp) : 1;
  double sum = 0;
  for (const auto& np : model->module().named_parameters()) {
    const at::Tensor& g = np.value().grad();
    if (!g.defined()) continue;
    // The last stage's copy of a tied embedding has the same (summed)
    // gradient as the first stage's: counted there.
    if (gpt != nullptr && np.key() == "wte.weight" && !gpt->first_stage()) continue;
    const double sq = g.pow(2).sum().item<double>();
    sum += TpSplitOf(np.key()) == TpSplit::kReplicated ? sq / tp : sq;
  }
  return sum / dp_size;  // every data-parallel replica holds the same averaged gradients
}

Status Trainer::Impl::BroadcastParameters(comm::ProcessGroup& pg, int64_t step) {
  // Ranks already start equal (same seed), but a restarted or replaced rank
  // must not: rank 0's copy is the truth, as in DDP.
  std::lock_guard<std::mutex> lock(param_mu);
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> flat_views;
  for (const auto& p : params) flat_views.push_back(p.detach().reshape({-1}));
  at::Tensor flat = torch::cat(flat_views);
  FD_RETURN_IF_ERROR(pg.Broadcast(flat, 0, step));
  int64_t off = 0;
  for (auto& p : params) {
    p.detach().copy_(flat.narrow(0, off, p.numel()).view_as(p));
    off += p.numel();
  }
  return Status::Ok();
}

Status Trainer::Impl::Train(const std::atomic<bool>& stop,
                            const std::function<void(const v1::StepReport&)>& on_step, comm::ProcessGroup& pg,
                            int64_t& step) {
  const auto& job = opts.job;
  const std::string who = "rank " + std::to_string(rank);
  // The loader counts micro-batches: step s starts at s * accum, so a run
  // resumed at step s reads the batches an uninterrupted one would have.
  auto created = resume_cursor ? DataLoader::Resume(data, *resume_cursor) : DataLoader::Create(data, step * accum);
  if (!created.ok()) return WithPrefix(who + " step " + std::to_string(step) + ": data: ", created.status());
  std::unique_ptr<DataLoader> loader = std::move(created).value();

  const int64_t end = step + max_steps;
  const bool telemetry = opts.telemetry && on_step;
  const int warmup = job.optim().warmup_steps();
  const int64_t ckpt_every = job.checkpoint().every();
  // Finite mlp data: this rank's optimiser steps per epoch, from its strided
  // shard (samples r, r+W, ... < N, no padding). Without drop_last the last
  // batch is partial, and ranks whose shards straddle a batch boundary
  // differently run a different number of steps per epoch: the classic way
  // a job ends up with ranks in different collectives.
  int64_t epoch_steps = 0;
  if (job.data().dataset_size() > 0 && data.kind == DataKind::kClassification) {
    const int64_t n = job.data().dataset_size(), b = data.batch_size;
    const int64_t count = (n - rank + world - 1) / world;  // this rank's samples
    const int64_t batches = job.data().drop_last() ? n / (static_cast<int64_t>(world) * b) : (count + b - 1) / b;
    epoch_steps = job.data().drop_last() ? batches / accum : (batches + accum - 1) / accum;
    if (epoch_steps < 1)
      return InvalidArgument(who + ": data.dataset_size " + std::to_string(n) + " gives rank " + std::to_string(rank) +
                             " no full step per epoch (batch " + std::to_string(b) + " x world " +
                             std::to_string(world) + " x accumulation " + std::to_string(accum) + ")");
  }
  const bool scaling = scaler->enabled();
  // The training loop's accumulation, as configured (see scenario.proto):
  // all-reduces on every micro-batch without no_sync(); losses summed, not
  // averaged.
  const bool sync_every_micro = job.comm().accumulation_sync() == "every_micro_batch";
  const bool sum_losses = job.optim().accumulation_loss() == "sum";
  const char* phase = "";
  v1::StepReport report;
  report.set_rank(rank);
  StepMemoryProbe probe;
  double sample_latency_ms = data.sample_latency_ms;
  if (opts.checkpoint_at_start && ckpt_every > 0) FD_RETURN_IF_ERROR(SaveCheckpoint(pg, *loader, step));
  try {
    for (; step < end; ++step) {
      const auto t_step = Clock::now();
      const SchedTimes sched0 = telemetry ? ThreadSchedTimes() : SchedTimes{};
      if (Status st = faults->At(step, seams); !st.ok())
        return WithPrefix(who + " step " + std::to_string(step) + ": ", st);
      // Slow storage (a fault) reaches the batches made from now on; those
      // already prefetched keep the latency they were made with.
      if (const double ms = data.sample_latency_ms + storage.extra_ms(); ms != sample_latency_ms) {
        sample_latency_ms = ms;
        loader->set_sample_latency_ms(ms);
      }
      current_step = step;
      tp_tally = {};
      double data_ms = 0, forward_ms = 0, backward_ms = 0, loss_value = 0, padding = 0, model_flops = 0;
      double compute_cpu_ms = 0;  // the training thread's CPU time in forward, backward and optimiser
      CommTally step_comm;
      int64_t tokens = 0;
      probe.Begin();
      // Slices of this step's timeline, for `firedrill trace`.
      report.clear_spans();
      auto span = [&](const char* name, Clock::time_point from, Clock::time_point to, int micro) {
        if (!telemetry) return;
        v1::Span* sp = report.add_spans();
        sp->set_name(name);
        sp->set_start_ms(MsSince(t_step, from));
        sp->set_dur_ms(MsSince(from, to));
        sp->set_micro(micro);
      };

      // A pipeline stage: every micro-batch's data first (each stage reads
      // the same batches: their shapes, masks and targets), then the
      // schedule's forwards and backwards, exchanging activations and their
      // gradients with the neighbouring stages.
      StageStep pipeline;
      int64_t pp_send_bytes = 0;
      double pipeline_start_ms = 0;  // when this stage's first forward could start (its data loaded)
      if (pp_group) {
        std::vector<MicroBatch> micro_batches;
        for (int micro = 0; micro < accum; ++micro) {
          phase = "data";
          const auto t0 = Clock::now();
          auto batch = loader->Next();
          if (!batch.ok()) return WithPrefix(who + " step " + std::to_string(step) + ": ", batch.status());
          if (opts.on_batch) opts.on_batch(step, micro, *batch);
          tokens += batch->tokens;
          padding += batch->padding_fraction;
          const auto t1 = Clock::now();
          data_ms += MsSince(t0, t1);
          span("data", t0, t1, micro);
          if (telemetry)
            model_flops += static_cast<double>(batch->tokens) * model->TrainFlopsPerToken(batch->x.size(1));
          micro_batches.push_back({batch->x, batch->y, batch->mask});
        }
        phase = "pipeline";
        const GptImpl& gpt = *model->gpt();
        const int stage = coords.pp, stages = mesh->size(parallel::Dim::kPp);
        const double cpu0 = ThreadCpuMs();
        pipeline_start_ms = MsSince(t_step, Clock::now());
        StageHooks hooks;
        hooks.before_backward = [&](bool last_backward) {
          // DDP's no_sync() but on the stage's last backward.
          if (last_backward) reducer->ShareStretch(compute->SharedStretch());
          reducer->Prepare(dp_group.get(), step, last_backward, false, false);
        };
        // A slowed device's sleep inside each compute slice, as the data-
        // parallel path stretches its forward and backward.
        hooks.compute = [&](bool begin) {
          if (begin) {
            stretch_mark = Clock::now();
          } else {
            StretchSince(stretch_mark);
          }
        };
        auto ran = RunStageStep(gpt, StageSchedule(schedule, stage, stages, accum), stage, stages,
                                micro_batches, *stage_links, step, t_step, hooks);
        if (!ran.ok()) return ran.status();
        compute_cpu_ms += ThreadCpuMs() - cpu0;
        pipeline = std::move(ran).value();
        pp_send_bytes = pipeline.sent_bytes;
        loss_value = pipeline.loss;
        for (const auto& s : pipeline.slices) {
          (s.forward ? forward_ms : backward_ms) += s.dur_ms;
          if (!telemetry) continue;
          v1::Span* sp = report.add_spans();
          sp->set_name(s.forward ? "forward" : "backward");
          sp->set_start_ms(s.start_ms);
          sp->set_dur_ms(s.dur_ms);
          sp->set_micro(s.micro);
        }
      } else {
        for (int micro = 0; micro < accum; ++micro) {
          phase = "data";
          auto t0 = Clock::now();
          auto batch = loader->Next();
          if (!batch.ok()) return WithPrefix(who + " step " + std::to_string(step) + ": ", batch.status());
          if (opts.on_batch) opts.on_batch(step, micro, *batch);
          tokens += batch->tokens;
          padding += batch->padding_fraction;
          auto t1 = Clock::now();
          data_ms += MsSince(t0, t1);
          span("data", t0, t1, micro);
          // Useful work only: padding is computed but not counted, so padding
          // waste shows as lower MFU.
          if (telemetry)
            model_flops +=
                batch->tokens > 0
                    ? static_cast<double>(batch->tokens) * model->TrainFlopsPerToken(batch->x.size(1))
                    : static_cast<double>(batch->rows()) * model->TrainFlopsPerToken(0);

          // Each compute phase reports its measured time to the hooks inside
          // its own timing, so a straggler's extra sleep lands in
          // forward/backward.
          phase = "forward";
          t0 = Clock::now();
          double cpu0 = ThreadCpuMs();
          stretch_mark = t0;
          auto computed = model->Loss(*batch);
          if (!computed.ok())
            return WithPrefix(who + " step " + std::to_string(step) + ": forward: ", computed.status());
          at::Tensor loss = std::move(computed).value();
          // The mean over the step's micro-batches is what one large batch
          // would give: the gradient of loss/K summed over K backward passes.
          // The "sum" bug leaves it undivided, so its gradient is K times
          // one large batch's; the step's reported loss is the mean either way
          // (what such a loop logs).
          if (accum > 1 && !sum_losses) loss = loss / accum;
          loss_value += loss.item<double>() / (sum_losses ? accum : 1);
          // GradScaler.scale(): the scaled loss goes backward, so fp16
          // gradients sit in a range half can hold.
          if (scaling) loss = loss * scaler->scale();
          StretchSince(stretch_mark);
          t1 = Clock::now();
          compute_cpu_ms += ThreadCpuMs() - cpu0;
          forward_ms += MsSince(t0, t1);
          span("forward", t0, t1, micro);

          phase = "backward";
          t0 = Clock::now();
          cpu0 = ThreadCpuMs();
          stretch_mark = t0;
          // Only the last micro-batch synchronises (DDP's no_sync() on the
          // others): its hooks start the bucket all-reduces during backward.
          // Without no_sync() every backward does, and the loop waits for its
          // all-reduces before the next micro-batch adds into the buckets (as
          // DDP's backward does before it returns). Votes ride the last only.
          const bool last = micro == accum - 1;
          const bool sync = last || sync_every_micro;
          // With the votes: this rank's compute stretch, by which a slowed
          // rank's governor measures how slow a healthy one is now.
          if (sync) reducer->ShareStretch(compute->SharedStretch());
          reducer->Prepare(&DataGroup(pg), step, sync, last && stop.load(std::memory_order_relaxed),
                           last && opts.probes && opts.probes->pending());
          loss.backward();
          StretchSince(stretch_mark);
          t1 = Clock::now();
          compute_cpu_ms += ThreadCpuMs() - cpu0;
          backward_ms += MsSince(t0, t1);
          span("backward", t0, t1, micro);
          if (sync && !last) {
            reducer->RebindGrads();
            phase = "gradient all-reduce";
            auto early = reducer->Finish();
            if (!early.ok()) return early.status();
            AddAllReduces(*early, t_step, micro, telemetry ? &report : nullptr, &step_comm);
          }
        }
      }
      const int64_t activation_peak = probe.End();
      reducer->RebindGrads();

      phase = "gradient all-reduce";
      auto reduced = reducer->Finish();
      if (!reduced.ok()) return reduced.status();
      const ReduceStats& rs = *reduced;
      AddAllReduces(rs, t_step, -1, telemetry ? &report : nullptr, &step_comm);
      compute->OnPeers(rs.peer_stretch);
      bool stop_now = rs.stop, probe_now = rs.probe;
      double job_grad_sq = 0, bubble = 0;
      if (mesh) {
        phase = "tied embedding all-reduce";
        FD_RETURN_IF_ERROR(SyncTiedEmbedding(step));
        // The votes ride the data-parallel buckets only within a replica: one
        // small all-reduce over the job agrees on them, and carries the
        // gradient norm (every shard's part), when each stage's part of the
        // pipeline ended (for the bubble) and each replica's loss (its last
        // stage's), which every rank of the replica reports, as a
        // data-parallel rank reports its own batch's.
        phase = "step agreement";
        const int stages = mesh->size(parallel::Dim::kPp);
        const double tp = mesh->size(parallel::Dim::kTp);
        enum : int64_t { kStop, kProbe, kGradSq, kStageEnds };
        const int64_t losses = kStageEnds + stages;
        at::Tensor v = at::zeros({losses + dp_size}, at::kDouble);
        auto a = v.accessor<double, 1>();
        a[kStop] = stop.load(std::memory_order_relaxed) ? 1 : 0;
        a[kProbe] = opts.probes && opts.probes->pending() ? 1 : 0;
        {
          std::lock_guard<std::mutex> lock(param_mu);
          a[kGradSq] = GradSquaredShare();
        }
        // From the pipeline's start: loading the batches (a slow loader's
        // time) is not the schedule's idle time.
        const double end_ms = pipeline.slices.empty() ? 0
                                                      : pipeline.slices.back().start_ms +
                                                            pipeline.slices.back().dur_ms - pipeline_start_ms;
        a[kStageEnds + coords.pp] = end_ms / (tp * dp_size);
        if (model->gpt()->last_stage()) a[losses + dp_rank] = loss_value / tp;
        FD_RETURN_IF_ERROR(pg.AllReduceSum(v, step));
        stop_now = a[kStop] > 0.5;
        probe_now = a[kProbe] > 0.5;
        job_grad_sq = a[kGradSq];
        loss_value = a[losses + dp_rank];
        double span_ms = 0;
        for (int s = 0; s < stages; ++s) span_ms = std::max(span_ms, a[kStageEnds + s]);
        // The pipeline's wall time is the longest stage's (stage 0's last
        // backward); this stage computed for part of it.
        if (pp_group && span_ms > 0) bubble = std::max(0.0, 1.0 - (forward_ms + backward_ms) / span_ms);
      }

      phase = "optimizer";
      auto t0 = Clock::now();
      const double optim_cpu0 = ThreadCpuMs();
      const double lr = ScheduledLr(target_lr, warmup, step);
      double grad_sq = 0, gather_ms = 0;
      bool found_inf = false;
      {
        std::lock_guard<std::mutex> lock(param_mu);
        // GradScaler.unscale_() + step(): on the averaged gradients, so
        // every rank finds the same inf/NaN and skips the same steps.
        if (scaling) found_inf = UnscaleAndCheck(reducer->bucket_grads(), scaler->inv_scale());
        if (scaler->ShouldSkipStep(found_inf)) {
          grad_sq = SquaredNorm(reducer->bucket_grads());  // inf or NaN: what clip_grad_norm_ would report
          reducer->ZeroGrad();
        } else {
          // Zeroing in the same pass as the update: the gradients are read
          // there anyway, and the next backward accumulates into them.
          grad_sq = optim->Step(lr, /*zero_grad=*/true);
          if (mesh) grad_sq = job_grad_sq;  // this rank's is one shard's
          if (zero != nullptr) {
            // Every rank's updated partition into every rank's parameters:
            // a collective the step waits for, so exposed communication.
            phase = "parameter all-gather";
            const auto t_g = Clock::now();
            if (Status st = zero->Gather(pg, step); !st.ok()) return st;
            const auto t_g1 = Clock::now();
            gather_ms = MsSince(t_g, t_g1);
            step_comm.exposed_ms += gather_ms;
            step_comm.total_ms += gather_ms;
            span("allgather params", t_g, t_g1, -1);
            phase = "optimizer";
          }
        }
        scaler->Update(found_inf);
      }
      // The optimiser runs on the device too: a slowed one takes longer.
      stretch_mark = t0;
      StretchSince(stretch_mark);
      auto t1 = Clock::now();
      compute_cpu_ms += ThreadCpuMs() - optim_cpu0;
      const double optim_ms = MsSince(t0, t1) - gather_ms;
      span("optimizer", t0, t1, -1);
      const int64_t step_peak = PeakBytes();

      if (epoch_steps > 0 && (step + 1) % epoch_steps == 0) {
        // End of this rank's epoch: every rank meets here before the next
        // (as training scripts do before evaluation or a checkpoint).
        phase = "end-of-epoch barrier";
        spdlog::info("rank {}: epoch {} done after {} steps (step {})", rank, (step + 1) / epoch_steps, epoch_steps,
                     step);
        const auto t_b = Clock::now();
        if (Status st = pg.Barrier(step); !st.ok()) return st;
        span("barrier", t_b, Clock::now(), -1);
      }

      double checkpoint_ms = 0;
      if (ckpt_every > 0 && (step + 1) % ckpt_every == 0) {
        phase = "checkpoint";
        t0 = Clock::now();
        FD_RETURN_IF_ERROR(SaveCheckpoint(pg, *loader, step + 1));
        const auto t_ck = Clock::now();
        checkpoint_ms = MsSince(t0, t_ck);
        span("checkpoint", t0, t_ck, -1);
      }

      const auto t_end = Clock::now();
      steps_done.store(step + 1);
      // The quota's governor: the device's work, in wall time and CPU time.
      compute->OnStep(forward_ms + backward_ms + optim_ms, compute_cpu_ms);

      if (telemetry) {
        phase = "step report";
        const double step_ms = MsSince(t_step, t_end);
        report.set_step(step);
        report.set_step_ms(step_ms);
        report.set_data_ms(data_ms);
        report.set_forward_ms(forward_ms);
        report.set_backward_ms(backward_ms);
        report.set_comm_ms(step_comm.exposed_ms);
        report.set_comm_total_ms(step_comm.total_ms);
        report.set_allreduces(step_comm.count);
        report.set_allreduce_bytes(step_comm.bytes);
        report.set_optim_ms(optim_ms);
        report.set_checkpoint_ms(checkpoint_ms);
        report.set_loss(loss_value);
        report.set_grad_norm(std::sqrt(grad_sq));
        report.set_lr(lr);
        report.set_loss_scale(scaling ? scaler->scale() : 0.0);
        report.set_loss_scaling(scaling);
        report.set_skipped(scaler->last_step_skipped());
        report.set_skipped_total(scaler->skipped_total());
        report.set_micro_batches(accum);
        report.set_global_batch(global_batch);
        report.set_consumed_samples(loader->Cursor().next_batch * data.batch_size * dp_size);
        // A model-parallel replica's ranks train on the same samples: each
        // reports its share, so the job's rate is still the sum over ranks.
        const double share =
            mesh ? 1.0 / (mesh->size(parallel::Dim::kTp) * mesh->size(parallel::Dim::kPp)) : 1.0;
        report.set_samples_per_s(step_ms > 0 ? share * data.batch_size * accum * 1000.0 / step_ms : 0.0);
        report.set_tokens_per_s(step_ms > 0 ? share * tokens * 1000.0 / step_ms : 0.0);
        report.set_model_flops_per_s(step_ms > 0 ? model_flops * 1000.0 / step_ms : 0.0);
        report.set_peak_flops_per_s(peak_flops);
        report.set_padding_fraction(padding / accum);
        report.set_mem_params_bytes(param_bytes);
        report.set_mem_grads_bytes(reducer->grad_bytes());
        report.set_mem_optim_bytes(optim->state_bytes());
        report.set_mem_activation_peak_bytes(activation_peak);
        report.set_mem_peak_bytes(step_peak);
        report.set_end_unix_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
        report.set_start_unix_ns(report.end_unix_ns() - static_cast<int64_t>(step_ms * 1e6));
        report.set_collective_seq(pg.seq());
        if (mesh) {
          v1::MeshPlace* place = report.mutable_mesh();
          place->set_tp(coords.tp);
          place->set_dp(coords.dp);
          place->set_pp(coords.pp);
          place->set_tp_size(mesh->size(parallel::Dim::kTp));
          place->set_dp_size(dp_size);
          place->set_pp_size(mesh->size(parallel::Dim::kPp));
          place->set_order(mesh->order_text());
          if (pp_group) place->set_schedule(PipelineScheduleName(schedule));
          report.set_tp_comm_ms(tp_tally.ms);
          for (const auto& [t0, ms] : tp_tally.spans) {
            v1::Span* sp = report.add_spans();
            sp->set_name("tp allreduce");
            sp->set_start_ms(MsSince(t_step, t0));
            sp->set_dur_ms(ms);
            sp->set_micro(-1);
          }
          report.set_tp_allreduces(tp_tally.count);
          report.set_tp_allreduce_bytes(tp_tally.bytes);
          report.set_pp_wait_ms(pipeline.recv_wait_ms + pipeline.send_wait_ms);
          report.set_pp_send_bytes(pp_send_bytes);
          report.set_pp_bubble_fraction(bubble);
        }
        report.set_cpus(cpus);
        report.set_compute_threads(threads);
        const SchedTimes sched1 = ThreadSchedTimes();
        report.set_thread_cpu_ns(sched1.cpu_ns - sched0.cpu_ns);
        report.set_thread_wait_ns(sched1.wait_ns - sched0.wait_ns);
        FillCpuThrottling(report.mutable_cpu());
        // Where the run ends, what it ended with (verification compares it
        // across ranks and with a reference run).
        if (step + 1 == end) report.set_params_sha256(ParamsDigest());
        on_step(report);
      }
      if (probe_now) RunProbes(pg, *loader, step + 1, stop);
      if (stop_now) {
        ++step;
        break;
      }
    }
  } catch (const c10::OutOfMemoryError& e) {
    // The simulated device budget: the message reads like CUDA's.
    return ResourceExhausted(who + " step " + std::to_string(step) + ": " + phase + ": " + ErrorText(e));
  } catch (const TensorParallelError& e) {
    // Already labelled with the rank, step and collective.
    return e.status();
  } catch (const std::exception& e) {
    return Internal(who + " step " + std::to_string(step) + ": " + phase + " failed: " + ErrorText(e));
  }
  return Status::Ok();
}

void Trainer::Impl::RunProbes(comm::ProcessGroup& pg, const DataLoader& loader, int64_t steps,
                              const std::atomic<bool>& stop) {
  // Every rank is here after the same step. A rank whose copy of the
  // request has not arrived yet waits for it; one that never comes fails the
  // probe on every rank (they disagree on the request below, or the group
  // rendezvous times out), never the training.
  v1::ProbeReport report;
  report.set_rank(rank);
  report.set_step(steps);
  std::optional<v1::RunProbe> req;
  if (opts.probes) req = opts.probes->Take(std::chrono::seconds(10));
  if (req) {
    report.set_request_id(req->request_id());
    report.set_run_id(req->run_id());
  }
  // A slowed device's network is not slow: its quota is lifted while the
  // probe runs, so a straggler's pairs measure like anyone's.
  compute->Pause();
  struct Resume {
    faults::ThrottledCompute* c;
    ~Resume() { c->Resume(); }
  } resume{compute.get()};
  const auto t0 = Clock::now();
  Status st = [&]() -> Status {
    // A group per probe: a failed probe leaves nothing behind for the next.
    // Long enough for a scaling probe's idle ranks to wait out the others'
    // timed steps (at most 60 a size).
    auto group = pg.NewGroup("probe/" + std::to_string(++probe_rounds),
                             std::chrono::seconds(req && req->spec().op() == "scaling" ? 180 : 20));
    if (!group.ok()) return group.status();
    at::Tensor ids = at::full({1}, req ? static_cast<double>(req->request_id()) : -1.0, at::kDouble);
    at::Tensor all = at::empty({world}, at::kDouble);
    FD_RETURN_IF_ERROR((*group)->AllGather(ids, all, steps));
    for (int r = 0; r < world; ++r) {
      const double id = all.data_ptr<double>()[r];
      if (id != ids.item<double>())
        return Aborted("ranks disagree on the probe to run (rank " + std::to_string(r) + " has request " +
                       std::to_string(static_cast<int64_t>(id)) + ", this rank " +
                       std::to_string(static_cast<int64_t>(ids.item<double>())) + ")");
    }
    if (!req) return DeadlineExceeded("no probe request arrived");
    v1::ProbeReport started = report;
    started.set_started(true);
    opts.probes->Report(started);
    if (req->spec().op() == "checksum") return Checksums(&report);
    if (req->spec().op() == "activations") return Activations(loader, &report);
    if (req->spec().op() == "scaling") return Scaling(**group, loader, req->spec(), steps, stop, &report);
    return RunProbe(**group, req->spec(), steps, &report, &stop);
  }();
  if (!st.ok()) {
    report.clear_rows();
    report.clear_pairs();
    report.clear_checksums();
    report.clear_activations();
    report.clear_scaling();
    report.set_error(who() + " after step " + std::to_string(steps) + ": " + st.message());
  }
  spdlog::info("rank {}: probe {} after step {} took {:.0f} ms{}", rank, req ? req->spec().op() : "?", steps,
               MsSince(t0, Clock::now()), st.ok() ? "" : ": " + st.message());
  if (opts.probes && req) opts.probes->Report(report);
}

Status Trainer::Impl::Checksums(v1::ProbeReport* out) {
  std::lock_guard<std::mutex> lock(param_mu);
  for (const auto& kv : model->module().named_parameters()) {
    const at::Tensor t = kv.value().detach().contiguous();
    v1::TensorChecksum* c = out->add_checksums();
    c->set_name(kv.key());
    c->set_numel(t.numel());
    c->set_sha256(Sha256Hex(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size()));
    if (c->sha256().empty()) return Internal("SHA-256 of parameter " + kv.key() + " failed (OpenSSL)");
  }
  return Status::Ok();
}

namespace {

const char* DtypeName(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "float32";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kDouble:
      return "float64";
    case at::kLong:
      return "int64";
    default:
      return "other";
  }
}

// One named point's magnitudes, as it is stored.
v1::ActivationStat StatOf(const std::string& name, const at::Tensor& value) {
  v1::ActivationStat s;
  s.set_name(name);
  s.set_dtype(DtypeName(value.scalar_type()));
  s.set_numel(value.numel());
  const at::Tensor f = value.detach().to(at::kDouble).reshape({-1});
  s.set_inf(at::isinf(f).sum().item<int64_t>());
  s.set_nan(at::isnan(f).sum().item<int64_t>());
  const at::Tensor finite = f.masked_select(at::isfinite(f)).abs();
  if (finite.numel() > 0) {
    s.set_abs_max(finite.max().item<double>());
    const at::Tensor nonzero = finite.masked_select(finite > 0);
    if (nonzero.numel() > 0) s.set_abs_min(nonzero.min().item<double>());
  }
  return s;
}

}  // namespace

Status Trainer::Impl::Activations(const DataLoader& loader, v1::ProbeReport* out) {
  const int64_t last = loader.Cursor().next_batch - 1;
  if (last < 0) return FailedPrecondition("no batch trained on yet");
  if (const GptImpl* gpt = model->gpt(); gpt != nullptr && !(gpt->first_stage() && gpt->last_stage()))
    return FailedPrecondition(
        "probe activations runs the whole model's forward pass; rank " + std::to_string(rank) +
        " holds blocks " + std::to_string(gpt->config().first_block) + " to " +
        std::to_string(gpt->config().first_block + gpt->stage_blocks() - 1) + " of a pipeline");
  auto batch = loader.Remake(last);
  if (!batch.ok()) return batch.status();
  std::lock_guard<std::mutex> lock(param_mu);
  torch::NoGradGuard no_grad;
  ComputeSeam& seam = model->seam();
  seam.observe = [out](const std::string& name, const at::Tensor& value) {
    *out->add_activations() = StatOf(name, value);
  };
  struct Unhook {
    ComputeSeam& s;
    ~Unhook() { s.observe = nullptr; }
  } unhook{seam};
  auto loss = model->Loss(*batch);
  if (!loss.ok()) return loss.status();
  return Status::Ok();
}

Status Trainer::Impl::Scaling(comm::ProcessGroup& group, const DataLoader& loader, const v1::ProbeSpec& spec,
                              int64_t steps, const std::atomic<bool>& stop, v1::ProbeReport* out) {
  if (mesh)
    return FailedPrecondition(
        "probe scaling measures data parallelism of the whole model on 1, 2, 4, ... ranks; "
        "this job splits the model over its ranks (job.parallel)");
  // Every rank ready, or none starts: a rank that cannot run it says why
  // in its own report, the others that one could not.
  const int64_t last = loader.Cursor().next_batch - 1;
  std::optional<Batch> batch;
  Status ready = last < 0 ? FailedPrecondition("no batch trained on yet") : Status::Ok();
  if (ready.ok()) {
    auto b = loader.Remake(last);
    if (b.ok())
      batch = std::move(*b);
    else
      ready = b.status();
  }
  // Before each size and after the last: who is not ready, or told to stop
  // (the job leaves the probe together, as a sweep does). The idle ranks
  // of a size wait here for the others.
  auto agree = [&](bool fine) -> StatusOr<bool> {
    at::Tensor v = at::zeros({2}, at::kDouble);
    v.data_ptr<double>()[0] = fine ? 0.0 : 1.0;
    v.data_ptr<double>()[1] = stop.load() ? 1.0 : 0.0;
    FD_RETURN_IF_ERROR(group.AllReduceSum(v, steps));
    if (v.data_ptr<double>()[1] > 0.5) return Aborted("the job was told to stop");
    return v.data_ptr<double>()[0] < 0.5;
  };
  auto all_ready = agree(ready.ok());
  if (!all_ready.ok()) return all_ready.status();
  if (!ready.ok()) return ready;
  if (!*all_ready) return FailedPrecondition("another rank could not run it (its own report says why)");
  std::vector<int> sizes;
  for (int n = 1; n < world; n *= 2) sizes.push_back(n);
  sizes.push_back(world);
  const double flops = batch->tokens > 0
                           ? static_cast<double>(batch->tokens) * model->TrainFlopsPerToken(batch->x.size(1))
                           : static_cast<double>(batch->rows()) * model->TrainFlopsPerToken(0);
  std::vector<at::Tensor> params;
  for (const auto& p : model->parameters())
    if (p.requires_grad()) params.push_back(p);
  int64_t numel = 0;
  for (const auto& p : params) numel += p.numel();
  for (int n : sizes) {
    Status measured = Status::Ok();
    if (rank < n) {
      measured = [&]() -> Status {
        std::unique_ptr<comm::ProcessGroup> sub;
        if (n > 1) {
          std::vector<int> members;
          for (int r = 0; r < n; ++r) members.push_back(r);
          auto g = group.NewSubgroup("scaling-" + std::to_string(probe_rounds) + "-" + std::to_string(n),
                                     members, std::chrono::seconds(60));
          if (!g.ok()) return g.status();
          sub = std::move(*g);
        }
        std::vector<double> step_ms, comm_ms;
        try {
          // One buffer for every gradient, made once.
          at::Tensor buffer = at::zeros({numel}, at::kFloat);
          for (int i = 0; i < spec.warmup_iters() + spec.iters(); ++i) {
            const auto t0 = Clock::now();
            {
              // The parameters are read, not written: held only while the
              // gradients are computed (the bit-flip fault's thread and
              // the digests take the same lock).
              std::lock_guard<std::mutex> lock(param_mu);
              auto loss = model->Loss(*batch);
              if (!loss.ok()) return loss.status();
              const std::vector<at::Tensor> grads =
                  torch::autograd::grad({*loss}, params, {}, false, false, /*allow_unused=*/true);
              int64_t offset = 0;
              for (size_t k = 0; k < grads.size(); ++k) {
                at::Tensor dst = buffer.narrow(0, offset, params[k].numel());
                if (grads[k].defined())
                  dst.copy_(grads[k].reshape({-1}));
                else
                  dst.zero_();
                offset += params[k].numel();
              }
            }
            const auto t1 = Clock::now();
            if (sub) FD_RETURN_IF_ERROR(sub->AllReduceSum(buffer, steps));
            const auto t2 = Clock::now();
            if (i < spec.warmup_iters()) continue;
            step_ms.push_back(MsSince(t0, t2));
            comm_ms.push_back(sub ? MsSince(t1, t2) : 0.0);
          }
        } catch (const std::exception& e) {
          return Internal(who() + ": probe scaling on " + std::to_string(n) + " rank(s): " + ErrorText(e));
        }
        v1::ScalingRow* row = out->add_scaling();
        row->set_ranks(n);
        row->set_step_ms(Median(step_ms));
        row->set_comm_ms(Median(comm_ms));
        row->set_samples_per_step(batch->rows());
        row->set_mfu(peak_flops > 0 && row->step_ms() > 0 ? flops * 1000.0 / row->step_ms() / peak_flops : 0);
        return Status::Ok();
      }();
    }
    auto fine = agree(measured.ok());
    if (!fine.ok()) return fine.status();
    if (!measured.ok()) return measured;
    if (!*fine)
      return FailedPrecondition("another rank failed on " + std::to_string(n) +
                                " rank(s) (its own report says why)");
  }
  return Status::Ok();
}

std::string Trainer::Impl::ParamsDigest() {
  std::lock_guard<std::mutex> lock(param_mu);
  std::string all;
  for (const auto& kv : model->module().named_parameters()) {
    const at::Tensor t = kv.value().detach().contiguous();
    const std::string h = Sha256Hex(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
    if (h.empty()) return "";
    all += h;
  }
  return Sha256Hex(all.data(), all.size());
}

Status Trainer::Impl::SaveCheckpoint(comm::ProcessGroup& pg, const DataLoader& loader, int64_t steps) {
  ShardData shard;
  {
    std::lock_guard<std::mutex> lock(param_mu);
    // ZeRO-1: the replicated parameters once, by rank 0; every rank its
    // partition of the optimiser's state, and the map of where each is.
    shard = CaptureTrainState(*model, *optim, *scaler, loader.Cursor(), steps, opts.job,
                              /*with_model=*/zero == nullptr || rank == 0);
  }
  std::map<std::string, TensorPlacement> placed;
  if (zero != nullptr) {
    std::vector<std::pair<std::string, int64_t>> params;
    for (const auto& kv : model->module().named_parameters())
      params.emplace_back(kModelTensorPrefix + kv.key(), kv.value().numel());
    std::vector<std::string> state;
    for (const auto& [name, t] : optim->State())
      if (name != "step") state.push_back("optim/" + name);
    placed = PlacePartitionedState(params, state, zero->layout());
  }
  CheckpointTarget t;
  t.root = opts.job.checkpoint().dir();
  t.keep = opts.job.checkpoint().keep();
  t.keep_period = opts.job.checkpoint().keep_period();
  t.steps = steps;
  t.rank = rank;
  t.world_size = world;
  t.config_hash = config_hash;
  t.tensors = std::move(placed);
  return SaveShardedCheckpoint(pg, t, shard);
}

}  // namespace firedrill::agent
