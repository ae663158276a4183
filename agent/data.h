// What a rank trains on, and the loader that hands it out.
//
// Two kinds of data:
// - kClassification (mlp): synthetic, deterministic down to the bit. Each
//   batch is N(0,1) inputs drawn from a generator seeded by (seed, global
//   index of the batch's first sample), each label the argmax of a fixed
//   random "teacher" linear map, so a model can learn it. Infinite: no epochs.
// - kTokens (gpt-tiny): next-token prediction on a Corpus (agent/corpus.h).
//   Sample i of the dataset is the window starting at i*seq_len; its length is
//   seq_len, or with variable_length drawn from (seed, i) in [min_seq_len,
//   seq_len]. Rows are padded to the longest row of the batch; the mask marks
//   real positions and padded targets hold kIgnoreIndex. Finite epochs: each
//   epoch is a seeded permutation of the samples ("random"), or the same
//   permutation regrouped so rows of similar length share a batch
//   ("length_bucketed": the fix for padding waste).
//
// A batch is a pure function of (options, batch index): never of which
// thread made it or when. That is what makes the cursor (just the next batch
// index plus a fingerprint of the options) enough to resume exactly.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "agent/corpus.h"
#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::agent {

enum class DataKind { kClassification, kTokens };
enum class Sampler { kRandom, kLengthBucketed };

// Targets at padded positions; the loss ignores them (cross_entropy's default).
inline constexpr int64_t kIgnoreIndex = -100;

struct DataOptions {
  uint64_t seed = 1;
  int rank = 0;
  int world_size = 1;
  int batch_size = 32;  // per rank
  int input_dim = 64;
  int num_classes = 10;
  int num_workers = 0;     // 0: batches are made on the caller's thread
  int prefetch_depth = 2;  // batches made ahead of the consumer, all workers together
  int threads = 1;         // intra-op threads for worker threads
  DataKind kind = DataKind::kClassification;
  // Simulated slow storage: the thread making a batch sleeps this long per
  // sample (never spins), so starvation costs wall time, not CPU.
  double sample_latency_ms = 0;

  // kClassification only: features in raw units (a sensor's counts): drawn,
  // labelled, then multiplied by feature_scale. normalize: the loader
  // standardises them again before the model sees them.
  double feature_scale = 1;
  bool normalize = false;

  // kTokens only.
  std::string source = "text";  // "text" (shipped corpus) | "synthetic"
  std::string corpus_path;      // text: "" = LocateTextCorpus()
  int vocab_size = kByteVocab;  // synthetic source's vocabulary (text is bytes)
  int64_t synthetic_tokens = int64_t{1} << 18;
  int seq_len = 64;
  bool variable_length = false;
  int min_seq_len = 0;  // 0 = max(1, seq_len / 8)
  Sampler sampler = Sampler::kRandom;
  bool drop_last = false;   // drop the epoch's last, partial global batch
  int bucket_batches = 32;  // length_bucketed: global batches sorted together
  int64_t epochs = 0;       // 0 = repeat forever; else Next() ends with OutOfRange
};

// Maps a job's data and model settings onto loader options for `rank`
// (seed: the data seed, already derived), and validates them.
StatusOr<DataOptions> DataOptionsFromJob(const v1::JobSpec& job, int rank, uint64_t seed, int threads);
Status ValidateDataOptions(const DataOptions& o);

struct Batch {
  int64_t step = -1;  // batch index: the loader's position that produced it
  // mlp: [B, input_dim] float. tokens: inputs [B, T] int64, T = longest row.
  at::Tensor x;
  // mlp: [B] int64 class. tokens: next-token targets [B, T], kIgnoreIndex at padding.
  at::Tensor y;
  at::Tensor mask;              // tokens: [B, T] bool, true at real positions; mlp: undefined
  int64_t tokens = 0;           // real (non-padding) input tokens; 0 for mlp
  double padding_fraction = 0;  // padding tokens / (B * T)
  int64_t epoch = 0;
  std::vector<int64_t> sample_ids;  // tokens: dataset sample per row; mlp: global sample index

  const at::Tensor& inputs() const { return x; }
  const at::Tensor& targets() const { return y; }
  int64_t rows() const { return x.defined() ? x.size(0) : 0; }
};

// Pads windows into a token batch: each window holds L+1 tokens (inputs are
// the first L, targets the last L). Rows are right-padded to the longest L.
Batch PadSequences(const std::vector<std::vector<int32_t>>& windows);

// Global index of sample j of `rank`'s batch at `step`: every rank reads a
// disjoint shard, and consecutive steps never reuse a sample (mlp data).
inline int64_t GlobalSampleIndex(int64_t step, int rank, int world_size, int batch_size, int j) {
  return (step * world_size + rank) * static_cast<int64_t>(batch_size) + j;
}

// The token dataset: immutable corpus + sample geometry + the per-epoch
// order, shared by every worker. Thread-safe.
class TokenDataset {
 public:
  static StatusOr<std::shared_ptr<const TokenDataset>> Create(const DataOptions& opts);

  int64_t num_samples() const { return num_samples_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int SampleLength(int64_t sample) const;  // input tokens of a sample
  const Corpus& corpus() const { return *corpus_; }
  // The epoch's sample order; global batch p is [p*GB, (p+1)*GB) of it, GB =
  // batch_size * world_size, and rank r takes positions p*GB + j*W + r.
  std::shared_ptr<const std::vector<int32_t>> EpochOrder(int64_t epoch) const;
  // Rank `rank`'s batch at `batch` (any rank: the options' rank is ignored).
  Batch MakeBatch(int64_t batch, int rank) const;

 private:
  TokenDataset() = default;
  DataOptions opts_;
  std::shared_ptr<const Corpus> corpus_;
  int64_t num_samples_ = 0;
  int64_t steps_per_epoch_ = 0;
  int min_len_ = 0;
  mutable std::mutex mu_;
  mutable std::map<int64_t, std::shared_ptr<const std::vector<int32_t>>> orders_;  // a few recent epochs
};

// Makes batches; not thread-safe (owns a generator): one per thread.
class SampleSource {
 public:
  explicit SampleSource(const DataOptions& opts);  // kClassification
  SampleSource(const DataOptions& opts, std::shared_ptr<const TokenDataset> tokens);
  ~SampleSource();
  Batch Make(int64_t step);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A loader's position: the next batch index it hands out, plus a fingerprint
// of everything that fixes the batch sequence (seed, world size, batch size,
// sequence settings, sampler, corpus), so a cursor is refused by a loader
// that would produce different batches. Rank-independent: every rank of a
// job is at the same position.
struct DataCursor {
  int64_t next_batch = 0;
  uint64_t fingerprint = 0;  // 0: unknown, accepted by any loader
  int64_t epoch = 0;         // informative (derived from next_batch)

  // One line, e.g. "fd-data-cursor/1 batch=120 epoch=3 fp=9a3c...": small
  // enough for a manifest field or a checkpoint tensor.
  std::string Serialize() const;
  static StatusOr<DataCursor> Parse(std::string_view text);
};

// Fingerprint of the options that fix the batch sequence (tokens: needs the
// corpus fingerprint, hence the dataset).
uint64_t DataFingerprint(const DataOptions& o, const TokenDataset* tokens);

// Hands out batches for consecutive steps from `first_step`, made ahead by
// background workers into a bounded window (prefetch_depth).
class DataLoader {
 public:
  // Never throws; an error (e.g. a missing corpus) is returned by Next().
  DataLoader(const DataOptions& opts, int64_t first_step);
  // As above, but reports option and corpus errors now.
  static StatusOr<std::unique_ptr<DataLoader>> Create(const DataOptions& opts, int64_t first_batch = 0);
  // Continues from a saved cursor: yields exactly the batches the loader that
  // saved it would have yielded next. FailedPrecondition if the options differ.
  static StatusOr<std::unique_ptr<DataLoader>> Resume(const DataOptions& opts, const DataCursor& cursor);
  ~DataLoader();  // stops and joins the workers
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next step's batch; blocks while the workers are behind.
  StatusOr<Batch> Next();
  // The position of the batch Next() returns next (save it with a checkpoint).
  DataCursor Cursor() const;
  // Batch `batch_index` made again, on the calling thread, without the
  // storage latency: the same tensors Next() handed out for it.
  StatusOr<Batch> Remake(int64_t batch_index) const;
  // Batches per epoch (tokens), 0 for the infinite mlp data.
  int64_t steps_per_epoch() const;
  // Changes the simulated storage latency from now on (a fault may raise it).
  void set_sample_latency_ms(double ms) { latency_ms_.store(ms); }

 private:
  void WorkerLoop(int worker);
  std::unique_ptr<SampleSource> MakeSource() const;
  // Sleeps latency * rows, waking early if the loader stops.
  void SimulateStorage(int64_t rows, std::unique_lock<std::mutex>* lock);

  DataOptions opts_;
  int depth_;
  std::shared_ptr<const TokenDataset> tokens_;
  uint64_t fingerprint_ = 0;
  int64_t end_ = INT64_MAX;  // first batch index past the last epoch
  std::atomic<double> latency_ms_{0};
  std::unique_ptr<SampleSource> inline_source_;  // num_workers == 0
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t next_claim_;        // next step a worker will make
  int64_t next_take_;         // next step Next() returns
  std::vector<Batch> slots_;  // step % depth_
  Status error_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace firedrill::agent
