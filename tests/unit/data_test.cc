// The data loader: token batches, padding, sharding, cursor resume, storage
// latency, and the length-bucketed sampler.
#include "agent/data.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <set>

#include "agent/corpus.h"

namespace firedrill::agent {
namespace {

DataOptions TokenOpts() {
  DataOptions o;
  o.kind = DataKind::kTokens;
  o.seed = 7;
  o.batch_size = 4;
  o.seq_len = 64;
  o.variable_length = true;
  o.min_seq_len = 8;
  return o;
}

std::vector<Batch> Take(DataLoader& loader, int n) {
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) {
    auto b = loader.Next();
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok()) break;
    out.push_back(std::move(b).value());
  }
  return out;
}

void ExpectSame(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_TRUE(at::equal(a.x, b.x)) << "step " << a.step;
  EXPECT_TRUE(at::equal(a.y, b.y)) << "step " << a.step;
  if (a.mask.defined() || b.mask.defined()) {
    EXPECT_TRUE(at::equal(a.mask, b.mask)) << "step " << a.step;
  }
  EXPECT_EQ(a.sample_ids, b.sample_ids);
}

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

TEST(Corpus, ShippedTextIsFoundAndByteLevel) {
  auto c = LoadTextCorpus();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->vocab_size, 256);
  EXPECT_GT((*c)->tokens.size(), 100u * 1024);
  EXPECT_LT((*c)->tokens.size(), 300u * 1024);
  const std::string head = ByteTokenizer::Decode((*c)->tokens.data(), 30);
  EXPECT_EQ(ByteTokenizer::Encode(head),
            std::vector<int32_t>((*c)->tokens.begin(), (*c)->tokens.begin() + 30));
}

TEST(Corpus, MissingCorpusIsAClearError) {
  auto c = LoadTextCorpus("/nonexistent/corpus.txt");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);

  const char* old = std::getenv("FIREDRILL_DATA");
  const std::string saved = old ? old : "";
  setenv("FIREDRILL_DATA", "/nonexistent-dir/corpus.txt", 1);
  auto where = LocateTextCorpus();  // falls back to the source tree
  ASSERT_TRUE(where.ok());
  EXPECT_NE(where->find("data/corpus.txt"), std::string::npos);
  if (old) {
    setenv("FIREDRILL_DATA", saved.c_str(), 1);
  } else {
    unsetenv("FIREDRILL_DATA");
  }

  DataOptions o = TokenOpts();
  o.corpus_path = "/nonexistent/corpus.txt";
  auto loader = DataLoader::Create(o);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find("/nonexistent/corpus.txt"), std::string::npos);
  DataLoader direct(o, 0);  // the trainer's constructor reports through Next()
  EXPECT_EQ(direct.Next().status().code(), StatusCode::kNotFound);
}

TEST(Data, PaddingFractionOnAHandMadeBatch) {
  // Windows of L+1 tokens: lengths 3, 1, 2 -> T = 3, 6 real of 9.
  Batch b = PadSequences({{1, 2, 3, 4}, {5, 6}, {7, 8, 9}});
  EXPECT_EQ(b.tokens, 6);
  EXPECT_DOUBLE_EQ(b.padding_fraction, 3.0 / 9.0);
  EXPECT_TRUE(at::equal(b.x, at::tensor({1, 2, 3, 5, 0, 0, 7, 8, 0}, at::kLong).view({3, 3})));
  EXPECT_TRUE(at::equal(b.y, at::tensor({2, 3, 4, 6, -100, -100, 8, 9, -100}, at::kLong).view({3, 3})));
  EXPECT_TRUE(at::equal(b.mask, b.y.ne(kIgnoreIndex)));
  EXPECT_DOUBLE_EQ(PadSequences({{1, 2}, {3, 4}}).padding_fraction, 0.0);
}

TEST(Data, TokenBatchesAreDeterministicPerSeedAndThreadCount) {
  DataOptions o = TokenOpts();
  DataLoader inline_loader(o, 0);
  o.num_workers = 3;
  o.prefetch_depth = 4;
  DataLoader threaded(o, 0);
  auto a = Take(inline_loader, 12), b = Take(threaded, 12);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ExpectSame(a[i], b[i]);
  for (const auto& batch : a) {
    EXPECT_EQ(batch.x.size(0), 4);
    EXPECT_LE(batch.x.size(1), 64);
    EXPECT_EQ(batch.tokens, batch.mask.sum().item<int64_t>());
  }

  o.seed = 8;
  DataLoader other(o, 0);
  auto c = Take(other, 1);
  EXPECT_NE(a[0].sample_ids, c[0].sample_ids);
}

TEST(Data, MlpBatchesUnchangedAcrossWorkers) {
  DataOptions o;
  o.batch_size = 8;
  o.input_dim = 16;
  o.num_classes = 4;
  DataLoader inline_loader(o, 3);
  o.num_workers = 2;
  DataLoader threaded(o, 3);
  auto a = Take(inline_loader, 5), b = Take(threaded, 5);
  for (size_t i = 0; i < a.size(); ++i) ExpectSame(a[i], b[i]);
  EXPECT_EQ(a[0].step, 3);
  EXPECT_EQ(a[0].sample_ids.front(), GlobalSampleIndex(3, 0, 1, 8, 0));
  EXPECT_FALSE(a[0].mask.defined());
}

// Raw units: every feature multiplied by the scale; the labels are the
// unscaled features' (the same task), and a normalising pipeline hands the
// model exactly the unscaled features.
TEST(Data, RawFeatureUnitsScaleTheFeaturesAndNormalizeUndoesThem) {
  DataOptions o;
  o.batch_size = 64;
  o.input_dim = 32;
  o.num_classes = 10;
  DataOptions raw = o;
  raw.feature_scale = 30000;
  DataOptions normalised = raw;
  normalised.normalize = true;
  DataLoader plain(o, 0), scaled(raw, 0), standard(normalised, 0);
  auto a = Take(plain, 3), b = Take(scaled, 3), c = Take(standard, 3);
  for (size_t i = 0; i < a.size(); ++i) {
    ExpectSame(a[i], c[i]);
    EXPECT_TRUE(at::equal(a[i].y, b[i].y)) << "the labels are the unscaled features'";
    EXPECT_TRUE(at::equal(b[i].x, a[i].x * 30000.0f));
  }
  raw.feature_scale = 0.5;
  EXPECT_NE(ValidateDataOptions(raw).message().find("data.feature_scale"), std::string::npos);
}

TEST(Data, RanksSeeDisjointShards) {
  DataOptions o = TokenOpts();
  o.world_size = 4;
  o.drop_last = true;
  std::vector<std::unique_ptr<DataLoader>> ranks;
  for (int r = 0; r < 4; ++r) {
    o.rank = r;
    auto l = DataLoader::Create(o);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ranks.push_back(std::move(l).value());
  }
  const int64_t spe = ranks[0]->steps_per_epoch();
  std::set<int64_t> seen;
  for (int64_t s = 0; s < spe; ++s) {
    for (auto& l : ranks) {
      auto b = l->Next();
      ASSERT_TRUE(b.ok());
      for (int64_t id : b->sample_ids)
        EXPECT_TRUE(seen.insert(id).second) << "sample " << id << " twice in epoch";
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), spe * 16);  // every full global batch, nothing reused
}

TEST(Data, DropLastAndFiniteEpochs) {
  DataOptions o = TokenOpts();
  o.seq_len = 1000;  // 164 samples: short epochs, a partial last batch
  o.batch_size = 16;
  o.world_size = 2;
  auto ds = TokenDataset::Create(o);
  ASSERT_TRUE(ds.ok());
  const int64_t n = (*ds)->num_samples();
  ASSERT_NE(n % 32, 0) << "pick sizes with a partial last batch";
  EXPECT_EQ((*ds)->steps_per_epoch(), (n + 31) / 32);
  // Last batch: the remainder split over both ranks, wrapped like DistributedSampler.
  Batch last = (*ds)->MakeBatch((*ds)->steps_per_epoch() - 1, 1);
  EXPECT_EQ(last.x.size(0), ((n % 32) + 1) / 2);

  o.drop_last = true;
  o.epochs = 2;
  auto loader = DataLoader::Create(o);
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ((*loader)->steps_per_epoch(), n / 32);
  for (int64_t i = 0; i < 2 * (n / 32); ++i) {
    auto b = (*loader)->Next();
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->x.size(0), 16);
    EXPECT_EQ(b->epoch, i / (n / 32));
  }
  EXPECT_EQ((*loader)->Next().status().code(), StatusCode::kOutOfRange);
}

TEST(Data, CursorResumeReplaysTheSameBatches) {
  DataOptions o = TokenOpts();
  o.seq_len = 512;  // 320 samples, 20 batches of 16 per epoch: the run below crosses epochs
  o.batch_size = 16;
  o.sampler = Sampler::kLengthBucketed;
  o.num_workers = 2;
  DataLoader straight(o, 0);
  auto all = Take(straight, 25);

  DataLoader first(o, 0);
  Take(first, 9);
  const std::string saved = first.Cursor().Serialize();
  auto cursor = DataCursor::Parse(saved);
  ASSERT_TRUE(cursor.ok()) << saved;
  EXPECT_EQ(cursor->next_batch, 9);

  o.num_workers = 0;  // worker count is not part of the sequence
  auto resumed = DataLoader::Resume(o, *cursor);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  auto rest = Take(**resumed, 16);
  ASSERT_EQ(rest.size(), 16u);
  for (size_t i = 0; i < rest.size(); ++i) ExpectSame(all[9 + i], rest[i]);
  EXPECT_GT(rest.back().epoch, 0);

  o.seed = 99;  // different data: the cursor no longer describes it
  EXPECT_EQ(DataLoader::Resume(o, *cursor).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(DataCursor::Parse("batch=3").ok());
}

TEST(Data, StorageLatencySleepsWithoutBurningCpu) {
  DataOptions o;
  o.batch_size = 8;
  o.input_dim = 8;
  o.num_classes = 2;
  for (int workers : {0, 1}) {
    o.num_workers = workers;
    o.sample_latency_ms = 0;
    auto t0 = std::chrono::steady_clock::now();
    {
      DataLoader fast(o, 0);
      Take(fast, 10);
    }
    const double fast_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    o.sample_latency_ms = 2.0;  // 16 ms per batch, 160 ms for 10
    const double cpu0 = CpuSeconds();
    t0 = std::chrono::steady_clock::now();
    {
      DataLoader slow(o, 0);
      Take(slow, 10);
    }
    const double slow_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_s = CpuSeconds() - cpu0;
    EXPECT_GE(slow_s, 0.150) << "workers " << workers;
    EXPECT_GT(slow_s, 3 * fast_s) << "workers " << workers;
    EXPECT_LT(cpu_s, 0.3 * slow_s) << "workers " << workers << ": waiting should sleep, not spin";
  }
}

TEST(Data, LengthBucketingCutsPadding) {
  DataOptions o = TokenOpts();
  o.batch_size = 16;
  o.world_size = 2;
  auto mean_padding = [&](Sampler s) {
    o.sampler = s;
    DataLoader l(o, 0);
    double sum = 0;
    auto batches = Take(l, 40);
    for (const auto& b : batches) sum += b.padding_fraction;
    return sum / static_cast<double>(batches.size());
  };
  const double random = mean_padding(Sampler::kRandom);
  const double bucketed = mean_padding(Sampler::kLengthBucketed);
  EXPECT_GT(random, 0.2);
  EXPECT_LT(bucketed, 0.5 * random) << "random " << random << " bucketed " << bucketed;

  // Bucketing reorders an epoch; it neither drops nor repeats samples.
  auto ds = TokenDataset::Create(o);
  ASSERT_TRUE(ds.ok());
  auto order = *(*ds)->EpochOrder(0);
  std::sort(order.begin(), order.end());
  for (size_t i = 0; i < order.size(); ++i) ASSERT_EQ(order[i], static_cast<int32_t>(i));
}

TEST(Data, SyntheticSourceAndJobMapping) {
  v1::JobSpec job;
  job.set_world_size(2);
  job.mutable_model()->set_kind("gpt-tiny");
  job.mutable_model()->set_seq_len(32);
  job.mutable_model()->set_vocab_size(50);
  job.mutable_data()->set_batch_size(4);
  job.mutable_data()->set_source("synthetic");
  job.mutable_data()->set_sampler("length_bucketed");
  job.mutable_data()->set_variable_length(true);
  job.mutable_data()->set_min_seq_len(4);
  auto o = DataOptionsFromJob(job, 1, 5, 1);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->kind, DataKind::kTokens);
  EXPECT_EQ(o->sampler, Sampler::kLengthBucketed);
  EXPECT_EQ(o->prefetch_depth, 2);
  DataLoader l(*o, 0);
  auto b = l.Next();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_LT(b->x.max().item<int64_t>(), 50);

  job.mutable_data()->set_sampler("sorted");
  EXPECT_EQ(DataOptionsFromJob(job, 0, 5, 1).status().code(), StatusCode::kInvalidArgument);
  job.mutable_data()->set_sampler("random");
  job.mutable_data()->set_source("text");  // bytes need vocab >= 256
  EXPECT_EQ(DataOptionsFromJob(job, 0, 5, 1).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace firedrill::agent
