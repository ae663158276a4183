#include "agent/comm/decorators.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace firedrill::agent::comm {

namespace {

using Clock = std::chrono::steady_clock;

// What is left of `timeout` (negative: no limit) at `deadline`.
std::chrono::milliseconds Left(std::chrono::milliseconds timeout, Clock::time_point deadline) {
  if (timeout.count() < 0) return timeout;
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

// ---- flight recorder ----

class RecordedWork : public Work {
 public:
  RecordedWork(WorkPtr inner, std::shared_ptr<FlightRecorder> recorder, int64_t seq)
      : inner_(std::move(inner)), recorder_(std::move(recorder)), seq_(seq) {}
  bool Wait(std::chrono::milliseconds timeout, Status* result) override {
    if (!inner_->Wait(timeout, result)) return false;
    std::call_once(recorded_, [&] { recorder_->Finished(seq_, result->ok() ? "" : result->message()); });
    return true;
  }
  Clock::time_point completed() const override { return inner_->completed(); }

 private:
  WorkPtr inner_;
  std::shared_ptr<FlightRecorder> recorder_;
  int64_t seq_;
  std::once_flag recorded_;
};

class RecordingBackend : public Backend {
 public:
  RecordingBackend(std::shared_ptr<Backend> inner, std::shared_ptr<FlightRecorder> recorder)
      : inner_(std::move(inner)), recorder_(std::move(recorder)) {}
  const char* name() const override { return inner_->name(); }
  bool Supports(const Op& op) const override { return inner_->Supports(op); }
  StatusOr<WorkPtr> Post(const Op& op) override {
    recorder_->Started(op.info.seq, op.info.op, op.info.bytes, op.info.at.step, inner_->name());
    auto w = inner_->Post(op);
    if (!w.ok()) {
      recorder_->Finished(op.info.seq, w.status().message());
      return w.status();
    }
    return WorkPtr(std::make_shared<RecordedWork>(std::move(w).value(), recorder_, op.info.seq));
  }

 private:
  std::shared_ptr<Backend> inner_;
  std::shared_ptr<FlightRecorder> recorder_;
};

// ---- link faults ----

// A collective whose launch waits on the link queue: valid at once, handed
// to the inner backend later.
class DeferredWork : public Work {
 public:
  void Hand(StatusOr<WorkPtr> launched) {
    std::lock_guard<std::mutex> lock(mu_);
    if (launched.ok()) {
      inner_ = std::move(launched).value();
    } else {
      error_ = launched.status();
    }
    handed_ = true;
    cv_.notify_all();
  }
  bool Wait(std::chrono::milliseconds timeout, Status* result) override {
    const auto deadline = Clock::now() + std::max(timeout, std::chrono::milliseconds(0));
    WorkPtr inner;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (timeout.count() < 0) {
        cv_.wait(lock, [&] { return handed_; });
      } else if (!cv_.wait_until(lock, deadline, [&] { return handed_; })) {
        return false;
      }
      if (!inner_) {
        *result = error_;
        return true;
      }
      inner = inner_;
    }
    return inner->Wait(Left(timeout, deadline), result);
  }
  Clock::time_point completed() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_ ? inner_->completed() : Clock::time_point{};
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool handed_ = false;
  WorkPtr inner_;
  Status error_;
};

// A receive: usable once its data also crossed this rank's degraded link.
// The crossing (the link's delay) is waited out in full, whatever is left
// of a bounded wait's timeout: it is short, and a receive half-crossed is
// not a state to report.
class DelayedRecvWork : public Work {
 public:
  DelayedRecvWork(WorkPtr inner, const faults::LinkModel* link, std::shared_ptr<LinkQueue> queue,
                  int64_t link_bytes)
      : inner_(std::move(inner)), link_(link), queue_(std::move(queue)), link_bytes_(link_bytes) {}
  bool Wait(std::chrono::milliseconds timeout, Status* result) override {
    if (!inner_->Wait(timeout, result)) return false;
    std::call_once(crossed_, [&] {
      if (result->ok()) {
        queue_->Drain();
        const auto delay = link_->DelayFor(link_bytes_);
        if (delay.count() > 0) std::this_thread::sleep_for(delay);
      }
      done_ns_ = SteadyNowNs();
    });
    return true;
  }
  Clock::time_point completed() const override {
    const int64_t ns = done_ns_.load();
    return ns ? Clock::time_point(std::chrono::nanoseconds(ns)) : inner_->completed();
  }

 private:
  WorkPtr inner_;
  const faults::LinkModel* link_;
  std::shared_ptr<LinkQueue> queue_;
  int64_t link_bytes_;
  std::once_flag crossed_;
  std::atomic<int64_t> done_ns_{0};
};

class LinkFaultBackend : public Backend {
 public:
  LinkFaultBackend(std::shared_ptr<Backend> inner, const faults::LinkModel* link, std::shared_ptr<LinkQueue> queue)
      : inner_(std::move(inner)), link_(link), queue_(std::move(queue)) {}
  const char* name() const override { return inner_->name(); }
  bool Supports(const Op& op) const override { return inner_->Supports(op); }
  StatusOr<WorkPtr> Post(const Op& op) override {
    if (op.type == OpType::kRecv) {
      auto w = inner_->Post(op);
      if (!w.ok()) return w.status();
      return WorkPtr(std::make_shared<DelayedRecvWork>(std::move(w).value(), link_, queue_, op.info.link_bytes));
    }
    const auto delay = link_->DelayFor(op.info.link_bytes);
    if (delay.count() == 0 && queue_->Idle()) return inner_->Post(op);
    auto deferred = std::make_shared<DeferredWork>();
    // The queued launch holds the inner backend: it may run after this
    // decorator is gone.
    queue_->Post([inner = inner_, op, delay, deferred] {
      if (delay.count() > 0) std::this_thread::sleep_for(delay);
      deferred->Hand(inner->Post(op));
    });
    return WorkPtr(std::move(deferred));
  }

 private:
  std::shared_ptr<Backend> inner_;
  const faults::LinkModel* link_;
  std::shared_ptr<LinkQueue> queue_;
};

}  // namespace

std::shared_ptr<Backend> WithFlightRecorder(std::shared_ptr<Backend> inner, std::shared_ptr<FlightRecorder> recorder) {
  return std::make_shared<RecordingBackend>(std::move(inner), std::move(recorder));
}

std::shared_ptr<Backend> WithLinkFaults(std::shared_ptr<Backend> inner, const faults::LinkModel* link,
                                        std::shared_ptr<LinkQueue> queue) {
  return std::make_shared<LinkFaultBackend>(std::move(inner), link, std::move(queue));
}

// ---- the link queue ----

struct LinkQueue::Impl {
  void Loop() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return quit || !queue.empty(); });
      if (queue.empty()) return;  // quit, nothing left
      auto fn = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      fn();
      lock.lock();
      if (--pending == 0) idle.notify_all();
    }
  }
  std::mutex mu;
  std::condition_variable cv, idle;
  std::deque<std::function<void()>> queue;
  int pending = 0;
  bool quit = false;
  std::thread thread;
};

LinkQueue::LinkQueue() : impl_(std::make_unique<Impl>()) {}

LinkQueue::~LinkQueue() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->quit = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

bool LinkQueue::Idle() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->pending == 0;
}

void LinkQueue::Post(std::function<void()> fn) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  if (!m.thread.joinable()) m.thread = std::thread([&m] { m.Loop(); });
  m.queue.push_back(std::move(fn));
  ++m.pending;
  m.cv.notify_all();
}

void LinkQueue::Drain() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mu);
  m.idle.wait(lock, [&] { return m.pending == 0; });
}

}  // namespace firedrill::agent::comm
