// The only translation unit that includes c10d. Every call into c10d/Gloo is
// wrapped so that its exceptions become a Status naming rank, op, sequence
// number and size: the learner reads these messages when a peer dies.
#include "agent/comm/process_group.h"

#include <ATen/ATen.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "agent/comm/shm_transport.h"

namespace firedrill::agent::comm {

namespace {

// c10::Error::what() carries a C++ backtrace; the learner needs the message.
std::string Describe(std::exception_ptr ep) {
  std::string msg;
  try {
    std::rethrow_exception(ep);
  } catch (const c10::Error& e) {
    msg = e.what_without_backtrace();
  } catch (const std::exception& e) {
    msg = e.what();
  } catch (...) {
    msg = "unknown exception";
  }
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  return msg;
}

bool LooksLikeTimeout(const std::string& msg) {
  return msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos;
}

Status CommError(const std::string& what, const std::string& cause) {
  const std::string msg = what + " failed: " + cause;
  return LooksLikeTimeout(cause) ? DeadlineExceeded(msg) : Unavailable(msg);
}

}  // namespace

std::string FormatBytes(int64_t bytes) {
  char buf[32];
  if (bytes < 1000) {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  } else if (bytes < 1000 * 1000) {
    std::snprintf(buf, sizeof buf, "%.1f kB", static_cast<double>(bytes) / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  }
  return buf;
}

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  std::shared_ptr<ShmAllReduce> shm;
  int shm_setups = 0;
};

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl, const GroupOptions& opts)
    : impl_(std::move(impl)), opts_(opts) {}

ProcessGroup::~ProcessGroup() {
  // Gloo's destructor drains its queue and joins threads; it must not throw
  // out of a destructor even when peers are gone.
  try {
    impl_->shm.reset();  // peers see this rank leave instead of timing out
    impl_->pg.reset();
    impl_->store.reset();
  } catch (...) {
  }
}

StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::HostStore(const GroupOptions& opts,
                                                                const std::string& bind_host) {
  auto impl = std::make_unique<Impl>();
  try {
    c10d::TCPStoreOptions so;
    so.port = 0;  // ephemeral: several jobs (and test ranks) share one machine
    so.isServer = true;
    so.numWorkers = static_cast<size_t>(opts.world_size);
    so.waitWorkers = false;  // peers learn the port only after we return
    so.timeout = opts.timeout;
    impl->store = c10::make_intrusive<c10d::TCPStore>(bind_host, so);
  } catch (...) {
    return CommError("rank " + std::to_string(opts.rank) + ": starting the store on " + bind_host,
                     Describe(std::current_exception()));
  }
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(impl), opts));
}

StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::JoinStore(const GroupOptions& opts,
                                                                const std::string& host, int port) {
  if (port <= 0 || port > 65535) {
    return InvalidArgument("rank " + std::to_string(opts.rank) + ": bad store port " + std::to_string(port));
  }
  auto impl = std::make_unique<Impl>();
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(port);
    so.isServer = false;
    so.numWorkers = static_cast<size_t>(opts.world_size);
    so.waitWorkers = false;
    so.timeout = opts.timeout;
    impl->store = c10::make_intrusive<c10d::TCPStore>(host, so);
  } catch (...) {
    return CommError("rank " + std::to_string(opts.rank) + ": connecting to the store at " + host + ":" +
                         std::to_string(port),
                     Describe(std::current_exception()));
  }
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(impl), opts));
}

int ProcessGroup::store_port() const { return impl_->store ? impl_->store->getPort() : 0; }

Status ProcessGroup::Connect() {
  try {
    auto o = c10d::ProcessGroupGloo::Options::create(opts_.timeout);
    o->devices.push_back(opts_.socket_ifname.empty()
                             ? c10d::ProcessGroupGloo::createDeviceForHostname(opts_.device_host)
                             : c10d::ProcessGroupGloo::createDeviceForInterface(opts_.socket_ifname));
    // Gloo runs queued collectives one at a time on this thread, in the
    // order they were started: gradient buckets launched from autograd hooks
    // stay in the same order on every rank, and a second thread would only
    // compete for the few cores the ranks share.
    o->threads = 1;
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, opts_.rank, opts_.world_size, o);
  } catch (...) {
    char timeout[32];
    std::snprintf(timeout, sizeof timeout, "%.1f s", opts_.timeout.count() / 1e3);
    return CommError("rank " + std::to_string(opts_.rank) + ": joining the process group (world " +
                         std::to_string(opts_.world_size) + ", timeout " + timeout + ")",
                     Describe(std::current_exception()));
  }
  return Status::Ok();
}

struct PendingCollective::State {
  faults::CollectiveInfo info;
  c10::intrusive_ptr<c10d::Work> work;  // Gloo
  std::shared_ptr<ShmAllReduce> shm;    // or the shared-memory path
  int64_t ticket = 0;
  std::chrono::steady_clock::time_point launched;
  // Stamped by the backend's thread through the work's future, so that the
  // time a collective really took is known even when nobody was waiting.
  std::shared_ptr<std::atomic<int64_t>> completed_ns = std::make_shared<std::atomic<int64_t>>(0);
  bool waited = false;
};

PendingCollective::PendingCollective() = default;
PendingCollective::~PendingCollective() = default;
PendingCollective::PendingCollective(PendingCollective&&) noexcept = default;
PendingCollective& PendingCollective::operator=(PendingCollective&&) noexcept = default;
int64_t PendingCollective::seq() const { return state_ ? state_->info.seq : 0; }
int64_t PendingCollective::bytes() const { return state_ ? state_->info.bytes : 0; }
std::chrono::steady_clock::time_point PendingCollective::launched() const {
  return state_ ? state_->launched : std::chrono::steady_clock::time_point{};
}
std::chrono::steady_clock::time_point PendingCollective::completed() const {
  if (!state_) return {};
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(state_->completed_ns->load()));
}

namespace {

std::string Label(const faults::CollectiveInfo& c) {
  return "rank " + std::to_string(c.at.rank) + " step " + std::to_string(c.at.step) + ": " + c.op + " #" +
         std::to_string(c.seq) + " (" + FormatBytes(c.bytes) + ")";
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Status ProcessGroup::AllReduceSum(at::Tensor& t, int64_t step) {
  auto p = Start("allreduce", t, step, -1);
  if (!p.ok()) return p.status();
  return Wait(*p);
}

Status ProcessGroup::Broadcast(at::Tensor& t, int root, int64_t step) {
  auto p = Start("broadcast", t, step, root);
  if (!p.ok()) return p.status();
  return Wait(*p);
}

Status ProcessGroup::Barrier(int64_t step) {
  const faults::CollectiveInfo info{{opts_.rank, step}, "barrier", ++seq_, 0};
  if (!impl_->pg) return FailedPrecondition(Label(info) + ": process group not connected");
  if (opts_.recorder) opts_.recorder->Started(info.seq, "barrier", 0, step, "gloo");
  try {
    c10d::BarrierOptions o;
    o.timeout = opts_.timeout;
    impl_->pg->monitoredBarrier(o, /*waitAllRanks=*/true);
  } catch (...) {
    const std::string cause = Describe(std::current_exception());
    if (opts_.recorder) opts_.recorder->Finished(info.seq, cause);
    return CommError(Label(info), cause);
  }
  if (opts_.recorder) opts_.recorder->Finished(info.seq, "");
  return Status::Ok();
}

StatusOr<bool> ProcessGroup::EnableSharedMemory(int64_t bytes_per_rank) {
  const std::string who = "rank " + std::to_string(opts_.rank) + ": setting up shared-memory all-reduce";
  if (!impl_->store) return FailedPrecondition(who + ": no store");
  StoreOps ops;
  auto* store = impl_->store.get();
  ops.set = [store](const std::string& k, const std::string& v) -> Status {
    try {
      store->set(k, std::vector<uint8_t>(v.begin(), v.end()));
    } catch (...) {
      return CommError("store set " + k, Describe(std::current_exception()));
    }
    return Status::Ok();
  };
  ops.get = [store](const std::string& k) -> StatusOr<std::string> {
    try {
      auto v = store->get(k);
      return std::string(v.begin(), v.end());
    } catch (...) {
      return CommError("store get " + k, Describe(std::current_exception()));
    }
  };
  StatusOr<std::shared_ptr<ShmAllReduce>> shm = std::shared_ptr<ShmAllReduce>();
  try {
    shm = ShmAllReduce::Create(opts_.rank, opts_.world_size, bytes_per_rank, opts_.timeout,
                               opts_.allow_shared_memory, std::to_string(++impl_->shm_setups), ops);
  } catch (...) {  // e.g. the worker thread could not start
    return Internal(who + ": " + Describe(std::current_exception()));
  }
  if (!shm.ok()) return Status(shm.status().code(), who + ": " + shm.status().message());
  impl_->shm = std::move(shm).value();
  return impl_->shm != nullptr;
}

StatusOr<at::Tensor> ProcessGroup::AllocateShared(int64_t numel) {
  if (!impl_->shm)
    return FailedPrecondition("rank " + std::to_string(opts_.rank) + ": shared memory is not enabled");
  std::shared_ptr<void> keep;
  auto p = impl_->shm->Allocate(numel, &keep);
  if (!p.ok()) return p.status();
  try {
    // The deleter holds the mapping: a tensor may outlive this group.
    return at::from_blob(
        *p, {numel}, [keep](void*) mutable { keep.reset(); }, at::TensorOptions().dtype(at::kFloat));
  } catch (...) {
    return Internal("rank " + std::to_string(opts_.rank) +
                    ": wrapping shared memory: " + Describe(std::current_exception()));
  }
}

bool ProcessGroup::shared_memory() const { return impl_->shm != nullptr; }

StatusOr<PendingCollective> ProcessGroup::StartAllReduceSum(const at::Tensor& t, int64_t step,
                                                            double prescale) {
  return Start("allreduce", t, step, -1, prescale);
}

StatusOr<PendingCollective> ProcessGroup::Start(const char* op, const at::Tensor& t, int64_t step, int root,
                                                double prescale) {
  auto st = std::make_shared<PendingCollective::State>();
  st->info = faults::CollectiveInfo{{opts_.rank, step},
                                    op,
                                    ++seq_,
                                    static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size())};
  if (!impl_->pg) return FailedPrecondition(Label(st->info) + ": process group not connected");
  if (root < 0 && impl_->shm && t.scalar_type() == at::kFloat && t.is_contiguous() &&
      impl_->shm->Contains(t.data_ptr<float>(), t.numel())) {
    try {
      if (opts_.hooks) opts_.hooks->BeforeCollective(st->info);
    } catch (...) {
      return CommError(Label(st->info), Describe(std::current_exception()));
    }
    st->launched = std::chrono::steady_clock::now();
    auto ticket = impl_->shm->Start(t.data_ptr<float>(), t.numel(), static_cast<float>(prescale));
    if (!ticket.ok()) {
      return Status(ticket.status().code(), Label(st->info) + " failed: " + ticket.status().message());
    }
    st->shm = impl_->shm;
    st->ticket = *ticket;
    if (opts_.recorder) opts_.recorder->Started(st->info.seq, op, st->info.bytes, step, "shm");
    PendingCollective p;
    p.state_ = std::move(st);
    return p;
  }
  try {
    if (opts_.hooks) opts_.hooks->BeforeCollective(st->info);
    std::vector<at::Tensor> args{t};
    st->launched = std::chrono::steady_clock::now();
    if (prescale != 1.0) args[0].mul_(prescale);
    if (opts_.recorder) opts_.recorder->Started(st->info.seq, op, st->info.bytes, step, "gloo");
    if (root < 0) {
      c10d::AllreduceOptions o;
      o.reduceOp = c10d::ReduceOp::SUM;
      st->work = impl_->pg->allreduce(args, o);
    } else {
      c10d::BroadcastOptions o;
      o.rootRank = root;
      st->work = impl_->pg->broadcast(args, o);
    }
    try {
      // Runs on Gloo's thread when the collective ends (or at once if it
      // already has). Holds only the timestamp, not the work: no cycle.
      st->work->getFuture()->addCallback(
          [done = st->completed_ns](c10::ivalue::Future&) { done->store(NowNs()); });
    } catch (...) {
      // A work without a future: Wait() stamps the time instead.
    }
  } catch (...) {
    return CommError(Label(st->info), Describe(std::current_exception()));
  }
  PendingCollective p;
  p.state_ = std::move(st);
  return p;
}

Status ProcessGroup::Wait(PendingCollective& pending) {
  auto* st = pending.state_.get();
  if (st == nullptr)
    return FailedPrecondition("rank " + std::to_string(opts_.rank) + ": waiting on no collective");
  if (st->waited) return Status::Ok();
  st->waited = true;
  if (st->shm) {
    int64_t done_ns = 0;
    Status s = st->shm->Wait(st->ticket, &done_ns);
    // The transport's code says what happened: a peer gone (Unavailable),
    // too slow (DeadlineExceeded) or out of step (Aborted, a desync).
    if (!s.ok()) {
      if (opts_.recorder) opts_.recorder->Finished(st->info.seq, s.message());
      return Status(s.code(), Label(st->info) + " failed: " + s.message());
    }
    st->completed_ns->store(done_ns);
  } else {
    try {
      st->work->wait();
    } catch (...) {
      const std::string cause = Describe(std::current_exception());
      if (opts_.recorder) opts_.recorder->Finished(st->info.seq, cause);
      return CommError(Label(st->info), cause);
    }
  }
  if (opts_.recorder) opts_.recorder->Finished(st->info.seq, "");
  if (st->completed_ns->load() == 0) st->completed_ns->store(NowNs());
  try {
    if (opts_.hooks) opts_.hooks->AfterCollective(st->info);
  } catch (...) {
    return CommError(Label(st->info), Describe(std::current_exception()));
  }
  return Status::Ok();
}

}  // namespace firedrill::agent::comm
