#include "agent/data.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <numeric>

#include "common/rng.h"

namespace firedrill::agent {

namespace {

uint64_t SampleSeed(uint64_t seed, int64_t index) {
  return SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(index) + 0x5851F42D4C957F2DULL));
}

uint64_t Mix(uint64_t h, uint64_t v) { return SplitMix64(h ^ SplitMix64(v)); }

// Our own counter-based draws: std:: distributions differ between standard
// libraries, and data order must not.
struct Draws {
  uint64_t s;
  uint64_t Below(uint64_t n) { return (s = SplitMix64(s)) % n; }
};

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

// ---------------------------------------------------------------- options

Status ValidateDataOptions(const DataOptions& o) {
  if (o.world_size < 1) return InvalidArgument("data: world_size must be >= 1");
  if (o.rank < 0 || o.rank >= o.world_size) return InvalidArgument("data: rank outside the world");
  if (o.batch_size <= 0) return InvalidArgument("data.batch_size must be > 0");
  if (o.num_workers < 0) return InvalidArgument("data.num_workers must be >= 0");
  if (o.prefetch_depth < 0) return InvalidArgument("data.prefetch_depth must be >= 0");
  if (!(o.sample_latency_ms >= 0)) return InvalidArgument("data.sample_latency_ms must be >= 0");
  if (o.kind == DataKind::kClassification) {
    if (o.input_dim <= 0 || o.num_classes <= 1)
      return InvalidArgument("data: input_dim > 0 and num_classes > 1 needed");
    // Past about 1e18 fp32's LayerNorm variance overflows: no job trains.
    if (!(o.feature_scale >= 1 && o.feature_scale <= 1e12))
      return InvalidArgument(
          "data.feature_scale must be between 1 and 1e12 (0 = 1: features in their own units), got " +
          std::to_string(o.feature_scale));
    return Status::Ok();
  }
  if (o.seq_len < 1) return InvalidArgument("model.seq_len must be >= 1");
  if (o.variable_length && (o.min_seq_len < 0 || o.min_seq_len > o.seq_len)) {
    return InvalidArgument("data.min_seq_len must be in [1, seq_len=" + std::to_string(o.seq_len) + "]");
  }
  if (o.source != "text" && o.source != "synthetic") {
    return InvalidArgument("data.source must be \"text\" or \"synthetic\", got \"" + o.source + "\"");
  }
  if (o.source == "synthetic" && o.vocab_size < 2) return InvalidArgument("model.vocab_size must be >= 2");
  if (o.source == "text" && o.vocab_size < kByteVocab) {
    return InvalidArgument("the text corpus is byte-level: model.vocab_size must be 0 or >= 256, got " +
                           std::to_string(o.vocab_size));
  }
  if (o.bucket_batches < 1) return InvalidArgument("data: bucket_batches must be >= 1");
  if (o.epochs < 0) return InvalidArgument("data: epochs must be >= 0");
  return Status::Ok();
}

StatusOr<DataOptions> DataOptionsFromJob(const v1::JobSpec& job, int rank, uint64_t seed, int threads) {
  const auto& d = job.data();
  const auto& m = job.model();
  DataOptions o;
  o.seed = seed;
  o.rank = rank;
  o.world_size = job.world_size();
  o.batch_size = d.batch_size();
  o.num_workers = d.num_workers();
  o.prefetch_depth = d.prefetch_depth() > 0 ? d.prefetch_depth() : 2;
  o.threads = threads;
  o.sample_latency_ms = d.sample_latency_ms();
  if (m.kind() == "gpt-tiny") {
    if (d.feature_scale() != 0 || d.normalize())
      return InvalidArgument(
          "data.feature_scale and data.normalize are the mlp's (its synthetic features); "
          "gpt-tiny reads tokens");
    o.kind = DataKind::kTokens;
    o.source = d.source().empty() ? "text" : Lower(d.source());
    o.vocab_size = m.vocab_size() > 0 ? m.vocab_size() : kByteVocab;
    o.seq_len = m.seq_len();
    o.variable_length = d.variable_length();
    o.min_seq_len = d.min_seq_len();
    const std::string sampler = d.sampler().empty() ? "random" : Lower(d.sampler());
    if (sampler == "random") {
      o.sampler = Sampler::kRandom;
    } else if (sampler == "length_bucketed") {
      o.sampler = Sampler::kLengthBucketed;
    } else {
      return InvalidArgument("data.sampler must be \"random\" or \"length_bucketed\", got \"" + d.sampler() +
                             "\"");
    }
    o.drop_last = d.drop_last();
  } else {
    o.input_dim = m.input_dim();
    o.num_classes = m.num_classes();
    o.feature_scale = d.feature_scale() == 0 ? 1.0 : d.feature_scale();
    o.normalize = d.normalize();
  }
  FD_RETURN_IF_ERROR(ValidateDataOptions(o));
  return o;
}

uint64_t DataFingerprint(const DataOptions& o, const TokenDataset* tokens) {
  uint64_t h = HashLabel("fd-data/1");
  for (uint64_t v : {static_cast<uint64_t>(o.kind), o.seed, static_cast<uint64_t>(o.world_size),
                     static_cast<uint64_t>(o.batch_size)}) {
    h = Mix(h, v);
  }
  if (o.kind == DataKind::kClassification) return Mix(Mix(h, o.input_dim), o.num_classes);
  for (uint64_t v : {static_cast<uint64_t>(o.seq_len), static_cast<uint64_t>(o.variable_length),
                     static_cast<uint64_t>(o.min_seq_len), static_cast<uint64_t>(o.sampler),
                     static_cast<uint64_t>(o.drop_last), static_cast<uint64_t>(o.bucket_batches)}) {
    h = Mix(h, v);
  }
  return Mix(h, tokens != nullptr ? tokens->corpus().fingerprint : 0);
}

// ---------------------------------------------------------------- batches

Batch PadSequences(const std::vector<std::vector<int32_t>>& windows) {
  const int64_t rows = static_cast<int64_t>(windows.size());
  int64_t t = 1;
  for (const auto& w : windows) t = std::max<int64_t>(t, static_cast<int64_t>(w.size()) - 1);
  Batch b;
  b.x = at::zeros({rows, t}, at::kLong);
  b.y = at::full({rows, t}, kIgnoreIndex, at::kLong);
  b.mask = at::zeros({rows, t}, at::kBool);
  int64_t* x = b.x.data_ptr<int64_t>();
  int64_t* y = b.y.data_ptr<int64_t>();
  bool* m = b.mask.data_ptr<bool>();
  for (int64_t r = 0; r < rows; ++r) {
    const auto& w = windows[r];
    const int64_t len = std::max<int64_t>(0, static_cast<int64_t>(w.size()) - 1);
    for (int64_t i = 0; i < len; ++i) {
      x[r * t + i] = w[i];
      y[r * t + i] = w[i + 1];
      m[r * t + i] = true;
    }
    b.tokens += len;
  }
  b.padding_fraction = rows > 0 ? 1.0 - static_cast<double>(b.tokens) / static_cast<double>(rows * t) : 0.0;
  return b;
}

StatusOr<std::shared_ptr<const TokenDataset>> TokenDataset::Create(const DataOptions& opts) {
  FD_RETURN_IF_ERROR(ValidateDataOptions(opts));
  if (opts.kind != DataKind::kTokens) return InvalidArgument("TokenDataset needs kind kTokens");
  std::shared_ptr<TokenDataset> ds(new TokenDataset());
  ds->opts_ = opts;
  auto corpus = opts.source == "synthetic"
                    ? SyntheticCorpus(SplitMix64(opts.seed ^ HashLabel("data.language")), opts.vocab_size,
                                      opts.synthetic_tokens)
                    : LoadTextCorpus(opts.corpus_path);
  if (!corpus.ok()) return corpus.status();
  ds->corpus_ = *corpus;
  const int64_t c = static_cast<int64_t>(ds->corpus_->tokens.size());
  ds->num_samples_ = (c - 1) / opts.seq_len;  // each window needs seq_len + 1 tokens
  ds->min_len_ = opts.variable_length
                     ? (opts.min_seq_len > 0 ? opts.min_seq_len : std::max(1, opts.seq_len / 8))
                     : opts.seq_len;
  const int64_t gb = static_cast<int64_t>(opts.batch_size) * opts.world_size;
  ds->steps_per_epoch_ = opts.drop_last ? ds->num_samples_ / gb : (ds->num_samples_ + gb - 1) / gb;
  if (ds->steps_per_epoch_ == 0 || ds->num_samples_ < opts.world_size) {
    return FailedPrecondition(ds->corpus_->name + " holds " + std::to_string(ds->num_samples_) +
                              " samples of seq_len " + std::to_string(opts.seq_len) +
                              ", not one global batch of " + std::to_string(gb) +
                              "; lower batch_size or seq_len, or turn off drop_last");
  }
  return std::shared_ptr<const TokenDataset>(ds);
}

int TokenDataset::SampleLength(int64_t sample) const {
  if (min_len_ >= opts_.seq_len) return opts_.seq_len;
  const uint64_t span = static_cast<uint64_t>(opts_.seq_len - min_len_ + 1);
  return min_len_ + static_cast<int>(Mix(opts_.seed ^ HashLabel("data.length"), sample) % span);
}

std::shared_ptr<const std::vector<int32_t>> TokenDataset::EpochOrder(int64_t epoch) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = orders_.find(epoch); it != orders_.end()) return it->second;
  }
  // Built outside the lock (a few thousand samples: microseconds); two
  // workers racing on a new epoch build the same order.
  auto order = std::make_shared<std::vector<int32_t>>(num_samples_);
  std::iota(order->begin(), order->end(), 0);
  Draws d{Mix(opts_.seed ^ HashLabel("data.epoch"), static_cast<uint64_t>(epoch))};
  for (int64_t i = num_samples_ - 1; i > 0; --i) std::swap((*order)[i], (*order)[d.Below(i + 1)]);

  if (opts_.sampler == Sampler::kLengthBucketed) {
    // Sort runs of bucket_batches global batches by length, cut them into
    // global batches, then shuffle the batches so an epoch does not march
    // from long to short. Chunks (not the whole epoch) keep it random.
    const int64_t gb = static_cast<int64_t>(opts_.batch_size) * opts_.world_size;
    const int64_t full = (num_samples_ / gb) * gb;  // the partial tail stays last
    const int64_t chunk = gb * opts_.bucket_batches;
    for (int64_t s = 0; s < full; s += chunk) {
      std::stable_sort(order->begin() + s, order->begin() + std::min(full, s + chunk),
                       [this](int32_t a, int32_t b) { return SampleLength(a) > SampleLength(b); });
    }
    const int64_t nb = full / gb;
    std::vector<int64_t> perm(nb);
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = nb - 1; i > 0; --i) std::swap(perm[i], perm[d.Below(i + 1)]);
    std::vector<int32_t> regrouped(order->begin(), order->end());
    for (int64_t k = 0; k < nb; ++k) {
      std::copy_n(order->begin() + perm[k] * gb, gb, regrouped.begin() + k * gb);
    }
    *order = std::move(regrouped);
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = orders_.emplace(epoch, std::move(order));
  while (orders_.size() > 4) orders_.erase(orders_.begin());  // workers span at most two epochs
  return it->second;
}

Batch TokenDataset::MakeBatch(int64_t batch, int rank) const {
  const int64_t w = opts_.world_size;
  const int64_t gb = static_cast<int64_t>(opts_.batch_size) * w;
  const int64_t epoch = batch / steps_per_epoch_;
  const int64_t base = (batch % steps_per_epoch_) * gb;
  // A partial last batch (drop_last off) is split evenly, padded by wrapping
  // to the epoch's start as DistributedSampler does, so every rank has rows.
  const int64_t remaining = num_samples_ - base;
  const int64_t rows = remaining >= gb ? opts_.batch_size : (remaining + w - 1) / w;
  const auto order = EpochOrder(epoch);
  const auto& toks = corpus_->tokens;

  std::vector<std::vector<int32_t>> windows(rows);
  std::vector<int64_t> ids(rows);
  for (int64_t j = 0; j < rows; ++j) {
    const int32_t sample = (*order)[(base + j * w + rank) % num_samples_];
    const int64_t start = static_cast<int64_t>(sample) * opts_.seq_len;
    windows[j].assign(toks.begin() + start, toks.begin() + start + SampleLength(sample) + 1);
    ids[j] = sample;
  }
  Batch b = PadSequences(windows);
  b.step = batch;
  b.epoch = epoch;
  b.sample_ids = std::move(ids);
  return b;
}

// ---------------------------------------------------------------- sources

struct SampleSource::Impl {
  DataOptions opts;
  at::Generator gen;
  at::Tensor teacher;  // [input_dim, num_classes]
  std::shared_ptr<const TokenDataset> tokens;
};

SampleSource::SampleSource(const DataOptions& opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = opts;
  // Explicit generators: the global one is shared by every trainer in the
  // process (tests run ranks as threads), so it cannot give determinism.
  impl_->gen = at::make_generator<at::CPUGeneratorImpl>(SplitMix64(opts.seed ^ HashLabel("data.teacher")));
  impl_->teacher = at::empty({opts.input_dim, opts.num_classes}, at::kFloat);
  impl_->teacher.normal_(0.0, 1.0, impl_->gen);
}

SampleSource::SampleSource(const DataOptions& opts, std::shared_ptr<const TokenDataset> tokens)
    : impl_(std::make_unique<Impl>()) {
  impl_->opts = opts;
  impl_->tokens = std::move(tokens);
}

SampleSource::~SampleSource() = default;

Batch SampleSource::Make(int64_t step) {
  const auto& o = impl_->opts;
  if (impl_->tokens) return impl_->tokens->MakeBatch(step, o.rank);
  Batch b;
  b.step = step;
  // One stream per batch, keyed by the batch's first global sample index:
  // a single vectorised normal_ is ~5x cheaper than reseeding per sample,
  // and data generation shares the cores with the ranks' compute.
  const int64_t first = GlobalSampleIndex(step, o.rank, o.world_size, o.batch_size, 0);
  {
    std::lock_guard<std::mutex> lock(impl_->gen.mutex());
    impl_->gen.set_current_seed(SampleSeed(o.seed, first));
  }
  b.x = at::empty({o.batch_size, o.input_dim}, at::kFloat);
  b.x.normal_(0.0, 1.0, impl_->gen);
  b.y = at::matmul(b.x, impl_->teacher).argmax(1);
  // In raw units (normalised, the scale and its inverse cancel: the
  // standardised features are the drawn ones).
  if (o.feature_scale != 1.0 && !o.normalize) b.x.mul_(o.feature_scale);
  b.sample_ids.resize(o.batch_size);
  std::iota(b.sample_ids.begin(), b.sample_ids.end(), first);
  return b;
}

// ---------------------------------------------------------------- cursor

std::string DataCursor::Serialize() const {
  char buf[128];
  std::snprintf(buf, sizeof buf, "fd-data-cursor/1 batch=%" PRId64 " epoch=%" PRId64 " fp=%016" PRIx64,
                next_batch, epoch, fingerprint);
  return buf;
}

StatusOr<DataCursor> DataCursor::Parse(std::string_view text) {
  DataCursor c;
  const std::string s(text);
  int64_t batch = 0, epoch = 0;
  uint64_t fp = 0;
  if (std::sscanf(s.c_str(), "fd-data-cursor/1 batch=%" SCNd64 " epoch=%" SCNd64 " fp=%" SCNx64, &batch,
                  &epoch, &fp) != 3 ||
      batch < 0) {
    return InvalidArgument("not a data cursor: \"" + s +
                           "\" (expected \"fd-data-cursor/1 batch=N epoch=E fp=HEX\")");
  }
  c.next_batch = batch;
  c.epoch = epoch;
  c.fingerprint = fp;
  return c;
}

// ---------------------------------------------------------------- loader

DataLoader::DataLoader(const DataOptions& opts, int64_t first_step)
    : opts_(opts), depth_(std::max(1, opts.prefetch_depth)), next_claim_(first_step), next_take_(first_step) {
  latency_ms_.store(opts.sample_latency_ms);
  try {
    error_ = ValidateDataOptions(opts_);
    if (error_.ok() && opts_.kind == DataKind::kTokens) {
      auto ds = TokenDataset::Create(opts_);
      if (ds.ok()) {
        tokens_ = *ds;
        if (opts_.epochs > 0) end_ = opts_.epochs * tokens_->steps_per_epoch();
      } else {
        error_ = ds.status();
      }
    }
    if (!error_.ok()) return;
    fingerprint_ = DataFingerprint(opts_, tokens_.get());
    if (opts_.num_workers <= 0) {
      inline_source_ = MakeSource();
      return;
    }
  } catch (const std::exception& e) {
    error_ = Internal(std::string("data loader setup failed: ") + e.what());
    return;
  }
  slots_.resize(depth_);
  for (int w = 0; w < opts_.num_workers; ++w) workers_.emplace_back([this, w] { WorkerLoop(w); });
}

StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(const DataOptions& opts, int64_t first_batch) {
  auto loader = std::make_unique<DataLoader>(opts, first_batch);
  {
    std::lock_guard<std::mutex> lock(loader->mu_);
    if (!loader->error_.ok()) return loader->error_;
  }
  return loader;
}

StatusOr<std::unique_ptr<DataLoader>> DataLoader::Resume(const DataOptions& opts, const DataCursor& cursor) {
  auto loader = Create(opts, cursor.next_batch);
  if (!loader.ok()) return loader.status();
  if (cursor.fingerprint != 0 && cursor.fingerprint != (*loader)->fingerprint_) {
    return FailedPrecondition(
        "data cursor was saved by a loader with different settings (seed, world size, batch size, sequence "
        "settings, sampler or corpus changed); resuming from it would not replay the same batches");
  }
  return loader;
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

std::unique_ptr<SampleSource> DataLoader::MakeSource() const {
  if (tokens_) return std::make_unique<SampleSource>(opts_, tokens_);
  return std::make_unique<SampleSource>(opts_);
}

StatusOr<Batch> DataLoader::Remake(int64_t batch_index) const {
  if (batch_index < 0 || batch_index >= end_)
    return OutOfRange("data: no batch " + std::to_string(batch_index) + " in this loader's range");
  // Every batch is a function of its index (and the options): a fresh
  // source on this thread makes it again, sharing nothing with the workers.
  return MakeSource()->Make(batch_index);
}

DataCursor DataLoader::Cursor() const {
  std::lock_guard<std::mutex> lock(mu_);
  DataCursor c;
  c.next_batch = next_take_;
  c.fingerprint = fingerprint_;
  c.epoch = tokens_ ? next_take_ / tokens_->steps_per_epoch() : 0;
  return c;
}

int64_t DataLoader::steps_per_epoch() const { return tokens_ ? tokens_->steps_per_epoch() : 0; }

void DataLoader::SimulateStorage(int64_t rows, std::unique_lock<std::mutex>* lock) {
  const double ms = latency_ms_.load(std::memory_order_relaxed) * static_cast<double>(rows);
  if (ms <= 0) return;
  const auto d =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double, std::milli>(ms));
  // One sleep per batch rather than per sample: same total, fewer wakeups.
  // Workers wait on the loader's condition so a stopping loader is not held
  // up by a long simulated read.
  if (lock == nullptr) {
    std::this_thread::sleep_for(d);
  } else {
    cv_.wait_for(*lock, d, [&] { return stop_; });
  }
}

void DataLoader::WorkerLoop(int worker) {
  std::unique_ptr<SampleSource> source;
  try {
    at::set_num_threads(std::max(1, opts_.threads));
    source = MakeSource();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok())
      error_ = Internal("data worker " + std::to_string(worker) + " failed to start: " + e.what());
    cv_.notify_all();
    return;
  }
  while (true) {
    int64_t step;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // The window bounds memory and keeps workers from racing far ahead of
      // a stalled trainer.
      cv_.wait(lock, [&] { return stop_ || (next_claim_ < next_take_ + depth_ && next_claim_ < end_); });
      if (stop_) return;
      step = next_claim_++;
    }
    Batch b;
    Status err;
    try {
      b = source->Make(step);
    } catch (const std::exception& e) {
      err = Internal("data worker " + std::to_string(worker) + " failed on step " + std::to_string(step) +
                     ": " + e.what());
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (err.ok()) SimulateStorage(b.rows(), &lock);
      if (stop_) return;
      if (!err.ok()) {
        if (error_.ok()) error_ = err;
      } else {
        slots_[step % depth_] = std::move(b);
      }
    }
    cv_.notify_all();
    if (!err.ok()) return;
  }
}

StatusOr<Batch> DataLoader::Next() {
  if (!inline_source_ && workers_.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    return error_.ok() ? Internal("data loader has no source") : error_;
  }
  if (next_take_ >= end_) {
    return OutOfRange("data exhausted: " + std::to_string(opts_.epochs) + " epoch(s) of " +
                      std::to_string(steps_per_epoch()) + " batches done");
  }
  if (inline_source_) {
    try {
      Batch b = inline_source_->Make(next_take_);
      SimulateStorage(b.rows(), nullptr);
      std::lock_guard<std::mutex> lock(mu_);
      ++next_take_;
      return b;
    } catch (const std::exception& e) {
      return Internal("data for step " + std::to_string(next_take_) + " failed: " + e.what());
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  Batch* slot = &slots_[next_take_ % depth_];
  cv_.wait(lock, [&] { return slot->step == next_take_ || !error_.ok(); });
  if (slot->step != next_take_) return error_;
  Batch b = std::move(*slot);
  *slot = Batch{};
  ++next_take_;
  lock.unlock();
  cv_.notify_all();
  return b;
}

}  // namespace firedrill::agent
