// The collective layer: the decorators against a backend of the test's own
// (one that finishes works when the test says so), then the real Gloo and
// shared-memory backends on two ranks as threads, where a late peer keeps a
// collective running past a bounded wait.
#include "agent/comm/backend.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "agent/comm/decorators.h"
#include "agent/comm/process_group.h"

namespace firedrill::agent::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A work the test finishes by hand.
class ManualWork : public Work {
 public:
  void Finish(Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    result_ = std::move(s);
    done_ = Clock::now();
    finished_ = true;
    cv_.notify_all();
  }
  bool Wait(std::chrono::milliseconds timeout, Status* result) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (timeout.count() < 0) {
      cv_.wait(lock, [&] { return finished_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return finished_; })) {
      return false;
    }
    *result = result_;
    return true;
  }
  Clock::time_point completed() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;
  Status result_;
  Clock::time_point done_{};
};

// Records what reached it, in order, and hands out manual works; refuses
// the ops the test marks.
class FakeBackend : public Backend {
 public:
  const char* name() const override { return "fake"; }
  bool Supports(const Op&) const override { return true; }
  StatusOr<WorkPtr> Post(const Op& op) override {
    std::lock_guard<std::mutex> lock(mu);
    if (op.info.seq == refuse_seq) return Unavailable("refused by the test");
    posted.push_back(op.info.seq);
    works.push_back(std::make_shared<ManualWork>());
    return WorkPtr(works.back());
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return posted.size();
  }
  std::mutex mu;
  std::vector<int64_t> posted;
  std::vector<std::shared_ptr<ManualWork>> works;
  int64_t refuse_seq = -1;
};

Op MakeOp(OpType type, int64_t seq, int64_t link_bytes = 1000) {
  Op op;
  op.type = type;
  op.info.op = type == OpType::kRecv ? "recv" : "allreduce";
  op.info.seq = seq;
  op.info.bytes = link_bytes;
  op.info.link_bytes = link_bytes;
  return op;
}

FrEntry Entry(const FlightRecorder& fr, int64_t seq) {
  for (const auto& e : fr.Snapshot())
    if (e.seq == seq) return e;
  return {};
}

TEST(Decorators, FlightRecorderSeesStartFinishAndFailureAndForwardsTheRest) {
  auto fake = std::make_shared<FakeBackend>();
  auto fr = std::make_shared<FlightRecorder>();
  auto b = WithFlightRecorder(fake, fr);
  EXPECT_STREQ(b->name(), "fake");

  auto w1 = b->Post(MakeOp(OpType::kAllReduce, 1));
  auto w2 = b->Post(MakeOp(OpType::kAllReduce, 2));
  ASSERT_TRUE(w1.ok() && w2.ok());
  EXPECT_EQ(Entry(*fr, 1).state, "started");
  EXPECT_EQ(Entry(*fr, 1).transport, "fake");
  Status s;
  EXPECT_FALSE((*w1)->Wait(0ms, &s)) << "still running";
  EXPECT_EQ(Entry(*fr, 1).state, "started") << "a bounded wait that gave up is not an end";

  fake->works[0]->Finish(Status::Ok());
  fake->works[1]->Finish(Unavailable("peer 3 closed the connection"));
  ASSERT_TRUE((*w1)->Wait(kNoWaitLimit, &s));
  EXPECT_TRUE(s.ok());
  ASSERT_TRUE((*w2)->Wait(1s, &s));
  EXPECT_EQ(s.message(), "peer 3 closed the connection");
  EXPECT_EQ(Entry(*fr, 1).state, "completed");
  EXPECT_EQ(Entry(*fr, 2).state, "failed");
  EXPECT_EQ(Entry(*fr, 2).error, "peer 3 closed the connection");

  fake->refuse_seq = 3;
  auto w3 = b->Post(MakeOp(OpType::kAllReduce, 3));
  EXPECT_FALSE(w3.ok());
  EXPECT_EQ(Entry(*fr, 3).state, "failed") << "a collective that could not start is not left 'started'";
}

TEST(Decorators, DegradedLinkDefersLaunchesInOrderAndAHealthyOneGoesStraightThrough) {
  auto fake = std::make_shared<FakeBackend>();
  faults::LinkModel link;
  auto queue = std::make_shared<LinkQueue>();
  auto b = WithLinkFaults(fake, &link, queue);

  // Healthy: handed over inside Post, on the caller's thread.
  auto w = b->Post(MakeOp(OpType::kAllReduce, 1));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(fake->count(), 1u);

  // 400 ms per collective (the bandwidth term is negligible).
  link.Degrade(7, 400e3, 1e6);
  const auto t0 = Clock::now();
  std::vector<WorkPtr> works;
  for (int64_t seq = 2; seq <= 4; ++seq) works.push_back(*b->Post(MakeOp(OpType::kAllReduce, seq)));
  EXPECT_EQ(fake->count(), 1u) << "the caller (backward) must not wait out the link";
  link.Restore(7);
  // Queued behind the deferred ones although the link is healthy again:
  // every rank must hand its collectives over in the same order.
  works.push_back(*b->Post(MakeOp(OpType::kAllReduce, 5)));
  EXPECT_EQ(fake->count(), 1u);

  queue->Drain();
  EXPECT_GE(Clock::now() - t0, 1100ms) << "three deferred launches of 400 ms each, one after another";
  EXPECT_EQ(fake->posted, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  for (auto& m : fake->works) m->Finish(Status::Ok());
  Status s;
  for (auto& x : works) {
    ASSERT_TRUE(x->Wait(1s, &s));
    EXPECT_TRUE(s.ok());
  }
  EXPECT_EQ(works[0]->completed(), fake->works[1]->completed()) << "the inner work's own stamp";
}

TEST(Decorators, DeferredLaunchThatFailsReportsItAndABoundedWaitCanGiveUpFirst) {
  auto fake = std::make_shared<FakeBackend>();
  faults::LinkModel link;
  auto b = WithLinkFaults(fake, &link, std::make_shared<LinkQueue>());
  link.Degrade(1, 300e3, 1e6);
  fake->refuse_seq = 1;
  auto w = b->Post(MakeOp(OpType::kAllReduce, 1));
  ASSERT_TRUE(w.ok()) << "deferred: the refusal comes later";
  Status s;
  EXPECT_FALSE((*w)->Wait(10ms, &s)) << "not handed over yet";
  ASSERT_TRUE((*w)->Wait(kNoWaitLimit, &s));
  EXPECT_EQ(s.message(), "refused by the test");
}

TEST(Decorators, ReceiveIsPostedAtOnceAndUsableOnlyAfterItCrossedTheLink) {
  auto fake = std::make_shared<FakeBackend>();
  faults::LinkModel link;
  auto b = WithLinkFaults(fake, &link, std::make_shared<LinkQueue>());
  link.Degrade(1, 150e3, 1e6);
  auto w = b->Post(MakeOp(OpType::kRecv, 1));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(fake->count(), 1u) << "a receive must be posted for its data to arrive";
  fake->works[0]->Finish(Status::Ok());
  Status s;
  ASSERT_TRUE((*w)->Wait(kNoWaitLimit, &s));
  EXPECT_TRUE(s.ok());
  EXPECT_GE((*w)->completed() - fake->works[0]->completed(), 150ms);
}

// Two ranks as threads on one store: rank 1 starts its part only when told.
struct Pair {
  std::unique_ptr<ProcessGroup> g[2];
};

Pair Connect(const std::shared_ptr<FlightRecorder>& fr) {
  Pair p;
  GroupOptions o;
  o.world_size = 2;
  o.timeout = 20s;
  o.recorder = fr;
  auto g0 = ProcessGroup::HostStore(o, "127.0.0.1");
  EXPECT_TRUE(g0.ok()) << g0.status().ToString();
  p.g[0] = std::move(g0).value();
  o.rank = 1;
  o.recorder = nullptr;
  auto g1 = ProcessGroup::JoinStore(o, "127.0.0.1", p.g[0]->store_port());
  EXPECT_TRUE(g1.ok()) << g1.status().ToString();
  p.g[1] = std::move(g1).value();
  auto c1 = std::async(std::launch::async, [&] { return p.g[1]->Connect(); });
  EXPECT_TRUE(p.g[0]->Connect().ok());
  EXPECT_TRUE(c1.get().ok());
  return p;
}

// Rank 0 posts first; a bounded wait gives up while rank 1 has not joined
// the collective; once it does, both get the sum.
void LatePeer(Pair& p, at::Tensor t0, at::Tensor t1, const FlightRecorder& fr, const char* transport) {
  t0.fill_(1);
  t1.fill_(2);
  auto w0 = p.g[0]->StartAllReduceSum(t0, 5);
  ASSERT_TRUE(w0.ok()) << w0.status().ToString();
  Status s;
  EXPECT_FALSE(p.g[0]->WaitFor(*w0, 100ms, &s)) << transport << ": the peer has not started its part";
  EXPECT_EQ(fr.Snapshot().back().state, "started");
  EXPECT_EQ(fr.Snapshot().back().transport, transport);
  auto w1 = p.g[1]->StartAllReduceSum(t1, 5);
  ASSERT_TRUE(w1.ok());
  ASSERT_TRUE(p.g[0]->WaitFor(*w0, 20s, &s)) << transport;
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(p.g[1]->Wait(*w1).ok());
  EXPECT_EQ(t0[0].item<float>(), 3.0f) << transport;
  EXPECT_EQ(t1[7].item<float>(), 3.0f) << transport;
  EXPECT_EQ(fr.Snapshot().back().state, "completed");
  EXPECT_GE(w0->completed(), w0->launched());
}

TEST(Backends, BoundedWaitGivesUpWhileAPeerIsLateOnGlooAndSharedMemory) {
  auto fr = std::make_shared<FlightRecorder>();
  Pair p = Connect(fr);
  LatePeer(p, at::zeros({1024}), at::zeros({1024}), *fr, "gloo");

  auto on1 = std::async(std::launch::async, [&] { return p.g[1]->EnableSharedMemory(1 << 16); });
  auto on0 = p.g[0]->EnableSharedMemory(1 << 16);
  ASSERT_TRUE(on0.ok() && *on0) << on0.status().ToString();
  ASSERT_TRUE(on1.get().ok());
  LatePeer(p, *p.g[0]->AllocateShared(1024), *p.g[1]->AllocateShared(1024), *fr, "shm");
}

TEST(Backends, ErrorsNameRankStepOpSequenceAndPeer) {
  auto fr = std::make_shared<FlightRecorder>();
  Pair p = Connect(fr);
  at::Tensor small = at::zeros({4}), out = at::zeros({5});
  Status s = p.g[0]->AllGather(small, out, 9);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "rank 0 step 9: allgather #1 (20 B): output must hold world x input elements, both "
                         "contiguous 1-D");
  // Rank 1 leaves: rank 0's receive from it fails with Gloo's own words.
  p.g[1].reset();
  s = p.g[0]->Recv(small, 1, 0, 11);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("rank 0 step 11: recv #2 (16 B) from rank 1 failed: ", 0), 0u) << s.message();
}

}  // namespace
}  // namespace firedrill::agent::comm
