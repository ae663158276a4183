#include "agent/probe.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "agent/comm/process_group.h"
#include "collectives/collective.h"

namespace firedrill::agent {

void ProbeMailbox::Post(const v1::RunProbe& req) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    req_ = req;
    pending_ = true;
  }
  cv_.notify_all();
}

std::optional<v1::RunProbe> ProbeMailbox::Take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return req_.has_value(); });
  std::optional<v1::RunProbe> r = std::move(req_);
  req_.reset();
  pending_ = false;
  return r;
}

std::vector<int64_t> ProbeSizes(const v1::ProbeSpec& spec) {
  std::vector<int64_t> sizes;
  const int64_t factor = spec.factor() > 1 ? spec.factor() : 2;
  for (int64_t s = spec.min_bytes(); s > 0 && s <= spec.max_bytes(); s *= factor) sizes.push_back(s);
  return sizes;
}

namespace {

using Clock = std::chrono::steady_clock;

// The collective's validation input for this rank (collectives/).
at::Tensor Filled(const collectives::Collective& c, int rank, int world, int64_t part, int64_t numel) {
  at::Tensor t = at::empty({numel}, at::kFloat);
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < numel; ++i) p[i] = c.input(rank, world, part, i);
  return t;
}

int64_t CountWrong(const at::Tensor& t, const std::function<float(int64_t)>& expected) {
  const float* p = t.data_ptr<float>();
  int64_t wrong = 0;
  for (int64_t i = 0; i < t.numel(); ++i) wrong += p[i] != expected(i);
  return wrong;
}

// Every rank's stop vote, summed: true when any rank was told to stop.
StatusOr<bool> AnyStop(comm::ProcessGroup& g, const std::atomic<bool>* stop, int64_t step) {
  at::Tensor flag = at::full({1}, stop && stop->load() ? 1.0f : 0.0f, at::kFloat);
  FD_RETURN_IF_ERROR(g.AllReduceSum(flag, step));
  return flag.item<float>() > 0;
}

Status Stopped() { return Status(StatusCode::kCancelled, "probe stopped: the job was told to stop"); }

std::string Where(const comm::ProcessGroup& g, const std::string& op, int64_t bytes) {
  return "probe " + op + " (" + comm::FormatBytes(bytes) + ") on rank " + std::to_string(g.rank());
}

// One collective of the sweep, in place or into `out`.
Status Collective(comm::ProcessGroup& g, const std::string& op, at::Tensor& in, at::Tensor& out, int64_t step) {
  if (op == "allreduce") return g.AllReduceSum(in, step);
  if (op == "allgather") return g.AllGather(in, out, step);
  return g.ReduceScatterSum(in, out, step);
}

Status Sweep(comm::ProcessGroup& g, const collectives::Collective& c, const v1::ProbeSpec& spec, int64_t step,
             v1::ProbeReport* out, const std::atomic<bool>* stop) {
  const int n = g.world_size(), r = g.rank();
  const std::string& op = spec.op();
  for (int64_t size : ProbeSizes(spec)) {
    auto any_stop = AnyStop(g, stop, step);
    if (!any_stop.ok()) return any_stop.status();
    if (*any_stop) return Stopped();
    // nccl-tests' size is the whole buffer; the collective says how it is
    // split over the ranks.
    const collectives::Buffers b = c.buffers(size, n);
    const int64_t count = b.count;
    const int64_t part = count / n;
    at::Tensor in = at::zeros({b.in}, at::kFloat);
    at::Tensor res = b.out > 0 ? at::empty({b.out}, at::kFloat) : at::Tensor();
    for (int i = 0; i < spec.warmup_iters(); ++i) FD_RETURN_IF_ERROR(Collective(g, op, in, res, step));
    const auto t0 = Clock::now();
    for (int i = 0; i < spec.iters(); ++i) FD_RETURN_IF_ERROR(Collective(g, op, in, res, step));
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / spec.iters();

    // Validation, as nccl-tests' -c 1: known inputs, one more run, every
    // element compared with what the reduction must give.
    in = Filled(c, r, n, part, b.in);
    FD_RETURN_IF_ERROR(Collective(g, op, in, res, step));
    const int64_t wrong =
        CountWrong(b.out > 0 ? res : in, [&](int64_t i) { return c.expected(r, n, part, i); });
    auto* row = out->add_rows();
    row->set_bytes(count * 4);
    row->set_count(count);
    row->set_type("float");
    row->set_redop(c.redop);
    row->set_root(-1);
    row->set_time_us(us);
    row->set_wrong(wrong);
  }
  return Status::Ok();
}

// Each ordered pair alone: every rank meets at a one-float all-reduce, then
// the sender streams `iters` messages and waits for the receiver's one-float
// acknowledgement, which bounds the time by the last message's arrival.
Status PointToPoint(comm::ProcessGroup& g, const v1::ProbeSpec& spec, int64_t step, v1::ProbeReport* out,
                    const std::atomic<bool>* stop) {
  const int n = g.world_size(), r = g.rank();
  const collectives::Collective& c = *collectives::Find("p2p");
  const int64_t count = c.buffers(spec.max_bytes(), n).count;
  at::Tensor buf = Filled(c, r, n, count, count);
  at::Tensor ack = at::zeros({1}, at::kFloat);
  int tag = 0;
  for (int src = 0; src < n; ++src) {
    for (int dst = 0; dst < n; ++dst) {
      if (src == dst) continue;
      ++tag;
      // Also the pair's starting line: nobody sends before everyone is here.
      auto any_stop = AnyStop(g, stop, step);
      if (!any_stop.ok()) return any_stop.status();
      if (*any_stop) return Stopped();
      if (r == src) {
        for (int i = 0; i < spec.warmup_iters(); ++i) FD_RETURN_IF_ERROR(g.Send(buf, dst, tag, step));
        FD_RETURN_IF_ERROR(g.Recv(ack, dst, tag, step));
        const auto t0 = Clock::now();
        for (int i = 0; i < spec.iters(); ++i) FD_RETURN_IF_ERROR(g.Send(buf, dst, tag, step));
        FD_RETURN_IF_ERROR(g.Recv(ack, dst, tag, step));
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / spec.iters();
        auto* p = out->add_pairs();
        p->set_src(src);
        p->set_dst(dst);
        p->set_time_us(us);
        p->set_bw_gbps(static_cast<double>(count * 4) / (us * 1e3));
      } else if (r == dst) {
        at::Tensor in = at::empty({count}, at::kFloat);
        for (int i = 0; i < spec.warmup_iters(); ++i) FD_RETURN_IF_ERROR(g.Recv(in, src, tag, step));
        FD_RETURN_IF_ERROR(g.Send(ack, src, tag, step));
        for (int i = 0; i < spec.iters(); ++i) FD_RETURN_IF_ERROR(g.Recv(in, src, tag, step));
        FD_RETURN_IF_ERROR(g.Send(ack, src, tag, step));
        auto* p = out->add_pairs();
        p->set_src(src);
        p->set_dst(dst);
        p->set_wrong(CountWrong(in, [&](int64_t i) { return c.expected(src, n, count, i); }));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status RunProbe(comm::ProcessGroup& group, const v1::ProbeSpec& spec, int64_t step, v1::ProbeReport* out,
                const std::atomic<bool>* stop) {
  out->set_rank(group.rank());
  out->set_step(step);
  out->set_transport("gloo");
  if (spec.iters() < 1) return InvalidArgument("probe: iters must be at least 1");
  try {
    const collectives::Collective* c = collectives::Find(spec.op());
    if (c == nullptr || !c->probe)
      return InvalidArgument("probe: unknown op '" + spec.op() + "'; known: " + collectives::ProbeNames());
    if (spec.op() == "p2p") {
      if (group.world_size() < 2) return FailedPrecondition("probe p2p needs at least 2 ranks");
      return PointToPoint(group, spec, step, out, stop);
    }
    return Sweep(group, *c, spec, step, out, stop);
  } catch (const std::exception& e) {
    return Internal(Where(group, spec.op(), spec.max_bytes()) + ": " + e.what());
  }
}

}  // namespace firedrill::agent
