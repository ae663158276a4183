// One data-parallel rank. Gradients live as views into one flat buffer with
// a trailing stop flag, so each step needs a single all-reduce that both
// averages gradients and agrees on stopping, and no per-step copies.
#include "agent/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <mutex>

#include "agent/comm/process_group.h"
#include "agent/data.h"
#include "agent/model.h"
#include "common/rng.h"
#include "faults/hook_bus.h"

namespace firedrill::agent {

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// An exception's message without c10's backtrace.
std::string ExceptionMessage(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
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
    return InvalidArgument("rank " + std::to_string(o.rank) + " outside world of " + std::to_string(j.world_size()));
  }
  FD_RETURN_IF_ERROR(ValidateModelSpec(j.model()));
  // proto3 leaves unset strings empty; empty means the default here.
  if (!j.precision().empty() && j.precision() != "fp32") {
    return Status(StatusCode::kUnimplemented, "precision \"" + j.precision() + "\" is not supported yet (fp32 only)");
  }
  if (j.optim().kind() != "sgd") return InvalidArgument("optim.kind must be \"sgd\", got \"" + j.optim().kind() + "\"");
  if (!(j.optim().lr() > 0)) return InvalidArgument("optim.lr must be > 0");
  if (!(j.optim().momentum() >= 0 && j.optim().momentum() < 1)) return InvalidArgument("optim.momentum must be in [0, 1)");
  if (j.data().batch_size() <= 0) return InvalidArgument("data.batch_size must be > 0");
  if (j.data().num_workers() < 0) return InvalidArgument("data.num_workers must be >= 0");
  if (!j.comm().backend().empty() && j.comm().backend() != "gloo") {
    return InvalidArgument("comm.backend must be \"gloo\", got \"" + j.comm().backend() + "\"");
  }
  if (j.comm().timeout_s() < 0) return InvalidArgument("comm.timeout_s must be >= 0");
  if (j.threads_per_rank() < 0) return InvalidArgument("threads_per_rank must be >= 0");
  if (o.max_steps < 0 || (o.max_steps == 0 && j.steps() <= 0)) return InvalidArgument("no steps to run (max_steps and job.steps are 0)");
  if (o.rank > 0 && !o.await_store) return InvalidArgument("rank " + std::to_string(o.rank) + " needs await_store");
  return Status::Ok();
}

constexpr double kDefaultCommTimeoutS = 30.0;

}  // namespace

struct Trainer::Impl {
  TrainerOptions opts;
  int rank = 0;
  int world = 1;
  int threads = 1;
  int64_t max_steps = 0;
  uint64_t data_seed = 0;
  std::unique_ptr<faults::HookBus> bus;
  torch::nn::Sequential model{nullptr};
  std::unique_ptr<torch::optim::SGD> optim;
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> grad_views;  // slices of flat_grad, shaped like params
  int64_t num_params = 0;
  at::Tensor flat_grad;  // num_params gradients + 1 stop flag
  std::atomic<int64_t> steps_done{0};
  mutable std::mutex param_mu;  // FlatParameters() may run beside training

  Status Train(const std::atomic<bool>& stop, const std::function<void(const v1::StepReport&)>& on_step,
               comm::ProcessGroup& pg, int64_t& step);
  Status BroadcastParameters(comm::ProcessGroup& pg, int64_t step);
};

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(TrainerOptions opts) {
  FD_RETURN_IF_ERROR(ValidateJob(opts));
  auto impl = std::make_unique<Impl>();
  impl->rank = opts.rank;
  impl->world = opts.job.world_size();
  impl->threads = std::max(1, opts.job.threads_per_rank());
  impl->max_steps = opts.max_steps > 0 ? opts.max_steps : opts.job.steps();
  impl->data_seed = opts.job.data().seed() != 0 ? static_cast<uint64_t>(opts.job.data().seed())
                                                : SplitMix64(opts.seed ^ HashLabel("data"));
  auto bus = faults::HookBus::Create(opts.faults);
  if (!bus.ok()) return WithPrefix("rank " + std::to_string(opts.rank) + ": ", bus.status());
  impl->bus = std::move(bus).value();
  try {
    at::set_num_threads(impl->threads);
    auto model = BuildModel(opts.job.model(), SplitMix64(opts.seed ^ HashLabel("model.init")));
    if (!model.ok()) return model.status();
    impl->model = std::move(model).value();
    impl->params = impl->model->parameters();
    for (const auto& p : impl->params) impl->num_params += p.numel();
    impl->flat_grad = torch::zeros({impl->num_params + 1}, torch::kFloat);
    int64_t off = 0;
    for (auto& p : impl->params) {
      auto view = impl->flat_grad.narrow(0, off, p.numel()).view_as(p);
      // Autograd accumulates in place into a defined .grad (no grad mode
      // during backward), so backward writes straight into the flat buffer.
      p.mutable_grad() = view;
      impl->grad_views.push_back(view);
      off += p.numel();
    }
    const auto& o = opts.job.optim();
    impl->optim = std::make_unique<torch::optim::SGD>(impl->params,
                                                      torch::optim::SGDOptions(o.lr()).momentum(o.momentum()));
  } catch (const std::exception& e) {
    return Internal("rank " + std::to_string(opts.rank) + ": building the trainer failed: " + ExceptionMessage(e));
  }
  impl->opts = std::move(opts);
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
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

Status Trainer::Run(const std::atomic<bool>& stop, const std::function<void(const v1::StepReport&)>& on_step) {
  Impl& m = *impl_;
  const std::string who = "rank " + std::to_string(m.rank);
  int64_t step = m.steps_done.load();
  try {
    // Thread-local under OpenMP: set it on the thread that trains.
    at::set_num_threads(m.threads);
    comm::GroupOptions go;
    go.rank = m.rank;
    go.world_size = m.world;
    go.device_host = m.opts.comm_host;
    const double timeout_s = m.opts.job.comm().timeout_s() > 0 ? m.opts.job.comm().timeout_s() : kDefaultCommTimeoutS;
    go.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::llround(timeout_s * 1000)));
    go.hooks = m.bus.get();

    std::unique_ptr<comm::ProcessGroup> pg;
    if (m.rank == 0) {
      auto host = comm::ProcessGroup::HostStore(go, m.opts.store_bind_host);
      if (!host.ok()) return BeforeStep(step, host.status());
      pg = std::move(host).value();
      if (m.opts.store_ready) m.opts.store_ready(StoreAddress{m.opts.store_advertise_host, pg->store_port()});
    } else {
      auto addr = m.opts.await_store();
      if (!addr.ok()) return BeforeStep(step, WithPrefix(who + ": waiting for rank 0's store address: ", addr.status()));
      auto join = comm::ProcessGroup::JoinStore(go, addr->host, addr->port);
      if (!join.ok()) return BeforeStep(step, join.status());
      pg = std::move(join).value();
    }
    FD_RETURN_IF_ERROR(BeforeStep(step, pg->Connect()));
    FD_RETURN_IF_ERROR(m.BroadcastParameters(*pg, step));
    return m.Train(stop, on_step, *pg, step);
  } catch (const std::exception& e) {
    return Internal(who + " step " + std::to_string(step) + ": " + ExceptionMessage(e));
  } catch (...) {
    return Internal(who + " step " + std::to_string(step) + ": unknown exception");
  }
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

Status Trainer::Impl::Train(const std::atomic<bool>& stop, const std::function<void(const v1::StepReport&)>& on_step,
                            comm::ProcessGroup& pg, int64_t& step) {
  const auto& job = opts.job;
  DataOptions dopts;
  dopts.seed = data_seed;
  dopts.rank = rank;
  dopts.world_size = world;
  dopts.batch_size = job.data().batch_size();
  dopts.input_dim = job.model().input_dim();
  dopts.num_classes = job.model().num_classes();
  dopts.num_workers = job.data().num_workers();
  dopts.threads = threads;
  DataLoader loader(dopts, step);

  const std::string who = "rank " + std::to_string(rank);
  const int64_t end = step + max_steps;
  float* flat = flat_grad.data_ptr<float>();
  const double inv_world = 1.0 / world;
  const char* phase = "";
  v1::StepReport report;
  report.set_rank(rank);
  try {
    for (; step < end; ++step) {
      const faults::StepInfo at{rank, step};
      const auto t_step = Clock::now();
      bus->OnStepBegin(at);

      phase = "data";
      auto t0 = Clock::now();
      bus->OnBatchFetch(at);
      auto batch = loader.Next();
      if (!batch.ok()) return WithPrefix(who + " step " + std::to_string(step) + ": ", batch.status());
      auto t1 = Clock::now();
      const double data_ms = MsSince(t0, t1);

      // Each compute phase reports its measured time to the hooks inside its
      // own timing, so a straggler's extra sleep lands in forward/backward.
      phase = "forward";
      t0 = Clock::now();
      auto loss = torch::nn::functional::cross_entropy(model->forward(batch->x), batch->y);
      const double loss_value = loss.item<float>();
      bus->AfterCompute({at, faults::ComputePhase::kForward, Clock::now() - t0});
      t1 = Clock::now();
      const double forward_ms = MsSince(t0, t1);

      phase = "backward";
      t0 = Clock::now();
      loss.backward();
      bus->AfterCompute({at, faults::ComputePhase::kBackward, Clock::now() - t0});
      t1 = Clock::now();
      const double backward_ms = MsSince(t0, t1);
      for (size_t i = 0; i < params.size(); ++i) {
        // Cheap guard: if autograd ever replaced a .grad instead of adding
        // into it, fold it back into the flat buffer.
        const auto& g = params[i].grad();
        if (!g.defined() || g.data_ptr() != grad_views[i].data_ptr()) {
          if (g.defined()) grad_views[i].copy_(g);
          params[i].mutable_grad() = grad_views[i];
        }
      }

      phase = "gradient all-reduce";
      t0 = Clock::now();
      flat[num_params] = stop.load(std::memory_order_relaxed) ? 1.0f : 0.0f;
      if (auto st = pg.AllReduceSum(flat_grad, step); !st.ok()) return st;
      const bool stop_all = flat[num_params] > 0.0f;
      flat_grad.mul_(inv_world);
      t1 = Clock::now();
      const double comm_ms = MsSince(t0, t1);

      phase = "optimizer";
      t0 = Clock::now();
      {
        std::lock_guard<std::mutex> lock(param_mu);
        optim->step();
      }
      bus->AfterCompute({at, faults::ComputePhase::kOptimizer, Clock::now() - t0});
      flat_grad.zero_();  // zero_grad, without dropping the views
      t1 = Clock::now();
      const double optim_ms = MsSince(t0, t1);

      bus->OnStepEnd(at);
      const auto t_end = Clock::now();
      steps_done.store(step + 1);

      phase = "step report";
      const double step_ms = MsSince(t_step, t_end);
      report.set_step(step);
      report.set_step_ms(step_ms);
      report.set_data_ms(data_ms);
      report.set_forward_ms(forward_ms);
      report.set_backward_ms(backward_ms);
      report.set_comm_ms(comm_ms);
      report.set_optim_ms(optim_ms);
      report.set_loss(loss_value);
      report.set_samples_per_s(step_ms > 0 ? job.data().batch_size() * 1000.0 / step_ms : 0.0);
      report.set_end_unix_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count());
      report.set_collective_seq(pg.seq());
      if (on_step) on_step(report);
      if (stop_all) {
        ++step;
        break;
      }
    }
  } catch (const std::exception& e) {
    return Internal(who + " step " + std::to_string(step) + ": " + phase + " failed: " + ExceptionMessage(e));
  }
  return Status::Ok();
}

}  // namespace firedrill::agent
