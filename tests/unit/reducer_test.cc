// Gradient bucketing: the assignment (a pure function, checked against what
// PyTorch 1.13's own dist._compute_bucket_assignment_by_size returns for
// DDP's rebuilt buckets: parameters in reverse order, limits [first, cap]),
// and the reducer's hooks on a one-rank Gloo group.
#include "agent/reducer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "agent/comm/process_group.h"
#include "agent/comm/shm_transport.h"

namespace firedrill::agent {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

struct AssignCase {
  std::vector<int64_t> bytes;
  int64_t first, cap;
  Buckets want;  // from PyTorch (see the file comment)
};

TEST(AssignBucketsTest, MatchesPyTorchDdp) {
  const std::vector<AssignCase> cases = {
      {{400, 800, 400, 200}, 400, 400, {{3, 2}, {1}, {0}}},
      {{4096, 40, 4, 4194304, 4096, 4194304, 4096, 1048576, 4096, 40960, 40},
       1 << 20,
       25 << 20,
       {{10, 9, 8, 7}, {6, 5, 4, 3, 2, 1, 0}}},
      {{100, 200, 300, 400, 500, 600}, 500, 1000, {{5}, {4, 3, 2}, {1, 0}}},
      {std::vector<int64_t>(10, 16), 32, 64, {{9, 8}, {7, 6, 5, 4}, {3, 2, 1, 0}}},
      {{4194304, 4, 4194304, 4}, 1 << 20, 1 << 20, {{3, 2}, {1, 0}}},
      // The benchmark MLP 256 -> 1024 x3 -> 10 with DDP's defaults.
      {{1048576, 4096, 4194304, 4096, 4194304, 4096, 40960, 40},
       1 << 20,
       25 << 20,
       {{7, 6, 5, 4}, {3, 2, 1, 0}}},
  };
  for (const auto& c : cases) EXPECT_EQ(AssignBuckets(c.bytes, c.first, c.cap), c.want);
}

// Properties for many shapes: every parameter once, buckets in reverse
// order and contiguous, only the last bucket under its cap, the first
// bucket bounded by the small cap.
TEST(AssignBucketsTest, ReverseOrderAndCapsHold) {
  for (int n : {1, 2, 7, 30}) {
    for (int64_t first : {4, 100, 1000}) {
      for (int64_t cap : {4, 250, 5000}) {
        std::vector<int64_t> bytes(n);
        for (int i = 0; i < n; ++i) bytes[i] = 4 * (1 + (i * 37) % 50);
        const Buckets b = AssignBuckets(bytes, first, cap);
        std::vector<size_t> flat;
        for (const auto& bucket : b) flat.insert(flat.end(), bucket.begin(), bucket.end());
        std::vector<size_t> want(n);
        std::iota(want.rbegin(), want.rend(), 0);
        ASSERT_EQ(flat, want) << "n=" << n << " first=" << first << " cap=" << cap;
        for (size_t k = 0; k < b.size(); ++k) {
          const int64_t limit = k == 0 ? first : cap;
          int64_t size = 0;
          for (size_t i : b[k]) size += bytes[i];
          // Closed as soon as the cap is reached: without its last parameter
          // a bucket is below its cap; only the final bucket may be short.
          EXPECT_LT(size - bytes[b[k].back()], limit);
          if (k + 1 < b.size()) {
            EXPECT_GE(size, limit);
          }
        }
      }
    }
  }
  // Caps of one byte: one parameter per bucket. Infinite caps: one bucket.
  EXPECT_EQ(AssignBuckets({8, 8, 8}, 1, 1), (Buckets{{2}, {1}, {0}}));
  EXPECT_EQ(AssignBuckets({8, 8, 8}, 1 << 30, 1 << 30), (Buckets{{2, 1, 0}}));
}

TEST(AssignBucketsTest, MegabytesAreMebibytesWithDdpDefaults) {
  EXPECT_EQ(BucketBytes(0, kDefaultBucketMb), 25 * 1024 * 1024);
  EXPECT_EQ(BucketBytes(0, kDefaultFirstBucketMb), 1024 * 1024);
  EXPECT_EQ(BucketBytes(0.5, kDefaultBucketMb), 512 * 1024);
  EXPECT_EQ(BucketBytes(1e-9, kDefaultBucketMb), 1);  // never 0: a bucket holds at least one parameter
}

// A one-rank Gloo group: the reducer's real collective path, no peers.
std::unique_ptr<comm::ProcessGroup> SoloGroup() {
  comm::GroupOptions go;
  go.timeout = std::chrono::milliseconds(5000);
  auto pg = comm::ProcessGroup::HostStore(go, "127.0.0.1");
  EXPECT_TRUE(pg.ok()) << pg.status().ToString();
  auto p = std::move(pg).value();
  auto st = p->Connect();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return p;
}

TEST(ReducerTest, HooksStartBucketsDuringBackwardInBucketOrder) {
  torch::manual_seed(1);
  // Parameter 0 is used last in forward, so autograd accumulates its
  // gradient first: with one parameter per bucket, bucket 1 (parameter 0)
  // is ready before bucket 0 (parameter 1) and must wait for it.
  auto a = torch::randn({3}, torch::requires_grad());
  auto b = torch::randn({5}, torch::requires_grad());
  std::vector<at::Tensor> params{a, b};
  ReducerOptions ro;
  ro.first_bucket_bytes = ro.bucket_bytes = 1;
  auto reducer = Reducer::Create(params, ro);
  ASSERT_TRUE(reducer.ok()) << reducer.status().ToString();
  auto& r = **reducer;
  EXPECT_EQ(r.assignment(), (Buckets{{1}, {0}}));

  std::vector<int> ready_order;
  std::vector<std::shared_ptr<torch::autograd::Node>> keep;
  struct Record : torch::autograd::FunctionPostHook {
    Record(std::vector<int>* o, int i) : order(o), index(i) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& out,
                                              const torch::autograd::variable_list&) override {
      order->push_back(index);
      return out;
    }
    std::vector<int>* order;
    int index;
  };
  for (int i = 0; i < 2; ++i) {
    keep.push_back(torch::autograd::impl::grad_accumulator(params[i]));
    keep.back()->add_post_hook(std::make_unique<Record>(&ready_order, i));
  }

  auto pg = SoloGroup();
  const auto x = torch::randn({5});
  r.Prepare(pg.get(), 0, /*sync=*/true, /*stop=*/false);
  ((x * b).sum() * a).sum().backward();
  ASSERT_EQ(ready_order, (std::vector<int>{0, 1}));
  EXPECT_EQ(pg->seq(), 2) << "both buckets should have started from hooks during backward";
  auto stats = r.Finish();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->started_in_backward, 2);
  EXPECT_EQ(stats->buckets, 2);
  EXPECT_EQ(stats->bucket_seq, (std::vector<int64_t>{1, 2}));  // bucket 0 first although ready second
  EXPECT_EQ(stats->bytes, (5 + 3 + 3) * 4);                    // + the votes and the shared stretch
  EXPECT_FALSE(stats->stop);
  // The views hold the gradients: d/da = sum(x*b), d/db = x * sum(a).
  EXPECT_TRUE(torch::allclose(a.grad(), (x * b).sum().expand({3})));
  EXPECT_TRUE(torch::allclose(b.grad(), x * a.sum()));
}

TEST(ReducerTest, NoSyncAccumulatesWithoutCollectivesThenReducesOnce) {
  torch::manual_seed(2);
  torch::nn::Sequential net(torch::nn::Linear(6, 8), torch::nn::ReLU(), torch::nn::Linear(8, 3));
  auto params = net->parameters();
  torch::nn::Sequential ref(torch::nn::Linear(6, 8), torch::nn::ReLU(), torch::nn::Linear(8, 3));
  {
    torch::NoGradGuard ng;
    auto rp = ref->parameters();
    for (size_t i = 0; i < rp.size(); ++i) rp[i].copy_(params[i]);
  }
  ReducerOptions ro;
  ro.first_bucket_bytes = 100;
  ro.bucket_bytes = 200;
  auto reducer = Reducer::Create(params, ro);
  ASSERT_TRUE(reducer.ok()) << reducer.status().ToString();
  auto& r = **reducer;
  ASSERT_GT(r.assignment().size(), 1u);
  for (size_t i = 0; i < params.size(); ++i) {
    bool in_bucket = false;
    for (const auto& g : r.bucket_grads()) in_bucket = in_bucket || params[i].grad().is_alias_of(g);
    EXPECT_TRUE(in_bucket) << "parameter " << i << "'s grad is not a view into a bucket";
  }

  auto pg = SoloGroup();
  const auto x1 = torch::randn({4, 6}), x2 = torch::randn({4, 6});
  r.Prepare(pg.get(), 0, /*sync=*/false, /*stop=*/true);
  (net->forward(x1).pow(2).mean() / 2).backward();
  EXPECT_EQ(pg->seq(), 0) << "no_sync must not start collectives";
  r.Prepare(pg.get(), 0, /*sync=*/true, /*stop=*/true);
  (net->forward(x2).pow(2).mean() / 2).backward();
  EXPECT_EQ(pg->seq(), static_cast<int64_t>(r.assignment().size()));
  auto stats = r.Finish();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_TRUE(stats->stop);
  EXPECT_GE(stats->total_ms, 0);
  EXPECT_GE(stats->exposed_ms, 0);

  (ref->forward(x1).pow(2).mean() / 2).backward();
  (ref->forward(x2).pow(2).mean() / 2).backward();
  auto rp = ref->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::allclose(params[i].grad(), rp[i].grad(), 1e-6, 1e-7)) << "parameter " << i;
  }
  r.ZeroGrad();
  for (const auto& g : r.bucket_grads()) EXPECT_EQ(g.abs().sum().item<float>(), 0.0f);
}

TEST(ReducerTest, FlatModeStartsNothingUntilFinish) {
  torch::nn::Sequential net(torch::nn::Linear(4, 4), torch::nn::ReLU(), torch::nn::Linear(4, 2));
  ReducerOptions ro;
  ro.flat = true;
  ro.first_bucket_bytes = ro.bucket_bytes = 1;  // ignored when flat
  auto reducer = Reducer::Create(net->parameters(), ro);
  ASSERT_TRUE(reducer.ok()) << reducer.status().ToString();
  EXPECT_EQ((*reducer)->assignment().size(), 1u);
  auto pg = SoloGroup();
  (*reducer)->Prepare(pg.get(), 0, true, false);
  net->forward(torch::randn({2, 4})).sum().backward();
  EXPECT_EQ(pg->seq(), 0);
  auto stats = (*reducer)->Finish();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->started_in_backward, 0);
  EXPECT_EQ(stats->buckets, 1);
  EXPECT_EQ(pg->seq(), 1);
}

// bucket_grads() is what the loss scaler unscales and checks for inf/NaN
// and what a skipped step zeroes: every gradient element, in every bucket,
// and only the last bucket's vote element left out. Found by a drill: on
// Gloo (no shared-memory rebind) each bucket but the last lost its last
// element, so an inf there went unchecked into the weights.
TEST(ReducerTest, BucketGradsCoverEveryGradientElementOfEveryBucket) {
  auto a = torch::randn({3}, torch::requires_grad());
  auto b = torch::randn({5}, torch::requires_grad());
  auto c = torch::randn({2}, torch::requires_grad());
  ReducerOptions ro;
  ro.first_bucket_bytes = ro.bucket_bytes = 1;  // a bucket per parameter
  auto reducer = Reducer::Create({a, b, c}, ro);
  ASSERT_TRUE(reducer.ok()) << reducer.status().ToString();
  const auto& grads = (*reducer)->bucket_grads();
  ASSERT_EQ(grads.size(), 3u);
  int64_t total = 0;
  for (const auto& g : grads) total += g.numel();
  EXPECT_EQ(total, 3 + 5 + 2);
  // In launch order: c, b, a (reverse parameter order).
  EXPECT_EQ(grads[0].numel(), 2);
  EXPECT_EQ(grads[1].numel(), 5);
  EXPECT_EQ(grads[2].numel(), 3);
  // Every parameter's .grad is a view of its bucket's gradients.
  for (const auto& g : grads) g.fill_(7);
  for (const auto& p : {a, b, c}) EXPECT_TRUE(torch::all(p.grad() == 7).item<bool>());
  (*reducer)->ZeroGrad();
  for (const auto& p : {a, b, c}) EXPECT_TRUE(torch::all(p.grad() == 0).item<bool>());
}

TEST(ReducerTest, RejectsWhatItCannotBucket) {
  ReducerOptions ro;
  EXPECT_FALSE(Reducer::Create({}, ro).ok());
  EXPECT_FALSE(Reducer::Create({torch::zeros({3})}, ro).ok());  // does not require grad
  EXPECT_FALSE(
      Reducer::Create({torch::zeros({3}, torch::dtype(torch::kDouble).requires_grad(true))}, ro).ok());
}

// The shared-memory transport on its own, ranks as threads, with an
// in-memory store.
class MemStore {
 public:
  comm::StoreOps Ops() {
    comm::StoreOps ops;
    ops.set = [this](const std::string& k, const std::string& v) {
      std::lock_guard<std::mutex> l(mu_);
      kv_[k] = v;
      cv_.notify_all();
      return Status::Ok();
    };
    ops.get = [this](const std::string& k) -> StatusOr<std::string> {
      std::unique_lock<std::mutex> l(mu_);
      if (!cv_.wait_for(l, std::chrono::seconds(5), [&] { return kv_.count(k) > 0; }))
        return DeadlineExceeded(k);
      return kv_[k];
    };
    return ops;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

template <typename F>
void OnRanks(int world, F&& fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < world; ++r) t.emplace_back([&, r] { fn(r); });
  for (auto& x : t) x.join();
}

TEST(ShmAllReduceTest, SumsScaledContributionsInRankOrderOnEveryRank) {
  constexpr int kWorld = 3;
  constexpr int64_t kN = 1001;  // not a multiple of the slice alignment
  MemStore store;
  std::vector<std::vector<float>> out(kWorld);
  OnRanks(kWorld, [&](int r) {
    auto shm = comm::ShmAllReduce::Create(r, kWorld, 2 * kN * 4, std::chrono::milliseconds(5000), true, "t",
                                          store.Ops());
    ASSERT_TRUE(shm.ok()) << shm.status().ToString();
    ASSERT_NE(*shm, nullptr);
    std::shared_ptr<void> keep;
    auto a = (*shm)->Allocate(kN, &keep);
    auto b = (*shm)->Allocate(kN, &keep);
    ASSERT_TRUE(a.ok() && b.ok());
    for (int64_t i = 0; i < kN; ++i) (*a)[i] = static_cast<float>(r + 1) * 0.1f + static_cast<float>(i);
    for (int64_t i = 0; i < kN; ++i) (*b)[i] = 1.0f;
    auto ta = (*shm)->Start(*a, kN, 1.0f / kWorld);
    auto tb = (*shm)->Start(*b, kN, 1.0f);
    ASSERT_TRUE(ta.ok() && tb.ok());
    ASSERT_TRUE((*shm)->Wait(*tb, nullptr).ok());
    int64_t ns = 0;
    ASSERT_TRUE((*shm)->Wait(*ta, &ns).ok());
    EXPECT_GT(ns, 0);
    out[r].assign(*a, *a + kN);
    for (int64_t i = 0; i < kN; ++i) ASSERT_EQ((*b)[i], 3.0f);
    EXPECT_FALSE((*shm)->Allocate(kN * 10, &keep).ok());
  });
  const float scale = 1.0f / kWorld;
  for (int64_t i = 0; i < kN; ++i) {
    float want = 0;
    for (int r = 0; r < kWorld; ++r)
      want += (static_cast<float>(r + 1) * 0.1f + static_cast<float>(i)) * scale;
    ASSERT_EQ(out[0][i], want) << i;  // the same bits as scale-then-sum in rank order
    ASSERT_EQ(out[1][i], want) << i;
    ASSERT_EQ(out[2][i], want) << i;
  }
}

TEST(ShmAllReduceTest, DesyncLeaverAndTimeoutAreErrors) {
  MemStore store;
  // Different sizes for the same collective: a desync, reported on both.
  std::vector<Status> st(2);
  OnRanks(2, [&](int r) {
    auto shm =
        comm::ShmAllReduce::Create(r, 2, 4096, std::chrono::milliseconds(2000), true, "desync", store.Ops());
    ASSERT_TRUE(shm.ok() && *shm);
    std::shared_ptr<void> keep;
    auto p = (*shm)->Allocate(64, &keep);
    auto t = (*shm)->Start(*p, r == 0 ? 64 : 32, 1.0f);
    ASSERT_TRUE(t.ok());
    st[r] = (*shm)->Wait(*t, nullptr);
  });
  for (const auto& s : st) {
    EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
    EXPECT_NE(s.message().find("desync"), std::string::npos) << s.ToString();
  }
  // Rank 1 never starts the collective: rank 0 times out naming it.
  const auto t0 = std::chrono::steady_clock::now();
  OnRanks(2, [&](int r) {
    auto shm =
        comm::ShmAllReduce::Create(r, 2, 4096, std::chrono::milliseconds(300), true, "late", store.Ops());
    ASSERT_TRUE(shm.ok() && *shm);
    std::shared_ptr<void> keep;
    auto p = (*shm)->Allocate(64, &keep);
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      return;  // leaves after rank 0 already timed out
    }
    auto t = (*shm)->Start(*p, 64, 1.0f);
    st[0] = (*shm)->Wait(*t, nullptr);
  });
  EXPECT_EQ(st[0].code(), StatusCode::kDeadlineExceeded) << st[0].ToString();
  EXPECT_NE(st[0].message().find("rank(s) 1"), std::string::npos) << st[0].ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  // Rank 1 leaves (its object is destroyed) without joining: rank 0 hears
  // of it at once instead of waiting for the timeout.
  OnRanks(2, [&](int r) {
    auto shm =
        comm::ShmAllReduce::Create(r, 2, 4096, std::chrono::milliseconds(20000), true, "leave", store.Ops());
    ASSERT_TRUE(shm.ok() && *shm);
    if (r == 1) return;
    std::shared_ptr<void> keep;
    auto p = (*shm)->Allocate(64, &keep);
    auto t = (*shm)->Start(*p, 64, 1.0f);
    st[0] = (*shm)->Wait(*t, nullptr);
  });
  EXPECT_EQ(st[0].code(), StatusCode::kUnavailable) << st[0].ToString();
  EXPECT_NE(st[0].message().find("rank 1 left"), std::string::npos) << st[0].ToString();
}

TEST(ShmAllReduceTest, AnyRankOptingOutKeepsAllOnGloo) {
  MemStore store;
  OnRanks(2, [&](int r) {
    auto shm = comm::ShmAllReduce::Create(r, 2, 4096, std::chrono::milliseconds(2000), /*allow=*/r == 0,
                                          "optout", store.Ops());
    ASSERT_TRUE(shm.ok()) << shm.status().ToString();
    EXPECT_EQ(*shm, nullptr);
  });
}

// Each rank shares its compute's stretch with its gradients; a slowed rank
// shares none (0). Every rank reads the mean over the ranks that shared one
// (what a slowed rank's governor steers by), next to unchanged gradients
// and votes, on three ranks of a real Gloo group; none when none shared.
TEST(ReducerTest, EveryRankReadsTheMeanStretchOfTheRanksThatSharedOne) {
  constexpr int kWorld = 3;
  const double shared[kWorld] = {1.5, 0.0, 2.1};  // rank 1 is slowed
  comm::GroupOptions o;
  o.world_size = kWorld;
  o.timeout = std::chrono::milliseconds(20000);
  std::unique_ptr<comm::ProcessGroup> g[kWorld];
  auto g0 = comm::ProcessGroup::HostStore(o, "127.0.0.1");
  ASSERT_TRUE(g0.ok()) << g0.status().ToString();
  g[0] = std::move(g0).value();
  for (int r = 1; r < kWorld; ++r) {
    o.rank = r;
    auto gr = comm::ProcessGroup::JoinStore(o, "127.0.0.1", g[0]->store_port());
    ASSERT_TRUE(gr.ok()) << gr.status().ToString();
    g[r] = std::move(gr).value();
  }
  ReduceStats got[kWorld];
  float grad0[kWorld] = {};
  OnRanks(kWorld, [&](int r) {
    ASSERT_TRUE(g[r]->Connect().ok());
    auto w = torch::full({4}, 1.0, torch::requires_grad());
    ReducerOptions ro;
    ro.flat = true;
    ro.world_size = kWorld;
    ro.rank = r;
    auto reducer = Reducer::Create({w}, ro);
    ASSERT_TRUE(reducer.ok()) << reducer.status().ToString();
    (*reducer)->ShareStretch(shared[r]);
    (*reducer)->Prepare(g[r].get(), 0, /*sync=*/true, /*stop=*/r == 2);
    (w * static_cast<float>(r + 1)).sum().backward();  // gradient r + 1 on rank r
    auto stats = (*reducer)->Finish();
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    got[r] = *stats;
    grad0[r] = w.grad()[0].item<float>();
    // Then every rank slowed: none shared, none read.
    (*reducer)->ZeroGrad();
    (*reducer)->ShareStretch(0);
    (*reducer)->Prepare(g[r].get(), 1, /*sync=*/true, /*stop=*/false);
    (w * 1.0f).sum().backward();
    auto none = (*reducer)->Finish();
    ASSERT_TRUE(none.ok()) << none.status().ToString();
    EXPECT_EQ(none->peer_stretch, 0.0) << "rank " << r;
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_NEAR(got[r].peer_stretch, (1.5 + 2.1) / 2, 1e-5) << "rank " << r;
    EXPECT_TRUE(got[r].stop) << "rank " << r;
    EXPECT_FALSE(got[r].probe) << "rank " << r;
    EXPECT_FLOAT_EQ(grad0[r], 2.0f) << "rank " << r << ": the mean of 1, 2 and 3";
  }
}

TEST(VotesTest, EveryMixOfStopAndProbeVotesDecodesAfterTheScaledFp32Sum) {
  // As the all-reduce computes it: each rank's value times 1/world in fp32,
  // summed in fp32 in some order (1/3, 1/5, 1/7 are inexact).
  for (int world : {1, 2, 3, 4, 5, 7, 8, 16}) {
    for (int stops = 0; stops <= world; ++stops) {
      for (int probes = 0; probes <= world; ++probes) {
        for (bool reversed : {false, true}) {
          float sum = 0;
          for (int i = 0; i < world; ++i) {
            const int r = reversed ? world - 1 - i : i;
            sum += EncodeVotes(r < stops, r >= world - probes, world) * (1.0f / static_cast<float>(world));
          }
          bool stop = false, probe = false;
          DecodeVotes(sum, world, &stop, &probe);
          EXPECT_EQ(stop, stops > 0) << "world " << world << " stops " << stops << " probes " << probes;
          EXPECT_EQ(probe, probes > 0) << "world " << world << " stops " << stops << " probes " << probes;
        }
      }
    }
  }
}

}  // namespace
}  // namespace firedrill::agent
