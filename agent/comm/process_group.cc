// The store and the composition of backends. c10d appears here only for the
// TCPStore (and its prefixes); the collectives are the backends' (backend.h).
#include "agent/comm/process_group.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "agent/comm/decorators.h"
#include "agent/comm/gloo_backend.h"
#include "agent/comm/shm_transport.h"
#include "collectives/collective.h"

namespace firedrill::agent::comm {

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

std::string Label(const CollectiveInfo& c) {
  return "rank " + std::to_string(c.at.rank) + " step " + std::to_string(c.at.step) + ": " +
         (c.group.empty() ? "" : c.group + " ") + c.op + " #" + std::to_string(c.seq) + " (" +
         FormatBytes(c.bytes) + ")";
}

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

int64_t Bytes(const at::Tensor& t) { return static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size()); }

Status Labelled(const CollectiveInfo& info, const std::string& peer_note, const Status& s) {
  return Status(s.code(), Label(info) + peer_note + " failed: " + s.message());
}

}  // namespace

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d::Store> group_store;  // store, or a prefix of it
  // This rank's link: launches deferred behind a degraded link, across both
  // backends (their bytes cross the same link).
  std::shared_ptr<LinkQueue> link = std::make_shared<LinkQueue>();
  std::shared_ptr<Backend> gloo;       // decorated
  std::shared_ptr<Backend> shm;        // decorated; null: everything on Gloo
  std::shared_ptr<ShmAllReduce> region;  // shm's memory
  int shm_setups = 0;
};

struct PendingCollective::State {
  CollectiveInfo info;
  std::string peer_note;  // " to rank 2": point-to-point errors name the peer
  at::Tensor tensor;  // kept alive while the collective may still use it
  WorkPtr work;
  std::chrono::steady_clock::time_point launched;
  bool waited = false;
  Status result;
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
  return state_ && state_->work ? state_->work->completed() : std::chrono::steady_clock::time_point{};
}

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl, const GroupOptions& opts)
    : impl_(std::move(impl)), opts_(opts) {}

ProcessGroup::~ProcessGroup() {
  try {
    impl_->link->Drain();  // launches still queued go out first
    impl_->shm.reset();   // peers see this rank leave instead of timing out
    impl_->region.reset();
    impl_->gloo.reset();
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
  c10::intrusive_ptr<c10d::Store> store = impl_->group_store;
  if (!store) store = impl_->store;
  auto gloo = ConnectGloo(store, opts_);
  if (!gloo.ok()) return gloo.status();
  impl_->gloo = Decorate(std::move(gloo).value());
  return Status::Ok();
}

std::shared_ptr<Backend> ProcessGroup::Decorate(std::shared_ptr<Backend> bare) const {
  // The recorder outside: a collective counts as started when this rank
  // issued it, however long its link then holds it.
  if (opts_.link) bare = WithLinkFaults(std::move(bare), opts_.link, impl_->link);
  if (opts_.recorder) bare = WithFlightRecorder(std::move(bare), opts_.recorder);
  return bare;
}

CollectiveInfo ProcessGroup::Next(const char* op, int64_t bytes, int64_t step) {
  const collectives::Collective* c = collectives::Find(op);
  CollectiveInfo info{
      {job_rank(), step}, op, ++seq_, bytes, c ? c->link_bytes(bytes, opts_.world_size) : bytes, {}};
  info.group = opts_.group_name;
  return info;
}

StatusOr<PendingCollective> ProcessGroup::Post(Op op, const std::string& peer_note) {
  if (!impl_->gloo) return FailedPrecondition(Label(op.info) + peer_note + ": process group not connected");
  Backend* b = impl_->shm && impl_->shm->Supports(op) ? impl_->shm.get() : impl_->gloo.get();
  auto st = std::make_shared<PendingCollective::State>();
  st->info = op.info;
  st->peer_note = peer_note;
  st->tensor = op.tensor;
  // The collective counts as started now, on every rank alike; a degraded
  // link only makes this rank hand its part over later.
  st->launched = std::chrono::steady_clock::now();
  auto w = b->Post(op);
  if (!w.ok()) return Labelled(op.info, peer_note, w.status());
  st->work = std::move(w).value();
  PendingCollective p;
  p.state_ = std::move(st);
  return p;
}

bool ProcessGroup::WaitFor(PendingCollective& pending, std::chrono::milliseconds timeout, Status* result) {
  auto* st = pending.state_.get();
  if (st == nullptr) {
    *result = FailedPrecondition("rank " + std::to_string(opts_.rank) + ": waiting on no collective");
    return true;
  }
  if (!st->waited) {
    Status s;
    if (!st->work->Wait(timeout, &s)) return false;
    st->waited = true;
    st->result = s.ok() ? s : Labelled(st->info, st->peer_note, s);
  }
  *result = st->result;
  return true;
}

Status ProcessGroup::Wait(PendingCollective& pending) {
  Status s;
  WaitFor(pending, kNoWaitLimit, &s);
  return s;
}

Status ProcessGroup::Run(Op op, const std::string& peer_note) {
  const CollectiveInfo info = op.info;
  auto p = Post(std::move(op), peer_note);
  if (!p.ok()) return p.status();
  Status s;
  p->state_->work->Wait(kNoWaitLimit, &s);
  return s.ok() ? s : Labelled(info, peer_note, s);
}

StatusOr<PendingCollective> ProcessGroup::StartAllReduceSum(const at::Tensor& t, int64_t step, double prescale) {
  Op op;
  op.type = OpType::kAllReduce;
  op.info = Next("allreduce", Bytes(t), step);
  op.tensor = t;
  op.prescale = prescale;
  return Post(std::move(op));
}

Status ProcessGroup::AllReduceSum(at::Tensor& t, int64_t step) {
  auto p = StartAllReduceSum(t, step);
  if (!p.ok()) return p.status();
  return Wait(*p);
}

Status ProcessGroup::Broadcast(at::Tensor& t, int root, int64_t step) {
  Op op;
  op.type = OpType::kBroadcast;
  op.info = Next("broadcast", Bytes(t), step);
  op.tensor = t;
  op.root = root;
  return Run(std::move(op));
}

Status ProcessGroup::Barrier(int64_t step) {
  Op op;
  op.type = OpType::kBarrier;
  op.info = Next("barrier", 0, step);
  return Run(std::move(op));
}

Status ProcessGroup::AllGather(const at::Tensor& in, at::Tensor& out, int64_t step) {
  Op op;
  op.type = OpType::kAllGather;
  op.info = Next("allgather", Bytes(out), step);
  if (in.dim() != 1 || out.dim() != 1 || out.numel() != in.numel() * opts_.world_size || !out.is_contiguous() ||
      !in.is_contiguous())
    return InvalidArgument(Label(op.info) + ": output must hold world x input elements, both contiguous 1-D");
  op.tensor = in;
  op.out = out;
  return Run(std::move(op));
}

Status ProcessGroup::ReduceScatterSum(const at::Tensor& in, at::Tensor& out, int64_t step) {
  Op op;
  op.type = OpType::kReduceScatter;
  op.info = Next("reducescatter", Bytes(in), step);
  if (in.dim() != 1 || out.dim() != 1 || in.numel() != out.numel() * opts_.world_size || !out.is_contiguous() ||
      !in.is_contiguous())
    return InvalidArgument(Label(op.info) + ": input must hold world x output elements, both contiguous 1-D");
  op.tensor = in;
  op.out = out;
  return Run(std::move(op));
}

Status ProcessGroup::PointToPoint(OpType type, const at::Tensor& t, int peer, int tag, int64_t step) {
  auto p = StartPointToPoint(type, t, peer, tag, step);
  if (!p.ok()) return p.status();
  return Wait(*p);
}

StatusOr<PendingCollective> ProcessGroup::StartPointToPoint(OpType type, const at::Tensor& t, int peer,
                                                            int tag, int64_t step) {
  const bool send = type == OpType::kSend;
  Op op;
  op.type = type;
  op.info = Next(send ? "send" : "recv", Bytes(t), step);
  op.tensor = t;
  op.peer = peer;
  op.tag = tag;
  return Post(std::move(op), (send ? " to rank " : " from rank ") + std::to_string(job_rank(peer)));
}

StatusOr<PendingCollective> ProcessGroup::StartSend(const at::Tensor& t, int peer, int tag, int64_t step) {
  return StartPointToPoint(OpType::kSend, t, peer, tag, step);
}

StatusOr<PendingCollective> ProcessGroup::StartRecv(const at::Tensor& t, int peer, int tag, int64_t step) {
  return StartPointToPoint(OpType::kRecv, t, peer, tag, step);
}

Status ProcessGroup::Send(const at::Tensor& t, int peer, int tag, int64_t step) {
  return PointToPoint(OpType::kSend, t, peer, tag, step);
}

Status ProcessGroup::Recv(at::Tensor& t, int peer, int tag, int64_t step) {
  return PointToPoint(OpType::kRecv, t, peer, tag, step);
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

StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::NewSubgroup(const std::string& name,
                                                                  const std::vector<int>& members,
                                                                  std::chrono::milliseconds timeout) {
  const std::string who = "rank " + std::to_string(job_rank()) + ": " + name + " group";
  std::string list;
  for (int m : members) list += (list.empty() ? "" : ",") + std::to_string(m);
  int mine = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= opts_.world_size)
      return InvalidArgument(who + " {" + list + "}: rank " + std::to_string(members[i]) +
                             " is not in the job");
    if (std::count(members.begin(), members.end(), members[i]) > 1)
      return InvalidArgument(who + " {" + list + "}: rank " + std::to_string(members[i]) +
                             " is listed twice");
    if (members[i] == opts_.rank) mine = static_cast<int>(i);
  }
  if (mine < 0) return InvalidArgument(who + " {" + list + "}: this rank is not a member");
  GroupOptions o = opts_;
  o.rank = mine;
  o.world_size = static_cast<int>(members.size());
  o.timeout = timeout;
  o.recorder = nullptr;
  o.allow_shared_memory = false;
  o.group_name = name;
  o.members.clear();
  for (int m : members) o.members.push_back(job_rank(m));
  auto impl = std::make_unique<Impl>();
  impl->store = impl_->store;
  // One link: a degraded link holds this rank's traffic of every group.
  impl->link = impl_->link;
  std::string job_ranks;
  for (int m : o.members) job_ranks += (job_ranks.empty() ? "" : ",") + std::to_string(m);
  try {
    // Keyed by the members (their ranks in the job) too: every group of a
    // mesh dimension has its own rendezvous.
    impl->group_store = c10::make_intrusive<c10d::PrefixStore>("sub/" + name + "/" + job_ranks, impl_->store);
  } catch (...) {
    return CommError(who, Describe(std::current_exception()));
  }
  std::unique_ptr<ProcessGroup> g(new ProcessGroup(std::move(impl), o));
  if (Status st = g->Connect(); !st.ok()) return Status(st.code(), who + " {" + list + "}: " + st.message());
  return g;
}

StatusOr<std::vector<double>> ProcessGroup::RawGlooAllReduceUs(const std::string& tag,
                                                                const std::vector<int64_t>& sizes, int warmup,
                                                                int iters) {
  GroupOptions cfg = opts_;
  cfg.socket_ifname.clear();  // the device of the address, as c10d's default
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::PrefixStore>(tag, impl_->store);
  } catch (...) {
    return CommError("rank " + std::to_string(opts_.rank) + ": group " + tag, Describe(std::current_exception()));
  }
  return comm::RawGlooAllReduceUs(store, cfg, sizes, warmup, iters);
}

StatusOr<bool> ProcessGroup::EnableSharedMemory(int64_t bytes_per_rank) {
  const std::string who = "rank " + std::to_string(opts_.rank) + ": setting up shared-memory all-reduce";
  if (!impl_->store) return FailedPrecondition(who + ": no store");
  StoreOps ops;
  // A subgroup agrees under its own prefix, apart from the other groups.
  c10d::Store* store = impl_->group_store ? impl_->group_store.get() : impl_->store.get();
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
  impl_->region = std::move(shm).value();
  impl_->shm = impl_->region ? Decorate(ShmBackend(impl_->region)) : nullptr;
  return impl_->shm != nullptr;
}

StatusOr<at::Tensor> ProcessGroup::AllocateShared(int64_t numel) {
  if (!impl_->region)
    return FailedPrecondition("rank " + std::to_string(opts_.rank) + ": shared memory is not enabled");
  std::shared_ptr<void> keep;
  auto p = impl_->region->Allocate(numel, &keep);
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

}  // namespace firedrill::agent::comm
