// The only translation unit that includes c10d. Every call into c10d/Gloo is
// wrapped so that its exceptions become a Status naming rank, op, sequence
// number and size: the learner reads these messages when a peer dies.
#include "agent/comm/process_group.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdio>
#include <exception>
#include <vector>

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
  std::vector<at::Tensor> args;  // reused so a collective allocates nothing here
};

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl, const GroupOptions& opts)
    : impl_(std::move(impl)), opts_(opts) {}

ProcessGroup::~ProcessGroup() {
  // Gloo's destructor drains its queue and joins threads; it must not throw
  // out of a destructor even when peers are gone.
  try {
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

StatusOr<std::unique_ptr<ProcessGroup>> ProcessGroup::JoinStore(const GroupOptions& opts, const std::string& host,
                                                                int port) {
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
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(opts_.device_host));
    // One collective is in flight at a time; more worker threads would only
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

Status ProcessGroup::AllReduceSum(at::Tensor& t, int64_t step) { return Collective("allreduce", t, step, -1); }

Status ProcessGroup::Broadcast(at::Tensor& t, int root, int64_t step) { return Collective("broadcast", t, step, root); }

Status ProcessGroup::Collective(const char* op, at::Tensor& t, int64_t step, int root) {
  const int64_t seq = ++seq_;
  const int64_t bytes = static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
  const faults::CollectiveInfo info{{opts_.rank, step}, op, seq, bytes};
  auto label = [&] {
    return "rank " + std::to_string(opts_.rank) + " step " + std::to_string(step) + ": " + op + " #" +
           std::to_string(seq) + " (" + FormatBytes(bytes) + ")";
  };
  if (!impl_->pg) return FailedPrecondition(label() + ": process group not connected");
  auto& args = impl_->args;
  try {
    if (opts_.hooks) opts_.hooks->BeforeCollective(info);
    args.clear();
    args.push_back(t);
    c10::intrusive_ptr<c10d::Work> work;
    if (root < 0) {
      c10d::AllreduceOptions o;
      o.reduceOp = c10d::ReduceOp::SUM;
      work = impl_->pg->allreduce(args, o);
    } else {
      c10d::BroadcastOptions o;
      o.rootRank = root;
      work = impl_->pg->broadcast(args, o);
    }
    work->wait();
    args.clear();
    if (opts_.hooks) opts_.hooks->AfterCollective(info);
  } catch (...) {
    args.clear();
    return CommError(label(), Describe(std::current_exception()));
  }
  return Status::Ok();
}

}  // namespace firedrill::agent::comm
