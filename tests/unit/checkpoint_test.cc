// Checkpoint shards + manifest: bitwise round trip, and every damaged case
// refused with its own reason (the learner-facing message is asserted whole).
#include "agent/checkpoint.h"
#include "agent/ckpt_diff.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

namespace firedrill::agent {
namespace {

namespace fs = std::filesystem;
const std::string kRollBack = "; roll back to an earlier checkpoint with `firedrill-ckpt list`";

std::string Short(const std::string& hex) { return hex.substr(0, 8) + "\u2026"; }

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fd-ckpt-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  // Deterministic per (rank, step) contents with awkward values and layouts.
  static ShardData MakeShard(int rank, int64_t step) {
    at::manual_seed(1000 * step + rank);
    ShardData d;
    at::Tensor w = at::randn({8, 16});
    w[0][0] = std::numeric_limits<float>::quiet_NaN();
    w[0][1] = -0.0f;
    w[0][2] = std::numeric_limits<float>::infinity();
    w[0][3] = std::numeric_limits<float>::denorm_min();
    d.tensors["model/fc1.weight"] = w.set_requires_grad(true);
    d.tensors["model/fc1.bias"] = at::randn({16}).to(at::kBFloat16);
    d.tensors["model/fc2.weight"] = at::randn({4, 6}).t();          // non-contiguous
    d.tensors["model/half"] = at::randn({5}).to(at::kHalf);
    d.tensors["optim/momentum/fc1.weight"] = at::randn({64}).narrow(0, 8, 16);  // view into a bigger storage
    d.tensors["optim/step"] = at::scalar_tensor(step, at::kLong);    // 0-dim
    d.tensors["optim/empty"] = at::empty({0, 3}, at::kDouble);
    d.tensors["optim/mask"] = at::rand({7}) > 0.5;
    d.blobs["rng"] = std::string("\x00\x01\xff\x80 bytes", 10);
    d.blobs["loss_scaler"] = R"({"scale":65536})";
    d.blobs["data_cursor"] = std::to_string(step * 64 + rank);
    d.blobs["empty"] = "";
    return d;
  }

  std::string Write(int64_t step, int world = 2, const std::string& hash = "cfg-abc") {
    const std::string dir = StepDir(root_, step);
    Manifest m;
    m.step = step;
    m.world_size = world;
    m.config_hash = hash;
    for (int r = 0; r < world; ++r) {
      ShardInfo info;
      EXPECT_TRUE(WriteShard(dir, r, MakeShard(r, step), &info).ok());
      m.shards.push_back(info);
    }
    Status st = WriteManifest(dir, m);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return dir;
  }

  std::string root_;
};

// Same dtype, shape and bytes (NaN payloads and -0.0 included).
void ExpectBitwiseEqual(const at::Tensor& a, const at::Tensor& b, const std::string& name) {
  ASSERT_EQ(a.scalar_type(), b.scalar_type()) << name;
  ASSERT_EQ(a.sizes(), b.sizes()) << name;
  at::Tensor ca = a.contiguous(), cb = b.contiguous();
  ASSERT_EQ(ca.nbytes(), cb.nbytes()) << name;
  // memcmp takes no null pointer, not even for 0 bytes (an empty tensor's).
  if (ca.nbytes() > 0) EXPECT_EQ(std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()), 0) << name;
}

TEST_F(CheckpointTest, RoundTripIsBitwise) {
  const std::string dir = Write(40);
  for (int r = 0; r < 2; ++r) {
    auto got = LoadShard(dir, r, {2, "cfg-abc"});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ShardData want = MakeShard(r, 40);
    ASSERT_EQ(got->tensors.size(), want.tensors.size());
    for (const auto& [name, t] : want.tensors) {
      ASSERT_TRUE(got->tensors.count(name)) << name;
      ExpectBitwiseEqual(got->tensors.at(name), t, name);
      EXPECT_FALSE(got->tensors.at(name).requires_grad()) << name;
    }
    EXPECT_EQ(got->blobs, want.blobs);
  }
  // Loaded tensors are independent (no aliasing of a shared storage).
  auto a = LoadShard(dir, 0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->tensors.at("optim/momentum/fc1.weight").storage().nbytes(), 16 * sizeof(float));

  auto m = ReadManifest(dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->format_version, 1);  // every shard holds its rank's whole state
  EXPECT_EQ(m->step, 40);
  EXPECT_EQ(m->world_size, 2);
  EXPECT_EQ(m->config_hash, "cfg-abc");
  EXPECT_GT(m->created_unix_ms, 0);
  ASSERT_EQ(m->shards.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const ShardInfo& s = m->shards[r];
    const std::string path = dir + "/rank-" + std::to_string(r) + ".pt";
    EXPECT_EQ(s.file, "rank-" + std::to_string(r) + ".pt");
    EXPECT_EQ(s.rank, r);
    EXPECT_EQ(s.bytes, static_cast<int64_t>(fs::file_size(path)));
    EXPECT_EQ(s.sha256, *Sha256File(path));
    auto described = DescribeShard(dir, r);
    ASSERT_TRUE(described.ok());
    EXPECT_EQ(described->sha256, s.sha256);
    EXPECT_EQ(described->bytes, s.bytes);
  }
  EXPECT_TRUE(VerifyCheckpoint(dir).ok());
}

TEST_F(CheckpointTest, Sha256MatchesKnownVector) {
  const std::string path = root_ + "/abc";
  std::ofstream(path) << "abc";
  EXPECT_EQ(*Sha256File(path), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_F(CheckpointTest, TamperedByteIsShaMismatch) {
  const std::string dir = Write(40);
  const std::string shard = dir + "/rank-1.pt";
  const std::string want = *Sha256File(shard);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) / 2));
    char c = 0;
    f.read(&c, 1);
    f.seekp(-1, std::ios::cur);
    c ^= 0x01;
    f.write(&c, 1);
  }
  const std::string got = *Sha256File(shard);
  const std::string msg = "checkpoint " + shard + ": SHA-256 mismatch (manifest " + Short(want) + ", file " + Short(got) +
                          "): the shard is corrupt" + kRollBack;
  auto loaded = LoadShard(dir, 1);
  EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(loaded.status().message(), msg);
  EXPECT_EQ(VerifyCheckpoint(dir).message(), msg);
  EXPECT_TRUE(LoadShard(dir, 0).ok());  // the other rank's shard is intact
}

TEST_F(CheckpointTest, TruncatedIsSizeMismatch) {
  const std::string dir = Write(40);
  const std::string shard = dir + "/rank-0.pt";
  const auto size = fs::file_size(shard);
  fs::resize_file(shard, size - 100);
  auto loaded = LoadShard(dir, 0);
  EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(loaded.status().message(), "checkpoint " + shard + ": size mismatch (manifest " + std::to_string(size) +
                                           " bytes, file " + std::to_string(size - 100) +
                                           " bytes): the shard is truncated" + kRollBack);
}

TEST_F(CheckpointTest, MissingShard) {
  const std::string dir = Write(40);
  fs::remove(dir + "/rank-1.pt");
  const std::string msg = "checkpoint " + dir + "/rank-1.pt: missing shard (listed in manifest.json, not on disk): "
                          "a rank's write was lost or the file was deleted" + kRollBack;
  EXPECT_EQ(LoadShard(dir, 1).status().message(), msg);
  EXPECT_EQ(VerifyCheckpoint(dir).message(), msg);
}

TEST_F(CheckpointTest, MissingManifestIsIncompleteAndSkipped) {
  const std::string good = Write(10);
  // An interrupted write: shards on disk, the manifest never written.
  const std::string torn = StepDir(root_, 20);
  ASSERT_TRUE(WriteShard(torn, 0, MakeShard(0, 20), nullptr).ok());
  ASSERT_TRUE(WriteShard(torn, 1, MakeShard(1, 20), nullptr).ok());
  const std::string msg = "checkpoint " + torn + ": incomplete checkpoint (no manifest.json): the write did not finish" + kRollBack;
  EXPECT_EQ(LoadShard(torn, 0).status().message(), msg);
  EXPECT_EQ(LoadShard(torn, 0).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(VerifyCheckpoint(torn).message(), msg);
  auto latest = LatestValidCheckpoint(root_);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, good);

  // Atomic writes leave nothing but the published files behind.
  for (const auto& dir : {good, torn})
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      EXPECT_TRUE(n == "rank-0.pt" || n == "rank-1.pt" || n == "manifest.json") << "stray file " << n;
    }
}

TEST_F(CheckpointTest, GarbageManifest) {
  const std::string dir = Write(40);
  const std::string path = dir + "/manifest.json";
  std::ofstream(path, std::ios::trunc) << "{\"format\": \"firedrill-checkpoint\", \"step\": 4";
  Status st = VerifyCheckpoint(dir);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_EQ(st.message().rfind("checkpoint " + path + ": unreadable manifest (", 0), 0u) << st.message();
  EXPECT_NE(st.message().find("): the manifest is corrupt" + kRollBack), std::string::npos) << st.message();

  std::ofstream(path, std::ios::trunc).close();  // zero length, as a crash can leave it
  st = VerifyCheckpoint(dir);
  EXPECT_EQ(st.message().rfind("checkpoint " + path + ": unreadable manifest (", 0), 0u) << st.message();

  std::ofstream(path, std::ios::trunc) << "[1, 2, 3]";
  st = LoadShard(dir, 0).status();
  EXPECT_EQ(st.message().rfind("checkpoint " + path + ": malformed manifest (", 0), 0u) << st.message();
}

TEST_F(CheckpointTest, WorldSizeMismatch) {
  const std::string dir = Write(40);
  auto st = LoadShard(dir, 0, {4, ""}).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), "checkpoint " + dir + ": world size mismatch (checkpoint 2 ranks, job 4): each rank resumes "
                          "its own data cursor and RNG state; run the job with world_size 2 to resume from it");
  st = LoadShard(dir, 0, {2, "cfg-other"}).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message().rfind("checkpoint " + dir + ": config hash mismatch (checkpoint cfg-abc, job cfg-other)", 0), 0u);
  EXPECT_EQ(LoadShard(dir, 2).status().message(), "checkpoint " + dir + ": no shard for rank 2 (checkpoint has 2 ranks)");

  // A manifest whose shard list disagrees with its own world size.
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir + "/manifest.json"));
  j["world_size"] = 3;
  std::ofstream(dir + "/manifest.json", std::ios::trunc) << j.dump();
  EXPECT_EQ(VerifyCheckpoint(dir).message(), "checkpoint " + dir + "/manifest.json: malformed manifest (lists 2 shards "
                                             "for world size 3): the manifest is corrupt" + kRollBack);
}

TEST_F(CheckpointTest, WriteManifestRefusesAMissingShard) {
  const std::string dir = StepDir(root_, 5);
  ShardInfo info;
  ASSERT_TRUE(WriteShard(dir, 0, MakeShard(0, 5), &info).ok());
  Manifest m;
  m.step = 5;
  m.world_size = 2;
  m.shards = {info, ShardInfo{"rank-1.pt", 1, 10, std::string(64, 'a')}};
  Status st = WriteManifest(dir, m);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(dir + "/manifest.json"));
}

// Format 2's map: each tensor's chunks tile [0, numel) in order, in shards
// of the checkpoint; anything else is refused before it is written (and a
// read checks the same), also sizes whose sum would overflow.
TEST_F(CheckpointTest, AFormatTwoMapMustTileEachTensorOnce) {
  const std::string dir = StepDir(root_, 7);
  Manifest m;
  m.step = 7;
  m.world_size = 2;
  m.format_version = 2;
  for (int r = 0; r < 2; ++r) {
    ShardInfo info;
    ASSERT_TRUE(WriteShard(dir, r, MakeShard(r, 7), &info).ok());
    m.shards.push_back(info);
  }
  auto with = [&](TensorPlacement p) {
    Manifest x = m;
    x.tensors["optim/momentum_buffer.0"] = std::move(p);
    return WriteManifest(dir, x);
  };
  EXPECT_TRUE(with({"partitioned", 10, {{"rank-0.pt", 0, 5}, {"rank-1.pt", 5, 5}}}).ok());
  const int64_t big = int64_t{1} << 62;
  const std::vector<std::pair<TensorPlacement, std::string>> bad = {
      {{"partitioned", 10, {{"rank-0.pt", 0, 5}, {"rank-1.pt", 6, 4}}}, "does not follow the one before"},
      {{"partitioned", 10, {{"rank-0.pt", 0, 5}, {"rank-1.pt", 5, 4}}}, "the chunks hold 9 of its 10 elements"},
      {{"partitioned", 10, {{"rank-0.pt", 0, 5}, {"rank-2.pt", 5, 5}}}, "which is not a shard of the checkpoint"},
      {{"partitioned", 10, {{"rank-0.pt", 0, big}, {"rank-1.pt", big, big}}}, "inside its 10 elements"},
      {{"partitioned", -4, {}}, "has -4 elements"},
      {{"once", 10, {{"rank-0.pt", 0, 5}, {"rank-1.pt", 5, 5}}}, "is stored once, in 2 chunks"},
      {{"striped", 10, {{"rank-0.pt", 0, 10}}}, "has layout 'striped'"},
  };
  for (const auto& [p, want] : bad) {
    const Status st = with(p);
    EXPECT_NE(st.message().find(want), std::string::npos) << want << ": " << st.ToString();
  }
}

TEST_F(CheckpointTest, RewritingAStepRetractsTheOldManifest) {
  const std::string dir = Write(10);
  ASSERT_TRUE(WriteShard(dir, 1, MakeShard(1, 99), nullptr).ok());
  // The old manifest no longer vouches for the new shard: incomplete, not "corrupt".
  EXPECT_NE(VerifyCheckpoint(dir).message().find("incomplete checkpoint (no manifest.json)"), std::string::npos);
  Write(10);
  EXPECT_TRUE(VerifyCheckpoint(dir).ok());
}

TEST_F(CheckpointTest, ListIsNewestFirstWithReasons) {
  Write(10);
  const std::string bad = Write(30);
  fs::resize_file(bad + "/rank-1.pt", 5);
  ASSERT_TRUE(WriteShard(StepDir(root_, 20), 0, MakeShard(0, 20), nullptr).ok());
  fs::create_directories(root_ + "/not-a-step");
  auto list = ListCheckpoints(root_);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].step, 30);
  EXPECT_FALSE((*list)[0].valid);
  EXPECT_EQ((*list)[0].reason.rfind("rank-1.pt: size mismatch (manifest ", 0), 0u) << (*list)[0].reason;
  EXPECT_EQ((*list)[0].world_size, 2);
  EXPECT_EQ((*list)[1].step, 20);
  EXPECT_EQ((*list)[1].reason, "incomplete checkpoint (no manifest.json)");
  EXPECT_EQ((*list)[1].shards, 1);
  EXPECT_EQ((*list)[2].step, 10);
  EXPECT_TRUE((*list)[2].valid);
  EXPECT_EQ((*list)[2].shards, 2);
  EXPECT_GT((*list)[2].bytes, 0);
  EXPECT_EQ(*LatestValidCheckpoint(root_), StepDir(root_, 10));
  EXPECT_EQ(ListCheckpoints(root_ + "/nope").status().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointTest, PruneKeepsTheNewestValid) {
  for (int s : {10, 20, 30, 40, 50}) Write(s, 1);
  ASSERT_TRUE(PruneCheckpoints(root_, 2).ok());
  auto steps = [&] {
    std::vector<int64_t> v;
    auto list = ListCheckpoints(root_);  // named: the range-for must not outlive a temporary
    for (const auto& c : *list) v.push_back(c.step);
    return v;
  };
  EXPECT_EQ(steps(), (std::vector<int64_t>{50, 40}));
  // A newer damaged checkpoint does not count towards `keep` and is left alone.
  ASSERT_TRUE(WriteShard(StepDir(root_, 60), 0, MakeShard(0, 60), nullptr).ok());
  ASSERT_TRUE(PruneCheckpoints(root_, 1).ok());
  EXPECT_EQ(steps(), (std::vector<int64_t>{60, 50}));
  EXPECT_EQ(*LatestValidCheckpoint(root_), StepDir(root_, 50));
  for (const auto& e : fs::directory_iterator(root_))
    EXPECT_EQ(e.path().filename().string().rfind("step-", 0), 0u) << e.path();
}

// keep_period: the newest `keep` plus every multiple of the period, so an
// old good checkpoint survives however long the job runs after it.
TEST_F(CheckpointTest, PruneKeepsMultiplesOfTheKeepPeriod) {
  for (int s : {20, 40, 60, 80, 100, 120}) Write(s, 1);
  ASSERT_TRUE(PruneCheckpoints(root_, 2, 40).ok());
  std::vector<int64_t> steps;
  auto list = ListCheckpoints(root_);
  for (const auto& c : *list) steps.push_back(c.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{120, 100, 80, 40}));
}

// Each rank's model replica as its shard holds it: one flipped bit in one
// rank's copy of one tensor shows as that rank's hash, and only there.
TEST_F(CheckpointTest, ReplicasAreComparedTensorByTensor) {
  const std::string dir = StepDir(root_, 30);
  Manifest m;
  m.step = 30;
  m.world_size = 3;
  for (int r = 0; r < 3; ++r) {
    ShardData d = MakeShard(0, 30);  // the same replica on every rank
    d.tensors["optim/momentum/fc1.weight"] = at::full({4}, static_cast<float>(r));  // not compared
    if (r == 2) {
      at::Tensor w = d.tensors["model/fc1.weight"].detach().clone();
      int32_t bits;
      float v = w[3][3].item<float>();
      std::memcpy(&bits, &v, 4);
      bits ^= 1 << 20;
      std::memcpy(&v, &bits, 4);
      w[3][3] = v;
      d.tensors["model/fc1.weight"] = w;
    }
    ShardInfo info;
    ASSERT_TRUE(WriteShard(dir, r, d, &info).ok());
    m.shards.push_back(info);
  }
  ASSERT_TRUE(WriteManifest(dir, m).ok());
  auto reps = CompareReplicas(dir);
  ASSERT_TRUE(reps.ok()) << reps.status().message();
  ASSERT_EQ(reps->size(), 4u);  // the model tensors only, prefix stripped, in name order
  EXPECT_EQ((*reps)[0].name, "fc1.bias");
  for (const auto& t : *reps) {
    ASSERT_EQ(t.sha256.size(), 3u) << t.name;
    EXPECT_EQ(t.sha256[0], t.sha256[1]) << t.name;
    if (t.name == "fc1.weight") {
      EXPECT_EQ(t.numel, 128);
      EXPECT_NE(t.sha256[2], t.sha256[0]);
    } else {
      EXPECT_EQ(t.sha256[2], t.sha256[0]) << t.name;
    }
  }
  // A damaged shard is refused as a resume would refuse it.
  { std::ofstream(dir + "/rank-1.pt", std::ios::app) << "x"; }
  EXPECT_FALSE(CompareReplicas(dir).ok());
}

TEST_F(CheckpointTest, DiffSaysWhichPartsDifferAndWhere) {
  const std::string a = Write(40);
  // The same job's checkpoint of the same step, written by another run: the
  // same shards, except rank 1's optimiser state and rank 0's data position.
  const std::string b = StepDir(root_ + "/other", 40);
  Manifest m;
  m.step = 40;
  m.world_size = 2;
  for (int r = 0; r < 2; ++r) {
    ShardData d = MakeShard(r, 40);
    if (r == 1) d.tensors["optim/momentum/fc1.weight"] = d.tensors["optim/momentum/fc1.weight"] + 0.5f;
    if (r == 0) d.blobs["data_cursor"] = "0";
    if (r == 0) d.tensors.erase("optim/step");  // a fresh optimiser has no state yet
    ShardInfo info;
    ASSERT_TRUE(WriteShard(b, r, d, &info).ok());
    m.shards.push_back(info);
  }
  ASSERT_TRUE(WriteManifest(b, m).ok());

  auto same = DiffCheckpoints(a, a);
  ASSERT_TRUE(same.ok()) << same.status().message();
  for (const auto& p : same->parts) EXPECT_EQ(p.differ, 0) << p.part << ": NaN payloads compare by their bytes";

  auto d = DiffCheckpoints(a, b);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->world_size, 2);
  std::vector<std::string> order;
  for (const auto& p : d->parts) order.push_back(p.part);
  EXPECT_EQ(order, (std::vector<std::string>{"model", "optim", "rng", "loss_scaler", "data_cursor", "empty"}))
      << "the state's parts first, in a fixed order; others after, by name";
  const PartDiff& model = d->parts[0];
  EXPECT_EQ(model.entries, 4);
  EXPECT_EQ(model.differ, 0);
  const PartDiff& optim = d->parts[1];
  EXPECT_EQ(optim.entries, 4);
  EXPECT_EQ(optim.differ, 2);
  EXPECT_EQ(optim.missing, 1) << "optim/step: only one of the two holds it";
  EXPECT_EQ(optim.ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(optim.first_differing, "optim/momentum/fc1.weight");
  EXPECT_FLOAT_EQ(optim.max_abs_diff, 0.5);
  const PartDiff& cursor = d->parts[4];
  EXPECT_EQ(cursor.differ, 1);
  EXPECT_EQ(cursor.ranks, std::vector<int>{0});
  EXPECT_EQ(cursor.a_value, "2560");
  EXPECT_EQ(cursor.b_value, "0");

  // Only checkpoints of one job compare.
  const std::string three = Write(50, 3);
  EXPECT_NE(DiffCheckpoints(a, three).status().message().find("written by 2 ranks"), std::string::npos);
  { std::ofstream(b + "/rank-1.pt", std::ios::app) << "x"; }
  EXPECT_FALSE(DiffCheckpoints(a, b).ok()) << "each shard is verified as a resume would";
}

TEST_F(CheckpointTest, ShardBytesAreExactlyPickleSave) {
  // The streamed encoder must produce torch.save's format byte for byte.
  ShardData d;
  d.tensors["model/w"] = at::arange(1000, at::kFloat);
  d.blobs["step"] = "7";
  ShardInfo info;
  ASSERT_TRUE(WriteShard(StepDir(root_, 7), 0, d, &info).ok());
  c10::Dict<std::string, at::Tensor> dict;
  // detach(): a tensor held only by the dict, as WriteShard builds it (the
  // pickler memoizes tensors that have other owners, changing a few bytes).
  dict.insert("tensor/model/w", d.tensors["model/w"].detach());
  dict.insert("blob/step", at::tensor({'7'}, at::kByte));
  std::vector<char> want = torch::jit::pickle_save(c10::IValue(dict));
  std::ifstream in(StepDir(root_, 7) + "/rank-0.pt", std::ios::binary);
  std::vector<char> got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, want);
  EXPECT_EQ(info.bytes, static_cast<int64_t>(want.size()));
}

TEST_F(CheckpointTest, UndecodableShardIsRefusedNotThrown) {
  // Checksums match (the manifest vouches for these bytes) but they are not a
  // shard: LibTorch's error must come back as a Status.
  const std::string dir = StepDir(root_, 3);
  fs::create_directories(dir);
  std::ofstream(dir + "/rank-0.pt", std::ios::binary) << "PK\x03\x04 definitely not a zip";
  auto info = DescribeShard(dir, 0);
  ASSERT_TRUE(info.ok());
  Manifest m;
  m.step = 3;
  m.world_size = 1;
  m.shards = {*info};
  ASSERT_TRUE(WriteManifest(dir, m).ok());
  EXPECT_TRUE(VerifyCheckpoint(dir).ok());
  Status st = LoadShard(dir, 0).status();
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_EQ(st.message().rfind("checkpoint " + dir + "/rank-0.pt: cannot decode shard (", 0), 0u) << st.message();
}

TEST_F(CheckpointTest, GrownShardIsSizeMismatch) {
  const std::string dir = Write(40, 1);
  const auto size = fs::file_size(dir + "/rank-0.pt");
  std::ofstream(dir + "/rank-0.pt", std::ios::binary | std::ios::app) << "xx";
  EXPECT_EQ(VerifyCheckpoint(dir).message(), "checkpoint " + dir + "/rank-0.pt: size mismatch (manifest " +
                                                 std::to_string(size) + " bytes, file " + std::to_string(size + 2) +
                                                 " bytes): the shard has extra bytes" + kRollBack);
}

bool PythonHasTorch() { return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0; }

// Python reads an export as a dict {name: tensor}: a torch.save file with
// torch.load(weights_only=True), the restricted unpickler PyTorch defaults
// to since 2.6; a safetensors file by its layout alone (header length, JSON
// header, bytes), without the safetensors package.
constexpr const char* kReadExport = R"(import sys, json, math, struct, torch
path = sys.argv[1]
if path.endswith('.safetensors'):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    types = {'F32': torch.float32, 'F64': torch.float64, 'F16': torch.float16, 'BF16': torch.bfloat16,
             'I64': torch.int64, 'I32': torch.int32, 'U8': torch.uint8, 'BOOL': torch.bool}
    assert header.pop('__metadata__') == {'format': 'pt'}
    d, end = {}, 0
    for k, v in sorted(header.items(), key=lambda kv: kv[1]['data_offsets'][0]):
        a, b = v['data_offsets']
        assert a == end, (k, a, end)
        end = b
        d[k] = torch.frombuffer(bytearray(raw[8 + n + a:8 + n + b]), dtype=types[v['dtype']]).reshape(v['shape'])
    assert 8 + n + end == len(raw)
else:
    d = torch.load(path, weights_only=True)
f = lambda x: x if math.isfinite(x) else repr(x)
print(json.dumps({k: {'dtype': str(v.dtype), 'shape': list(v.shape),
                      'values': [f(x) for x in v.double().flatten().tolist()]} for k, v in d.items()}))
)";

TEST_F(CheckpointTest, ExportIsReadableByPythonAsTorchSaveAndAsSafetensors) {
  const std::string dir = Write(40);
  if (!PythonHasTorch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch; install python3-torch to run this check";
  const std::string script = root_ + "/read_export.py";
  std::ofstream(script) << kReadExport;
  for (const auto format : {StateDictFormat::kTorch, StateDictFormat::kSafetensors}) {
    const std::string out = root_ + (format == StateDictFormat::kTorch ? "/model.pt" : "/model.safetensors");
    SCOPED_TRACE(out);
    ASSERT_TRUE(ExportConsolidated(dir, out, format).ok());
    const std::string cmd = "/usr/bin/python3 " + script + " " + out + " 2>&1";
    std::string text;
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
    ASSERT_EQ(::pclose(p), 0) << text;
    nlohmann::json got = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(got.is_discarded()) << text;

    ShardData want = MakeShard(0, 40);
    std::map<std::string, std::pair<std::string, at::Tensor>> expect = {
        {"fc1.weight", {"torch.float32", want.tensors["model/fc1.weight"]}},
        {"fc1.bias", {"torch.bfloat16", want.tensors["model/fc1.bias"]}},
        {"fc2.weight", {"torch.float32", want.tensors["model/fc2.weight"]}},
        {"half", {"torch.float16", want.tensors["model/half"]}}};
    ASSERT_EQ(got.size(), expect.size()) << text;  // only model/ tensors, prefix stripped
    for (const auto& [name, e] : expect) {
      ASSERT_TRUE(got.contains(name)) << name;
      EXPECT_EQ(got[name]["dtype"], e.first) << name;
      EXPECT_EQ(got[name]["shape"].get<std::vector<int64_t>>(), e.second.sizes().vec()) << name;
      at::Tensor v = e.second.detach().to(at::kDouble).contiguous().flatten();
      const auto& vals = got[name]["values"];
      ASSERT_EQ(vals.size(), static_cast<size_t>(v.numel())) << name;
      for (int64_t i = 0; i < v.numel(); ++i) {
        const double x = v[i].item<double>();
        if (!std::isfinite(x)) {  // JSON has no NaN/inf: Python sends repr()
          EXPECT_EQ(vals[i], std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf") << name << "[" << i << "]";
          continue;
        }
        ASSERT_TRUE(vals[i].is_number()) << name << "[" << i << "]";
        EXPECT_EQ(vals[i].get<double>(), x) << name << "[" << i << "]";
        EXPECT_EQ(std::signbit(vals[i].get<double>()), std::signbit(x)) << name << "[" << i << "]";
      }
    }
  }
}

TEST(StateDictFile, TheFormatFollowsTheFileNameUnlessNamed) {
  EXPECT_EQ(*ParseStateDictFormat("auto", "m.safetensors"), StateDictFormat::kSafetensors);
  EXPECT_EQ(*ParseStateDictFormat("auto", "m.pt"), StateDictFormat::kTorch);
  EXPECT_EQ(*ParseStateDictFormat("torch", "m.safetensors"), StateDictFormat::kTorch);
  EXPECT_EQ(*ParseStateDictFormat("safetensors", "m.bin"), StateDictFormat::kSafetensors);
  EXPECT_NE(ParseStateDictFormat("onnx", "m").status().message().find("unknown export format \"onnx\""),
            std::string::npos);
}

TEST(StateDictFile, SafetensorsHeaderIsAlignedAndTheDataFollowsInNameOrder) {
  std::map<std::string, at::Tensor> t = {{"b", at::arange(3, at::kFloat)}, {"a", at::ones({2, 2}, at::kBFloat16)}};
  std::string bytes;
  ASSERT_TRUE(WriteStateDict(t, StateDictFormat::kSafetensors, [&](const char* p, size_t n) { bytes.append(p, n); })
                  .ok());
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 2 * 2 * 2 + 3 * 4);
  auto h = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(h["a"]["dtype"], "BF16");
  EXPECT_EQ(h["a"]["data_offsets"], nlohmann::json({0, 8}));
  EXPECT_EQ(h["b"]["shape"], nlohmann::json({3}));
  EXPECT_EQ(h["b"]["data_offsets"], nlohmann::json({8, 20}));
  float b2 = 0;
  std::memcpy(&b2, bytes.data() + 8 + n + 8 + 2 * sizeof(float), sizeof b2);
  EXPECT_EQ(b2, 2.0f);
  // A dtype neither format spells is refused by name.
  EXPECT_NE(WriteStateDict({{"z", at::zeros({2}, at::kComplexFloat)}}, StateDictFormat::kTorch,
                           [](const char*, size_t) {})
                .message()
                .find("tensor z has dtype"),
            std::string::npos);
  // So is a name that is not UTF-8, in either format, before a byte is written.
  for (const auto format : {StateDictFormat::kTorch, StateDictFormat::kSafetensors}) {
    std::string written;
    const Status st = WriteStateDict({{"w\xff", at::zeros({2})}}, format,
                                     [&](const char* p, size_t n) { written.append(p, n); });
    EXPECT_NE(st.message().find("not UTF-8"), std::string::npos) << st.message();
    EXPECT_TRUE(written.empty());
  }
}

TEST_F(CheckpointTest, ExportRefusesADamagedCheckpoint) {
  const std::string dir = Write(40);
  fs::resize_file(dir + "/rank-1.pt", 10);  // even a rank whose tensors are not exported
  Status st = ExportConsolidated(dir, root_ + "/model.pt");
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_FALSE(fs::exists(root_ + "/model.pt"));
}

// `latest` is the newest step with a manifest, damaged or not: the resume
// refuses it loudly. A save that never got its manifest is passed over.
TEST_F(CheckpointTest, LatestIsTheNewestWithAManifest) {
  EXPECT_EQ(LatestCheckpoint(root_).status().code(), StatusCode::kNotFound);
  Write(40);
  const std::string newest = Write(80);
  ASSERT_TRUE(DamageNewestShards(root_, 1, "bit_rot", 1, 12345, 0, nullptr).ok());
  fs::create_directories(root_ + "/step-120");  // a partial save: shards, no manifest
  std::ofstream(root_ + "/step-120/rank-0.pt") << "x";
  EXPECT_EQ(*LatestCheckpoint(root_), newest);
  EXPECT_FALSE(VerifyCheckpoint(newest).ok());
  EXPECT_EQ(*LatestValidCheckpoint(root_), root_ + "/step-40");
}

TEST_F(CheckpointTest, DamageReachesTheNewestShardsOfOneRankOnly) {
  const std::string old = Write(40), mid = Write(80), top = Write(120);
  std::string what;
  ASSERT_TRUE(DamageNewestShards(root_, 1, "truncated", 2, 7, 0, &what).ok());
  EXPECT_NE(what.find(top + "/rank-1.pt"), std::string::npos) << what;
  EXPECT_NE(what.find(mid + "/rank-1.pt"), std::string::npos) << what;
  for (const std::string& d : {top, mid}) {
    const std::string m = VerifyCheckpoint(d).message();
    EXPECT_NE(m.find("rank-1.pt: size mismatch"), std::string::npos) << m;
    EXPECT_NE(m.find("the shard is truncated"), std::string::npos) << m;
  }
  EXPECT_TRUE(VerifyCheckpoint(old).ok());
  // A flipped bit keeps the size and breaks the digest.
  const auto size = fs::file_size(old + "/rank-0.pt");
  ASSERT_TRUE(DamageNewestShards(root_, 0, "bit_rot", 3, 99, 0, nullptr).ok());
  EXPECT_EQ(fs::file_size(old + "/rank-0.pt"), size);
  EXPECT_NE(VerifyCheckpoint(old).message().find("rank-0.pt: SHA-256 mismatch"), std::string::npos);
  EXPECT_EQ(DamageNewestShards(root_, 5, "bit_rot", 1, 1, 0, nullptr).code(), StatusCode::kFailedPrecondition)
      << "no checkpoint holds rank 5's shard";
  EXPECT_EQ(DamageNewestShards(root_, 0, "melted", 1, 1, 0, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace firedrill::agent
