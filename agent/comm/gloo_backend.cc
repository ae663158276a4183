// Every call into c10d's Gloo group is wrapped so that its exceptions become
// a Status; the caller adds which rank, op, sequence number and size.
#include "agent/comm/gloo_backend.h"

#include <ATen/ATen.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace firedrill::agent::comm {

std::string Describe(std::exception_ptr ep) {
  std::string msg;
  try {
    std::rethrow_exception(ep);
  } catch (const c10::Error& e) {
    msg = e.what_without_backtrace();  // what() carries a C++ backtrace
  } catch (const std::exception& e) {
    msg = e.what();
  } catch (...) {
    msg = "unknown exception";
  }
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  return msg;
}

namespace {

bool LooksLikeTimeout(const std::string& msg) {
  return msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos;
}

c10::intrusive_ptr<c10d::ProcessGroupGloo> NewGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const GroupOptions& cfg) {
  auto o = c10d::ProcessGroupGloo::Options::create(cfg.timeout);
  o->devices.push_back(cfg.socket_ifname.empty()
                           ? c10d::ProcessGroupGloo::createDeviceForHostname(cfg.device_host)
                           : c10d::ProcessGroupGloo::createDeviceForInterface(cfg.socket_ifname));
  // Gloo runs queued collectives one at a time on this thread, in the order
  // they were started: gradient buckets launched from autograd hooks stay in
  // the same order on every rank, and a second thread would only compete
  // for the few cores the ranks share.
  o->threads = 1;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, cfg.rank, cfg.world_size, o);
}

// A c10d work. `finish` runs once after it succeeded (reduce-scatter's
// local sum).
class GlooWork : public Work {
 public:
  GlooWork(c10::intrusive_ptr<c10d::Work> work, std::function<void()> finish)
      : work_(std::move(work)), finish_(std::move(finish)) {
    try {
      // Runs on Gloo's thread when the collective ends (or at once if it
      // already has). Holds only the timestamp, not the work: no cycle.
      work_->getFuture()->addCallback([done = done_ns_](c10::ivalue::Future&) { done->store(SteadyNowNs()); });
    } catch (...) {
      // Send and receive works have no future: Wait() stamps the time.
    }
  }
  bool Wait(std::chrono::milliseconds timeout, Status* result) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      // c10d's wait() reads a zero timeout as none.
      if (timeout.count() == 0 && !work_->isCompleted()) return false;
      try {
        work_->wait(timeout.count() <= 0 ? kNoTimeout : timeout);
        if (finish_) finish_();
      } catch (...) {
        // c10d's wait(timeout) throws while the collective still runs.
        // Gloo's send and receive are different: they finish only inside a
        // wait (a zero timeout never sees them done), and a timed-out wait
        // fails them, so for those a timeout is a failure.
        if (!work_->isCompleted()) return false;
        // It may have finished while the timeout was being thrown: the
        // work's own outcome decides, not the wait's.
        if (std::exception_ptr failed = work_->exception()) {
          result_ = TransportError(Describe(failed));
        } else if (finish_) {
          try {
            finish_();
          } catch (...) {
            result_ = TransportError(Describe(std::current_exception()));
          }
        }
      }
      done_ = true;
      if (done_ns_->load() == 0) done_ns_->store(SteadyNowNs());
    }
    *result = result_;
    return true;
  }
  std::chrono::steady_clock::time_point completed() const override {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(done_ns_->load()));
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> finish_;
  std::shared_ptr<std::atomic<int64_t>> done_ns_ = std::make_shared<std::atomic<int64_t>>(0);
  std::mutex mu_;
  bool done_ = false;
  Status result_;
};

// A collective c10d runs on the calling thread (the monitored barrier):
// finished when Post returns.
class FinishedWork : public Work {
 public:
  explicit FinishedWork(Status result) : result_(std::move(result)), done_(std::chrono::steady_clock::now()) {}
  bool Wait(std::chrono::milliseconds, Status* result) override {
    *result = result_;
    return true;
  }
  std::chrono::steady_clock::time_point completed() const override { return done_; }

 private:
  Status result_;
  std::chrono::steady_clock::time_point done_;
};

class GlooBackend : public Backend {
 public:
  GlooBackend(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, std::chrono::milliseconds timeout)
      : pg_(std::move(pg)), timeout_(timeout) {}
  ~GlooBackend() override {
    // Gloo's destructor drains its queue and joins threads; it must not
    // throw out of a destructor even when peers are gone.
    try {
      pg_.reset();
    } catch (...) {
    }
  }
  const char* name() const override { return "gloo"; }
  bool Supports(const Op&) const override { return true; }
  StatusOr<WorkPtr> Post(const Op& op) override {
    try {
      return Run(op);
    } catch (...) {
      return TransportError(Describe(std::current_exception()));
    }
  }

 private:
  WorkPtr Run(const Op& op) {
    std::vector<at::Tensor> args{op.tensor};
    std::function<void()> finish;
    c10::intrusive_ptr<c10d::Work> w;
    switch (op.type) {
      case OpType::kAllReduce: {
        if (op.prescale != 1.0) args[0].mul_(op.prescale);
        c10d::AllreduceOptions o;
        o.reduceOp = c10d::ReduceOp::SUM;
        w = pg_->allreduce(args, o);
        break;
      }
      case OpType::kBroadcast: {
        c10d::BroadcastOptions o;
        o.rootRank = op.root;
        w = pg_->broadcast(args, o);
        break;
      }
      case OpType::kAllGather: {
        const int64_t n = op.tensor.numel();
        std::vector<std::vector<at::Tensor>> outputs(1);
        for (int r = 0; r < pg_->getSize(); ++r) outputs[0].push_back(op.out.narrow(0, r * n, n));
        w = pg_->allgather(outputs, args);
        break;
      }
      case OpType::kReduceScatter: {
        // Gloo in LibTorch 1.13 has no reduce_scatter: an all-to-all lands
        // part r of every rank on rank r, ordered by sender, and summing
        // those parts leaves this rank's slice of the reduction; each rank
        // moves (n-1)/n of the buffer, the bytes of a ring's reduce-scatter.
        at::Tensor gathered = at::empty_like(op.tensor);
        at::Tensor input = op.tensor;
        std::vector<int64_t> equal;
        w = pg_->alltoall_base(gathered, input, equal, equal);
        finish = [gathered, out = op.out, n = pg_->getSize()]() mutable {
          at::sum_out(out, gathered.view({n, out.numel()}), {0});
        };
        break;
      }
      case OpType::kSend:
        w = pg_->send(args, op.peer, op.tag);
        break;
      case OpType::kRecv:
        w = pg_->recv(args, op.peer, op.tag);
        break;
      case OpType::kBarrier: {
        // c10d's monitoredBarrier: rank 0 waits for every other rank, then
        // releases them, or names the ranks that did not arrive.
        c10d::BarrierOptions o;
        o.timeout = timeout_;
        Status s;
        try {
          pg_->monitoredBarrier(o, /*waitAllRanks=*/true);
        } catch (...) {
          s = TransportError(Describe(std::current_exception()));
        }
        return std::make_shared<FinishedWork>(std::move(s));
      }
    }
    return std::make_shared<GlooWork>(std::move(w), std::move(finish));
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

Status TransportError(const std::string& cause) {
  return LooksLikeTimeout(cause) ? DeadlineExceeded(cause) : Unavailable(cause);
}

Status CommError(const std::string& what, const std::string& cause) {
  const Status s = TransportError(cause);
  return Status(s.code(), what + " failed: " + cause);
}

StatusOr<std::shared_ptr<Backend>> ConnectGloo(const c10::intrusive_ptr<c10d::Store>& store, const GroupOptions& cfg) {
  try {
    return std::shared_ptr<Backend>(std::make_shared<GlooBackend>(NewGroup(store, cfg), cfg.timeout));
  } catch (...) {
    char timeout[32];
    std::snprintf(timeout, sizeof timeout, "%.1f s", cfg.timeout.count() / 1e3);
    return CommError("rank " + std::to_string(cfg.rank) + ": joining the process group (world " +
                         std::to_string(cfg.world_size) + ", timeout " + timeout + ")",
                     Describe(std::current_exception()));
  }
}

StatusOr<std::vector<double>> RawGlooAllReduceUs(const c10::intrusive_ptr<c10d::Store>& store,
                                                 const GroupOptions& cfg, const std::vector<int64_t>& sizes,
                                                 int warmup, int iters) {
  std::vector<double> us;
  try {
    auto pg = NewGroup(store, cfg);
    for (int64_t bytes : sizes) {
      std::vector<at::Tensor> t{at::zeros({std::max<int64_t>(1, bytes / 4)}, at::kFloat)};
      for (int i = 0; i < warmup; ++i) pg->allreduce(t)->wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) pg->allreduce(t)->wait();
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters);
    }
  } catch (...) {
    return CommError("rank " + std::to_string(cfg.rank) + ": raw Gloo all-reduce", Describe(std::current_exception()));
  }
  return us;
}

}  // namespace firedrill::agent::comm
