#include "agent/reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "agent/comm/process_group.h"
#include "agent/error_text.h"

namespace firedrill::agent {

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// After the last bucket's gradients, all-reduced with them: the ranks'
// votes, then the compute stretch of the ranks that share one and how many
// did (each 1 or 0).
constexpr int64_t kTrailer = 3;

}  // namespace

int64_t BucketBytes(double mb, double default_mb) {
  const double m = mb > 0 ? mb : default_mb;
  return std::max<int64_t>(1, static_cast<int64_t>(std::llround(m * 1024.0 * 1024.0)));
}

std::vector<std::vector<size_t>> AssignBuckets(const std::vector<int64_t>& param_bytes,
                                               int64_t first_cap_bytes, int64_t cap_bytes) {
  std::vector<std::vector<size_t>> out;
  std::vector<size_t> cur;
  int64_t size = 0;
  int64_t cap = first_cap_bytes;
  for (size_t k = param_bytes.size(); k-- > 0;) {
    cur.push_back(k);
    size += param_bytes[k];
    if (size >= cap) {
      out.push_back(std::move(cur));
      cur.clear();
      size = 0;
      cap = cap_bytes;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

struct Reducer::Impl {
  ReducerOptions opts;
  std::vector<at::Tensor> params;
  std::vector<std::vector<size_t>> assignment;
  std::vector<size_t> bucket_of;    // per parameter
  std::vector<at::Tensor> buffers;  // per bucket; the last has kTrailer elements after its gradients
  std::vector<at::Tensor> grads;    // per bucket: buffer without the trailer
  std::vector<at::Tensor> views;    // per parameter: its .grad
  // Held so that the hooks stay registered: a parameter's autograd meta only
  // keeps a weak reference to its AccumulateGrad node.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  int64_t grad_bytes = 0;

  // Per synchronising backward.
  comm::ProcessGroup* pg = nullptr;
  int64_t step = 0;
  bool sync = false;
  bool stop = false;
  bool probe = false;
  double stretch = 0;        // this rank's compute stretch to share; 0: none (slowed)
  std::vector<char> marked;  // per parameter: gradient ready
  std::vector<int> pending;  // per bucket: gradients still to come
  std::vector<char> ready;   // per bucket
  size_t next_launch = 0;    // buckets start strictly in order
  std::vector<comm::PendingCollective> inflight;
  Status error;

  // Points each parameter of bucket b at its slice of buffers[b].
  void Layout(size_t b) {
    // The last of all the buckets (not of those made so far: Create lays
    // each out as soon as it exists) carries the trailer.
    const bool last = b + 1 == assignment.size();
    int64_t n = buffers[b].numel() - (last ? kTrailer : 0);
    grads[b] = last ? buffers[b].narrow(0, 0, n) : buffers[b];
    int64_t off = 0;
    for (size_t k : assignment[b]) {
      auto p = params[k];
      views[k] = buffers[b].narrow(0, off, p.numel()).view_as(p);
      // Autograd accumulates in place into a defined .grad when grad mode
      // is off (as it is during backward), so gradients land in the bucket.
      p.mutable_grad() = views[k];
      off += p.numel();
    }
  }
  void MarkReady(size_t param);
  void LaunchReady();
  void Launch(size_t b);
  std::string BucketLabel(size_t b) const {
    return " (gradient bucket " + std::to_string(b + 1) + " of " + std::to_string(buffers.size()) + ")";
  }
};

namespace {

// Runs on the thread executing backward (the caller's, for CPU graphs)
// right after the parameter's gradient was accumulated into its view.
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(std::weak_ptr<Reducer::Impl> r, size_t param) : r_(std::move(r)), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (auto r = r_.lock()) r->MarkReady(param_);
    return outputs;
  }

 private:
  std::weak_ptr<Reducer::Impl> r_;
  size_t param_;
};

}  // namespace

void Reducer::Impl::MarkReady(size_t param) {
  if (!sync || marked[param]) return;
  marked[param] = 1;
  // Autograd replaces a .grad instead of adding into it only in cases this
  // trainer avoids (an undefined .grad, grad mode on); fold such a gradient
  // back before its bucket is sent.
  const auto& g = params[param].grad();
  if (!g.defined() || g.data_ptr() != views[param].data_ptr()) {
    if (g.defined()) views[param].copy_(g);
    params[param].mutable_grad() = views[param];
  }
  const size_t b = bucket_of[param];
  if (--pending[b] == 0) {
    ready[b] = 1;
    LaunchReady();
  }
}

void Reducer::Impl::LaunchReady() {
  // Bucket k+1 may be complete before bucket k (a layer's bias before its
  // weight); it waits, so that every rank issues the same sequence.
  while (next_launch < buffers.size() && ready[next_launch]) Launch(next_launch++);
}

void Reducer::Impl::Launch(size_t b) {
  if (!error.ok()) return;  // a failed collective: later ones would only pile up
  if (sync && opts.before_launch) opts.before_launch();  // in backward, not from Finish()
  if (b + 1 == buffers.size()) {
    float* t = buffers[b].data_ptr<float>() + buffers[b].numel() - kTrailer;
    t[0] = EncodeVotes(stop, probe, opts.world_size);
    t[1] = stretch > 0 ? static_cast<float>(stretch) : 0.0f;
    t[2] = stretch > 0 ? 1.0f : 0.0f;
  }
  // Average as DDP does, before the sum: each rank contributes g / world.
  auto p = pg->StartAllReduceSum(buffers[b], step, 1.0 / opts.world_size);
  if (!p.ok()) {
    error = Status(p.status().code(), p.status().message() + BucketLabel(b));
    return;
  }
  inflight[b] = std::move(p).value();
}

Reducer::Reducer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Reducer::~Reducer() = default;

StatusOr<std::unique_ptr<Reducer>> Reducer::Create(const std::vector<at::Tensor>& params,
                                                   const ReducerOptions& opts) {
  if (params.empty())
    return InvalidArgument("rank " + std::to_string(opts.rank) + ": no parameters to reduce");
  if (opts.world_size < 1) return InvalidArgument("world_size must be >= 1");
  if (opts.first_bucket_bytes <= 0 || opts.bucket_bytes <= 0)
    return InvalidArgument("bucket caps must be > 0");
  auto impl = std::make_shared<Impl>();
  impl->opts = opts;
  impl->params = params;
  try {
    std::vector<int64_t> bytes;
    for (const auto& p : params) {
      if (p.scalar_type() != at::kFloat || !p.requires_grad() || p.is_sparse()) {
        return InvalidArgument("rank " + std::to_string(opts.rank) +
                               ": gradient buckets need dense fp32 parameters that require grad");
      }
      bytes.push_back(p.numel() * static_cast<int64_t>(p.element_size()));
    }
    if (opts.flat) {
      const int64_t all = std::numeric_limits<int64_t>::max();
      impl->assignment = AssignBuckets(bytes, all, all);
    } else {
      impl->assignment = AssignBuckets(bytes, opts.first_bucket_bytes, opts.bucket_bytes);
    }
    const size_t nb = impl->assignment.size();
    impl->bucket_of.assign(params.size(), 0);
    impl->views.resize(params.size());
    impl->grads.resize(nb);
    for (size_t b = 0; b < nb; ++b) {
      int64_t n = 0;
      for (size_t k : impl->assignment[b]) {
        n += params[k].numel();
        impl->bucket_of[k] = b;
      }
      const bool last = b + 1 == nb;
      impl->buffers.push_back(at::zeros({n + (last ? kTrailer : 0)}, params[0].options().requires_grad(false)));
      impl->grad_bytes += n * static_cast<int64_t>(sizeof(float));
      impl->Layout(b);
    }
    impl->marked.assign(params.size(), 0);
    impl->pending.assign(nb, 0);
    impl->ready.assign(nb, 0);
    impl->inflight.resize(nb);
    if (!opts.flat) {
      std::weak_ptr<Impl> weak = impl;
      for (size_t k = 0; k < params.size(); ++k) {
        auto acc = torch::autograd::impl::grad_accumulator(params[k]);
        if (!acc)
          return Internal("rank " + std::to_string(opts.rank) + ": parameter " + std::to_string(k) +
                          " has no gradient accumulator");
        acc->add_post_hook(std::make_unique<GradReadyHook>(weak, k));
        impl->accumulators.push_back(std::move(acc));
      }
    }
  } catch (const std::exception& e) {
    return Internal("rank " + std::to_string(opts.rank) + ": building gradient buckets failed: " + ErrorText(e));
  }
  return std::unique_ptr<Reducer>(new Reducer(std::move(impl)));
}

Status Reducer::Bind(comm::ProcessGroup* pg) {
  Impl& m = *impl_;
  int64_t bytes = 0;
  for (const auto& b : m.buffers) bytes += (b.numel() * static_cast<int64_t>(sizeof(float)) + 63) / 64 * 64;
  auto on = pg->EnableSharedMemory(bytes);
  if (!on.ok()) return on.status();
  if (!*on) return Status::Ok();
  try {
    for (size_t b = 0; b < m.buffers.size(); ++b) {
      auto t = pg->AllocateShared(m.buffers[b].numel());
      if (!t.ok()) return t.status();
      t->copy_(m.buffers[b]);  // gradients accumulated before this run carry over
      m.buffers[b] = *t;
      m.Layout(b);
    }
  } catch (const std::exception& e) {
    return Internal("rank " + std::to_string(m.opts.rank) +
                    ": moving gradient buckets to shared memory: " + ErrorText(e));
  }
  return Status::Ok();
}

float EncodeVotes(bool stop, bool probe, int world) {
  return static_cast<float>((stop ? 1 : 0) + (probe ? world + 1 : 0));
}

void DecodeVotes(float reduced, int world, bool* stop, bool* probe) {
  const int64_t votes = std::llround(static_cast<double>(reduced) * world);
  *stop = votes % (world + 1) > 0;
  *probe = votes / (world + 1) > 0;
}

void Reducer::ShareStretch(double stretch) { impl_->stretch = stretch; }

void Reducer::Prepare(comm::ProcessGroup* pg, int64_t step, bool sync, bool stop, bool probe) {
  Impl& m = *impl_;
  m.pg = pg;
  m.step = step;
  m.sync = sync && !m.opts.flat;  // flat: nothing starts before Finish()
  m.stop = stop;
  m.probe = probe;
  if (!sync) return;
  std::fill(m.marked.begin(), m.marked.end(), 0);
  for (size_t b = 0; b < m.assignment.size(); ++b) m.pending[b] = static_cast<int>(m.assignment[b].size());
  std::fill(m.ready.begin(), m.ready.end(), 0);
  m.next_launch = 0;
  m.error = Status::Ok();
}

StatusOr<ReduceStats> Reducer::Finish() {
  Impl& m = *impl_;
  const auto t0 = Clock::now();
  m.sync = false;  // a stray hook (another backward) must not start anything now
  // Buckets whose every gradient arrived are already running; the rest
  // (flat mode, or parameters the loss did not reach) start now, in order.
  ReduceStats stats;
  stats.wait_start = t0;
  stats.started_in_backward = static_cast<int>(m.next_launch);
  std::fill(m.ready.begin(), m.ready.end(), 1);
  m.LaunchReady();
  stats.bucket_seq.reserve(m.inflight.size());
  Status first_error = m.error;
  for (size_t b = 0; b < m.inflight.size(); ++b) {
    auto& p = m.inflight[b];
    if (!p.valid()) continue;
    stats.bucket_seq.push_back(p.seq());
    Status st = m.pg->Wait(p);
    stats.total_ms += Ms(p.completed() - p.launched());
    stats.timings.push_back({p.seq(), p.bytes(), p.launched(), p.completed()});
    stats.bytes += p.bytes();
    ++stats.buckets;
    p = comm::PendingCollective();
    // The first failure ends the run: waiting on the later buckets could
    // only add one timeout each. Their collectives still hold their buffers,
    // and the process group drains them when it is destroyed.
    if (!st.ok()) {
      for (auto& q : m.inflight) q = comm::PendingCollective();
      return Status(st.code(), st.message() + m.BucketLabel(b));
    }
  }
  if (!first_error.ok()) return first_error;
  const auto& last = m.buffers.back();
  const float* t = last.data_ptr<float>() + last.numel() - kTrailer;
  DecodeVotes(t[0], m.opts.world_size, &stats.stop, &stats.probe);
  // Both averaged over the world: their ratio is the mean over the ranks that shared one.
  if (t[2] > 0) stats.peer_stretch = static_cast<double>(t[1]) / static_cast<double>(t[2]);
  stats.exposed_ms = Ms(Clock::now() - t0);
  return stats;
}

void Reducer::ZeroGrad() {
  for (auto& g : impl_->grads) g.zero_();
}

void Reducer::RebindGrads() {
  Impl& m = *impl_;
  for (size_t k = 0; k < m.params.size(); ++k) {
    const auto& g = m.params[k].grad();
    if (g.defined() && g.data_ptr() == m.views[k].data_ptr()) continue;
    if (g.defined()) m.views[k].copy_(g);
    m.params[k].mutable_grad() = m.views[k];
  }
}

const std::vector<at::Tensor>& Reducer::bucket_grads() const { return impl_->grads; }
const std::vector<std::vector<size_t>>& Reducer::assignment() const { return impl_->assignment; }
int64_t Reducer::grad_bytes() const { return impl_->grad_bytes; }

}  // namespace firedrill::agent
