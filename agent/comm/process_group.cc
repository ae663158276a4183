// The only translation unit that includes c10d. Every call into c10d/Gloo is
// wrapped so that its exceptions become a Status naming rank, op, sequence
// number and size: the learner reads these messages when a peer dies.
#include "agent/comm/process_group.h"

#include <ATen/ATen.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "agent/comm/shm_transport.h"
#include "collectives/collective.h"

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

namespace {

// Launches that wait out a degraded link first (GroupOptions::link)
// run here, one at a time in the order they were posted. While anything is
// queued, later launches queue behind it, so every rank still hands its
// collectives to the transport in the same order.
class LinkQueue {
 public:
  ~LinkQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  // Posts `fn` if `defer` or something is still queued; false: run it now.
  bool PostIf(bool defer, std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!defer && pending_ == 0) return false;
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    queue_.push_back(std::move(fn));
    ++pending_;
    cv_.notify_all();
    return true;
  }
  void Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
      if (queue_.empty()) return;  // quit, nothing left
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
      if (--pending_ == 0) idle_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<std::function<void()>> queue_;
  int pending_ = 0;
  bool quit_ = false;
  std::thread thread_;
};

// What a rank moves over its link for one collective, as a ring would
// (collectives/: one definition per collective).
int64_t RingLinkBytes(const char* op, int64_t bytes, int world) {
  const collectives::Collective* c = collectives::Find(op);
  return c ? c->link_bytes(bytes, world) : bytes;
}

}  // namespace

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d::Store> group_store;  // store, or a prefix of it
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  std::shared_ptr<ShmAllReduce> shm;
  int shm_setups = 0;
  // Declared last: destroyed first, so queued launches finish while the
  // group they launch on still exists.
  std::unique_ptr<LinkQueue> link = std::make_unique<LinkQueue>();
};

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl, const GroupOptions& opts)
    : impl_(std::move(impl)), opts_(opts) {}

ProcessGroup::~ProcessGroup() {
  // Gloo's destructor drains its queue and joins threads; it must not throw
  // out of a destructor even when peers are gone.
  try {
    impl_->link.reset();  // launches still queued go out first
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
    c10::intrusive_ptr<c10d::Store> store = impl_->group_store;
    if (!store) store = impl_->store;
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, opts_.rank, opts_.world_size, o);
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
  CollectiveInfo info;
  at::Tensor tensor;
  c10::intrusive_ptr<c10d::Work> work;  // Gloo
  std::shared_ptr<ShmAllReduce> shm;    // or the shared-memory path
  int64_t ticket = 0;
  // A launch deferred behind a degraded link: set once it was handed to the
  // transport (or failed to be).
  std::mutex mu;
  std::condition_variable cv;
  bool handed = true;
  Status launch_error;
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

std::string Label(const CollectiveInfo& c) {
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

CollectiveInfo ProcessGroup::BeginSync(const char* op, int64_t bytes, int64_t link_bytes, int64_t step) {
  const CollectiveInfo info{{opts_.rank, step}, op, ++seq_, bytes, link_bytes};
  impl_->link->Drain();
  if (opts_.link) {
    const auto delay = opts_.link->DelayFor(info.link_bytes);
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
  }
  return info;
}

Status ProcessGroup::Barrier(int64_t step) {
  const CollectiveInfo info = BeginSync("barrier", 0, 0, step);
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

namespace {

int64_t Bytes(const at::Tensor& t) { return static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size()); }

}  // namespace

Status ProcessGroup::AllGather(const at::Tensor& in, at::Tensor& out, int64_t step) {
  const int n = opts_.world_size;
  const auto info = BeginSync("allgather", Bytes(out), RingLinkBytes("allgather", Bytes(out), n), step);
  if (!impl_->pg) return FailedPrecondition(Label(info) + ": process group not connected");
  if (in.dim() != 1 || out.dim() != 1 || out.numel() != in.numel() * n || !out.is_contiguous() ||
      !in.is_contiguous())
    return InvalidArgument(Label(info) + ": output must hold world x input elements, both contiguous 1-D");
  try {
    std::vector<at::Tensor> inputs{in};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < n; ++r) outputs[0].push_back(out.narrow(0, r * in.numel(), in.numel()));
    impl_->pg->allgather(outputs, inputs)->wait();
  } catch (...) {
    return CommError(Label(info), Describe(std::current_exception()));
  }
  return Status::Ok();
}

Status ProcessGroup::ReduceScatterSum(const at::Tensor& in, at::Tensor& out, int64_t step) {
  const int n = opts_.world_size;
  const auto info = BeginSync("reducescatter", Bytes(in), RingLinkBytes("reducescatter", Bytes(in), n), step);
  if (!impl_->pg) return FailedPrecondition(Label(info) + ": process group not connected");
  if (in.dim() != 1 || out.dim() != 1 || in.numel() != out.numel() * n || !out.is_contiguous() ||
      !in.is_contiguous())
    return InvalidArgument(Label(info) + ": input must hold world x output elements, both contiguous 1-D");
  try {
    // Part r of every rank lands on rank r, ordered by sender; summing the
    // parts leaves this rank's slice of the reduction.
    at::Tensor input = in;
    at::Tensor gathered = at::empty_like(in);
    std::vector<int64_t> equal;
    impl_->pg->alltoall_base(gathered, input, equal, equal)->wait();
    at::sum_out(out, gathered.view({n, out.numel()}), {0});
  } catch (...) {
    return CommError(Label(info), Describe(std::current_exception()));
  }
  return Status::Ok();
}

Status ProcessGroup::Send(const at::Tensor& t, int peer, int tag, int64_t step) {
  const auto info = BeginSync("send", Bytes(t), RingLinkBytes("send", Bytes(t), opts_.world_size), step);
  if (!impl_->pg) return FailedPrecondition(Label(info) + ": process group not connected");
  try {
    std::vector<at::Tensor> args{t};
    impl_->pg->send(args, peer, tag)->wait();
  } catch (...) {
    return CommError(Label(info) + " to rank " + std::to_string(peer), Describe(std::current_exception()));
  }
  return Status::Ok();
}

Status ProcessGroup::Recv(at::Tensor& t, int peer, int tag, int64_t step) {
  if (!impl_->pg)
    return FailedPrecondition("rank " + std::to_string(opts_.rank) + ": recv from rank " + std::to_string(peer) +
                              ": process group not connected");
  try {
    std::vector<at::Tensor> args{t};
    impl_->pg->recv(args, peer, tag)->wait();
  } catch (...) {
    const CollectiveInfo info{{opts_.rank, step}, "recv", ++seq_, Bytes(t),
                              RingLinkBytes("recv", Bytes(t), opts_.world_size)};
    return CommError(Label(info) + " from rank " + std::to_string(peer), Describe(std::current_exception()));
  }
  // The receiving side's link: the message is only usable once it crossed it.
  BeginSync("recv", Bytes(t), RingLinkBytes("recv", Bytes(t), opts_.world_size), step);
  return Status::Ok();
}

StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::NewGroup(const std::string& tag,
                                                               std::chrono::milliseconds timeout) {
  GroupOptions o = opts_;
  o.timeout = timeout;
  o.recorder = nullptr;
  o.allow_shared_memory = false;
  auto impl = std::make_unique<Impl>();
  impl->store = impl_->store;
  try {
    impl->group_store = c10::make_intrusive<c10d::PrefixStore>(tag, impl_->store);
  } catch (...) {
    return CommError("rank " + std::to_string(opts_.rank) + ": group " + tag, Describe(std::current_exception()));
  }
  std::unique_ptr<ProcessGroup> g(new ProcessGroup(std::move(impl), o));
  FD_RETURN_IF_ERROR(g->Connect());
  return g;
}

StatusOr<std::vector<double>> ProcessGroup::RawGlooAllReduceUs(const std::string& tag,
                                                                const std::vector<int64_t>& sizes, int warmup,
                                                                int iters) {
  std::vector<double> us;
  try {
    auto o = c10d::ProcessGroupGloo::Options::create(opts_.timeout);
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(opts_.device_host));
    o->threads = 1;
    auto store = c10::make_intrusive<c10d::PrefixStore>(tag, impl_->store);
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, opts_.rank, opts_.world_size, o);
    for (int64_t bytes : sizes) {
      std::vector<at::Tensor> t{at::zeros({std::max<int64_t>(1, bytes / 4)}, at::kFloat)};
      for (int i = 0; i < warmup; ++i) pg->allreduce(t)->wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) pg->allreduce(t)->wait();
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters);
    }
  } catch (...) {
    return CommError("rank " + std::to_string(opts_.rank) + ": raw Gloo all-reduce", Describe(std::current_exception()));
  }
  return us;
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
  const int64_t bytes = static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
  st->info = CollectiveInfo{{opts_.rank, step}, op, ++seq_, bytes,
                                    RingLinkBytes(op, bytes, opts_.world_size)};
  st->tensor = t;
  if (!impl_->pg) return FailedPrecondition(Label(st->info) + ": process group not connected");
  const bool via_shm = root < 0 && impl_->shm && t.scalar_type() == at::kFloat && t.is_contiguous() &&
                       impl_->shm->Contains(t.data_ptr<float>(), t.numel());
  const std::chrono::nanoseconds delay =
      opts_.link ? opts_.link->DelayFor(st->info.link_bytes) : std::chrono::nanoseconds(0);
  // The collective counts as started now, on every rank alike; a degraded
  // link only makes this rank hand its part over later.
  st->launched = std::chrono::steady_clock::now();
  if (opts_.recorder) opts_.recorder->Started(st->info.seq, op, bytes, step, via_shm ? "shm" : "gloo");
  st->handed = false;
  const bool deferred = impl_->link->PostIf(delay.count() > 0, [this, st, delay, root, prescale] {
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    Status s = Launch(*st, root, prescale);
    std::lock_guard<std::mutex> lock(st->mu);
    st->launch_error = std::move(s);
    st->handed = true;
    st->cv.notify_all();
  });
  if (!deferred) {
    st->handed = true;
    if (Status s = Launch(*st, root, prescale); !s.ok()) {
      if (opts_.recorder) opts_.recorder->Finished(st->info.seq, s.message());
      return s;
    }
  }
  PendingCollective p;
  p.state_ = std::move(st);
  return p;
}

Status ProcessGroup::Launch(PendingCollective::State& st, int root, double prescale) {
  at::Tensor& t = st.tensor;
  if (root < 0 && impl_->shm && t.scalar_type() == at::kFloat && t.is_contiguous() &&
      impl_->shm->Contains(t.data_ptr<float>(), t.numel())) {
    auto ticket = impl_->shm->Start(t.data_ptr<float>(), t.numel(), static_cast<float>(prescale));
    if (!ticket.ok()) {
      return Status(ticket.status().code(), Label(st.info) + " failed: " + ticket.status().message());
    }
    st.shm = impl_->shm;
    st.ticket = *ticket;
    return Status::Ok();
  }
  try {
    std::vector<at::Tensor> args{t};
    if (prescale != 1.0) args[0].mul_(prescale);
    if (root < 0) {
      c10d::AllreduceOptions o;
      o.reduceOp = c10d::ReduceOp::SUM;
      st.work = impl_->pg->allreduce(args, o);
    } else {
      c10d::BroadcastOptions o;
      o.rootRank = root;
      st.work = impl_->pg->broadcast(args, o);
    }
    try {
      // Runs on Gloo's thread when the collective ends (or at once if it
      // already has). Holds only the timestamp, not the work: no cycle.
      st.work->getFuture()->addCallback(
          [done = st.completed_ns](c10::ivalue::Future&) { done->store(NowNs()); });
    } catch (...) {
      // A work without a future: Wait() stamps the time instead.
    }
  } catch (...) {
    return CommError(Label(st.info), Describe(std::current_exception()));
  }
  return Status::Ok();
}

Status ProcessGroup::Wait(PendingCollective& pending) {
  auto* st = pending.state_.get();
  if (st == nullptr)
    return FailedPrecondition("rank " + std::to_string(opts_.rank) + ": waiting on no collective");
  if (st->waited) return Status::Ok();
  st->waited = true;
  {
    std::unique_lock<std::mutex> lock(st->mu);
    st->cv.wait(lock, [&] { return st->handed; });
    if (!st->launch_error.ok()) {
      if (opts_.recorder) opts_.recorder->Finished(st->info.seq, st->launch_error.message());
      return st->launch_error;
    }
  }
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
  return Status::Ok();
}

}  // namespace firedrill::agent::comm
