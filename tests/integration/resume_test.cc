// Checkpoint and resume through the real trainer, in fresh processes: the
// job runs N steps straight in one firedrill-train process, and N/2 + save in
// a second, then load + N/2 in a third. Losses (as hex floats) and final
// parameters (raw fp32 bytes) must be equal to the last bit. Also: a damaged
// shard and a checkpoint of a different model are refused with messages that
// name the file and the mismatch.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const std::string kTrain = std::string(FIREDRILL_BIN_DIR) + "/firedrill-train";

// A scenario whose job is `job` (YAML lines under `job:`); the rest is the
// minimum a scenario file needs.
std::string Scenario(const std::string& job) {
  return "id: t\ntitle: T\nbriefing: B\njob:\n" + job +
         "faults:\n"
         "  - kind: straggler\n"
         "    target: {host_of_rank: {draw: [0, 0]}}\n"
         "    trigger: {step: {draw: [10, 20]}}\n"
         "    params: {slowdown: 2.0}\n"
         "answer: {cause: straggler, culprit_ranks: [$faults.0.target.rank]}\n"
         "remediations:\n  - actions: [{replace_host: $faults.0.target.rank}]\n"
         "verify: {warmup_steps: 2, window_steps: 10, throughput_vs_baseline_min: 0.85, rank_step_skew_max: 1.2}\n"
         "rubric: {cause: 40, culprit: 20, fix: 30, time: 10, time_budget_s: 600, hint_cost: 5}\n";
}

const char* kGptFp16Job =
    "  world_size: 2\n"
    "  model: {kind: gpt-tiny, hidden: 32, layers: 2, heads: 2, seq_len: 32}\n"
    "  data: {batch_size: 4, num_workers: 1, variable_length: true}\n"
    "  optim: {kind: adamw, lr: 0.003, weight_decay: 0.01, warmup_steps: 4}\n"
    "  precision: fp16\n"
    "  loss_scale: {mode: dynamic, init_scale: 1048576, growth_interval: 3}\n"
    "  grad_accum_steps: 2\n"
    "  steps: 100\n"
    "  comm: {backend: gloo, bucket_mb: 0.02, timeout_s: 20}\n";

const char* kMlpJob =
    "  world_size: 2\n"
    "  model: {kind: mlp, input_dim: 16, hidden: 32, layers: 2, num_classes: 4}\n"
    "  data: {batch_size: 8, num_workers: 2}\n"
    "  optim: {kind: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.001}\n"
    "  precision: fp32\n"
    "  steps: 100\n"
    "  comm: {backend: gloo, timeout_s: 20}\n";

struct Outcome {
  int rc = -1;
  std::string output;
};

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fd-resume-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  void WriteScenario(const std::string& job) {
    std::ofstream(Path("s.yaml")) << Scenario(job);
  }

  Outcome Train(const std::string& args) {
    const std::string cmd = kTrain + " " + Path("s.yaml") + " --log-every 0 " + args + " 2>&1";
    Outcome r;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
    const int st = ::pclose(p);
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
  }

  static std::string Slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // Lines "rank step loss" of several files, in (rank, step) order.
  static std::vector<std::string> Losses(const std::vector<std::string>& files) {
    std::vector<std::string> lines;
    for (const auto& f : files) {
      std::istringstream in(Slurp(f));
      for (std::string l; std::getline(in, l);) lines.push_back(l);
    }
    std::sort(lines.begin(), lines.end(), [](const std::string& a, const std::string& b) {
      int ra, rb;
      long sa, sb;
      std::sscanf(a.c_str(), "%d %ld", &ra, &sa);
      std::sscanf(b.c_str(), "%d %ld", &rb, &sb);
      return std::make_pair(ra, sa) < std::make_pair(rb, sb);
    });
    return lines;
  }

  // The last "mem peak" rank 0 printed, in bytes (PyTorch's format_size).
  double RankZeroPeak(const std::string& args) {
    const std::string cmd = kTrain + " " + Path("s.yaml") + " --log-every 1 " + args + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return -1;
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    EXPECT_EQ(::pclose(p), 0) << out;
    const size_t at = out.rfind("mem peak ");
    if (at == std::string::npos) return -1;
    double v = 0;
    char unit[16] = {0};
    std::sscanf(out.c_str() + at + 9, "%lf %15s", &v, unit);
    const std::string u = unit;
    return v * (u == "KiB" ? 1024.0 : u == "MiB" ? 1024.0 * 1024 : u == "GiB" ? 1024.0 * 1024 * 1024 : 1.0);
  }

  // N straight vs N/2 + save | fresh process: load + N/2.
  void ExpectBitwiseResume(int steps, const std::string& extra = "") {
    const std::string ck = Path("ck");
    const std::string half = std::to_string(steps / 2);
    Outcome straight = Train("--steps " + std::to_string(steps) + " --losses " + Path("a.txt") + " --params " +
                         Path("a.bin") + extra);
    ASSERT_EQ(straight.rc, 0) << straight.output;
    Outcome first = Train("--steps " + half + " --set checkpoint.every=" + half + " --set checkpoint.dir=" + ck +
                      " --losses " + Path("b1.txt") + extra);
    ASSERT_EQ(first.rc, 0) << first.output;
    ASSERT_TRUE(fs::exists(ck + "/step-" + half + "/manifest.json"));
    Outcome second = Train("--steps " + half + " --set checkpoint.dir=" + ck +
                       " --set checkpoint.resume_from=latest --losses " + Path("b2.txt") + " --params " +
                       Path("b.bin") + extra);
    ASSERT_EQ(second.rc, 0) << second.output;
    EXPECT_NE(second.output.find("resumed from " + ck + "/step-" + half), std::string::npos) << second.output;

    const auto a = Losses({Path("a.txt")});
    const auto b = Losses({Path("b1.txt"), Path("b2.txt")});
    ASSERT_EQ(a.size(), static_cast<size_t>(2 * steps)) << "2 ranks x steps";
    EXPECT_EQ(a, b) << "per-step losses (hex) differ after resume";
    const std::string pa = Slurp(Path("a.bin")), pb = Slurp(Path("b.bin"));
    ASSERT_GT(pa.size(), 0u);
    EXPECT_TRUE(pa == pb) << "final parameters differ after resume";
  }

  fs::path dir_;
};

TEST_F(ResumeTest, GptTinyFp16AdamWAccumulationResumesBitwise) {
  // init_scale 2^20 overflows: steps 0-2 are skipped while the scale backs
  // off to 2^17, then growth every 3 clean steps moves it again, so the
  // scaler's state really has to travel with the checkpoint.
  WriteScenario(kGptFp16Job);
  ExpectBitwiseResume(12);
}

TEST_F(ResumeTest, MlpSgdMomentumResumesBitwise) {
  WriteScenario(kMlpJob);
  ExpectBitwiseResume(16);
}

// ZeRO-1 (agent/zero.h): the optimiser's state partitioned across the
// ranks, the checkpoint in format 2 (the parameters once, each rank's
// partition in its shard, the manifest's map of where each lies).
TEST_F(ResumeTest, AZeroOneCheckpointResumesBitwise) {
  std::string job = kMlpJob;
  const std::string sgd = "{kind: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.001}";
  job.replace(job.find(sgd), sgd.size(), "{kind: adamw, lr: 0.002, weight_decay: 0.01, zero_stage: 1}");
  WriteScenario(job);
  ExpectBitwiseResume(16);
  const std::string m = Slurp(Path("ck") + "/step-8/manifest.json");
  EXPECT_NE(m.find("\"format_version\": 2"), std::string::npos) << m;
  EXPECT_NE(m.find("\"layout\": \"partitioned\""), std::string::npos) << m;
}

// A ZeRO-1 checkpoint of 4 ranks read by 2 and back by 4: the partitions are
// cut anew from the chunks the manifest maps (torch.distributed.checkpoint's
// resharding), and the data position travels as the samples consumed.
TEST_F(ResumeTest, AZeroOneCheckpointReshardsToAnotherWorldSizeAndBack) {
  std::string job = kMlpJob;
  job.replace(job.find("world_size: 2"), 13, "world_size: 4");
  const std::string sgd = "{kind: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.001}";
  job.replace(job.find(sgd), sgd.size(), "{kind: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.001, zero_stage: 1}");
  WriteScenario(job);
  const std::string a = Path("a"), b = Path("b"), c = Path("c");
  ASSERT_EQ(Train("--steps 8 --set checkpoint.every=8 --set checkpoint.dir=" + a + " --losses " + Path("a.txt")).rc,
            0);
  // The uninterrupted run's next 8 steps, to hold the resharded run to.
  ASSERT_EQ(Train("--steps 16 --losses " + Path("straight.txt")).rc, 0);
  // 2 ranks, 2 micro-batches each: the same samples a step.
  Outcome two = Train("--steps 8 --set world_size=2 --set grad_accum_steps=2 --checkpoint-at-start "
                      "--set checkpoint.every=8 --set checkpoint.dir=" + b + " --set checkpoint.resume_from=" + a +
                      "/step-8 --losses " + Path("two.txt"));
  ASSERT_EQ(two.rc, 0) << two.output;
  EXPECT_NE(two.output.find("resharded " + a + "/step-8: its 4 ranks' partitions"), std::string::npos) << two.output;
  // Back at 4 ranks from what the 2-rank run put back (its step-8 save,
  // written before its first step): every part the same as the original
  // (the RNG of ranks 2 and 3, which the 2-rank run did not have, is rank
  // 0's: nothing in training draws from it).
  Outcome four = Train("--steps 1 --checkpoint-at-start --set checkpoint.every=100 --set checkpoint.dir=" + c +
                       " --set checkpoint.resume_from=" + b + "/step-8");
  ASSERT_EQ(four.rc, 0) << four.output;
  const std::string diff_cmd = std::string(FIREDRILL_BIN_DIR) + "/firedrill-ckpt diff " + a + "/step-8 " + c +
                               "/step-8 --json 2>&1";
  std::string text;
  FILE* p = ::popen(diff_cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
  ::pclose(p);
  const auto diff = nlohmann::json::parse(text, nullptr, false);
  ASSERT_TRUE(diff.is_object() && diff.contains("parts")) << text;
  std::map<std::string, nlohmann::json> parts;
  for (const auto& p : diff["parts"]) parts[p["part"].get<std::string>()] = p;
  for (const char* part : {"model", "optim", "loss_scaler", "data_cursor", "step"}) {
    ASSERT_TRUE(parts.count(part)) << part << ": " << text;
    EXPECT_EQ(parts[part]["differ"], 0) << part << " differs after 4 -> 2 -> 4: " << text;
    EXPECT_GT(parts[part]["entries"].get<int>(), 0) << part;
  }
  EXPECT_EQ(parts["rng"]["ranks"], nlohmann::json({2, 3})) << text;
  // The 2-rank run trains on from where the 4-rank one stopped: the same
  // samples and the same update, summed in another order.
  const auto straight = Losses({Path("straight.txt")});
  const auto resharded = Losses({Path("two.txt")});
  ASSERT_EQ(straight.size(), 4u * 16);
  ASSERT_EQ(resharded.size(), 2u * 8);
  auto mean_at = [](const std::vector<std::string>& lines, long step) {
    double sum = 0;
    int n = 0;
    for (const auto& l : lines) {
      int r;
      long s;
      char hex[64];
      if (std::sscanf(l.c_str(), "%d %ld %63s", &r, &s, hex) == 3 && s == step) sum += std::strtod(hex, nullptr), ++n;
    }
    return n > 0 ? sum / n : -1.0;
  };
  for (long s = 8; s < 16; ++s)
    EXPECT_NEAR(mean_at(resharded, s), mean_at(straight, s), 1e-4 * mean_at(straight, s)) << "step " << s;
}

TEST_F(ResumeTest, AZeroOneCheckpointNeedsAZeroOneJobAndACursorThatDivides) {
  std::string job = kMlpJob;
  const std::string sgd = "{kind: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.001}";
  job.replace(job.find(sgd), sgd.size(), "{kind: sgd, lr: 0.05, momentum: 0.9, zero_stage: 1}");
  WriteScenario(job);
  const std::string a = Path("a");
  ASSERT_EQ(Train("--steps 3 --set checkpoint.every=3 --set checkpoint.dir=" + a).rc, 0);
  Outcome replicated = Train("--steps 1 --set optim.zero_stage=0 --set checkpoint.resume_from=" + a + "/step-3");
  EXPECT_NE(replicated.rc, 0);
  EXPECT_NE(replicated.output.find("partitioned across its 2 ranks (ZeRO-1, format 2); resume it with "
                                   "optim.zero_stage=1"),
            std::string::npos)
      << replicated.output;
  // A per-rank load takes its own shard as its partition: fine at the
  // world size that wrote it, refused at another (where the resharding
  // load above carries on).
  Outcome same = Train("--steps 1 --set checkpoint.load=per_rank --set checkpoint.resume_from=" + a + "/step-3");
  EXPECT_EQ(same.rc, 0) << same.output;
  Outcome shrunk = Train("--steps 1 --set world_size=1 --set data.batch_size=16 --set checkpoint.load=per_rank "
                         "--set checkpoint.resume_from=" + a + "/step-3");
  EXPECT_NE(shrunk.rc, 0);
  EXPECT_NE(shrunk.output.find("saved with a data-parallel world size of 2 and this job has 1 ranks: rank-0.pt "
                               "holds 1/2 of the optimiser state, not the 1/1 this rank needs"),
            std::string::npos)
      << shrunk.output;
  Outcome resharded = Train("--steps 1 --set world_size=1 --set data.batch_size=16 --set checkpoint.load=resharded "
                            "--set checkpoint.resume_from=" + a + "/step-3");
  EXPECT_EQ(resharded.rc, 0) << resharded.output;
  // 3 steps x 2 ranks x 8 = 48 samples: not whole micro-batches of 4 x 5.
  Outcome odd = Train("--steps 1 --set world_size=4 --set data.batch_size=5 --set checkpoint.resume_from=" + a +
                      "/step-3");
  EXPECT_NE(odd.rc, 0);
  EXPECT_NE(odd.output.find("consumed 48 samples (2 ranks x 8 a micro-batch), not a whole number of this job's "
                            "micro-batches of 20"),
            std::string::npos)
      << odd.output;
}

// A reshard carries the data position as the samples consumed only where
// that names the same samples: within a finite dataset's first epoch (its
// epochs' length depends on the global batch), with the same data settings
// but for the batch's shape; a resume that leaves the data out carries
// nothing. And the manifest's map is taken only as ZeRO-1 writes it: two
// shards swapped in it would otherwise load each other's partitions.
TEST_F(ResumeTest, AReshardCarriesTheDataPositionOnlyWhereItNamesTheSameSamples) {
  std::string job = kMlpJob;
  const std::string sgd = "{kind: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.001}";
  job.replace(job.find(sgd), sgd.size(), "{kind: sgd, lr: 0.05, momentum: 0.9, zero_stage: 1}");
  const std::string data = "{batch_size: 8, num_workers: 2}";
  job.replace(job.find(data), data.size(), "{batch_size: 8, num_workers: 2, dataset_size: 64}");
  WriteScenario(job);
  const std::string a = Path("a"), b = Path("b");
  ASSERT_EQ(Train("--steps 3 --set checkpoint.every=3 --set checkpoint.dir=" + a).rc, 0);  // 48 of 64 samples
  ASSERT_EQ(Train("--steps 6 --set checkpoint.every=6 --set checkpoint.dir=" + b).rc, 0);  // 96: the second epoch
  const std::string one = "--steps 1 --set world_size=1 --set data.batch_size=16 ";
  Outcome first_epoch = Train(one + "--set checkpoint.resume_from=" + a + "/step-3");
  EXPECT_EQ(first_epoch.rc, 0) << first_epoch.output;
  Outcome second_epoch = Train(one + "--set checkpoint.resume_from=" + b + "/step-6");
  EXPECT_NE(second_epoch.rc, 0);
  EXPECT_NE(second_epoch.output.find("it consumed 96 samples of a dataset of 64, and how many steps an epoch has "
                                     "depends on the global batch: its data position cannot be carried over to 1 "
                                     "ranks"),
            std::string::npos)
      << second_epoch.output;
  Outcome reseeded = Train(one + "--set data.seed=99 --set checkpoint.resume_from=" + a + "/step-3");
  EXPECT_NE(reseeded.rc, 0);
  EXPECT_NE(reseeded.output.find("its data settings other than the batch differ from this job's"), std::string::npos)
      << reseeded.output;
  Outcome fresh_data = Train(one + "--set data.seed=99 --set checkpoint.restore=model,optim,rng "
                                   "--set checkpoint.resume_from=" + a + "/step-3");
  EXPECT_EQ(fresh_data.rc, 0) << fresh_data.output;

  const std::string manifest = a + "/step-3/manifest.json";
  auto m = nlohmann::json::parse(Slurp(manifest), nullptr, false);
  ASSERT_TRUE(m.is_object() && m.contains("tensors")) << Slurp(manifest);
  bool swapped = false;
  for (auto& [name, t] : m["tensors"].items()) {
    if (t["layout"] != "partitioned" || swapped) continue;
    ASSERT_EQ(t["chunks"].size(), 2u) << name;
    std::swap(t["chunks"][0]["file"], t["chunks"][1]["file"]);
    swapped = true;
  }
  ASSERT_TRUE(swapped) << Slurp(manifest);
  std::ofstream(manifest, std::ios::trunc) << m.dump(2);
  Outcome mixed = Train("--steps 1 --set checkpoint.resume_from=" + a + "/step-3");
  EXPECT_NE(mixed.rc, 0);
  EXPECT_NE(mixed.output.find("to chunks other than the 2 ranks' partitions, in rank order, that ZeRO-1 writes"),
            std::string::npos)
      << mixed.output;
}

// resume_without_state's signature against the same job resumed whole: a
// resume of the weights only logs what it did not load, and from there the
// run is another run. firedrill-ckpt diff (what `probe resume` reads) says
// which parts of the state the two runs' checkpoints of the same step hold
// differently; of the run resumed whole, none.
TEST_F(ResumeTest, AResumeOfTheWeightsOnlyLeavesTheRestFreshAndTheDiffSaysWhich) {
  std::string job = kMlpJob;
  const std::string sgd = "{kind: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.001}";
  job.replace(job.find(sgd), sgd.size(), "{kind: adamw, lr: 0.002, weight_decay: 0.01}");
  WriteScenario(job);
  const std::string a = Path("a"), b = Path("b"), c = Path("c");
  ASSERT_EQ(Train("--steps 16 --set checkpoint.every=8 --set checkpoint.keep=0 --set checkpoint.dir=" + a).rc, 0);
  const std::string eight = a + "/step-8";
  Outcome whole = Train("--steps 8 --set checkpoint.every=8 --set checkpoint.dir=" + b +
                        " --set checkpoint.resume_from=" + eight);
  ASSERT_EQ(whole.rc, 0) << whole.output;
  EXPECT_EQ(whole.output.find("not loaded"), std::string::npos) << whole.output;
  Outcome weights = Train("--steps 8 --set checkpoint.every=8 --set checkpoint.dir=" + c +
                          " --set checkpoint.resume_from=" + eight + " --set checkpoint.restore=model");
  ASSERT_EQ(weights.rc, 0) << weights.output;
  EXPECT_NE(weights.output.find("resumed from " + eight + " at step 8: loaded model (checkpoint.restore); not loaded: "
                                "optimiser state and loss scale, RNG, data position"),
            std::string::npos)
      << weights.output;

  auto diff = [&](const std::string& other) {
    const std::string cmd = std::string(FIREDRILL_BIN_DIR) + "/firedrill-ckpt diff " + a + "/step-16 " + other +
                            "/step-16 --json 2>&1";
    Outcome r;
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    while (p && (n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
    const int st = p ? ::pclose(p) : -1;
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
  };
  Outcome same = diff(b);
  EXPECT_EQ(same.rc, 0) << "a resume of all of it ends where the straight run did, bitwise: " << same.output;
  EXPECT_NE(same.output.find("\"same\": true"), std::string::npos) << same.output;
  Outcome lost = diff(c);
  EXPECT_EQ(lost.rc, 1) << lost.output;
  for (const char* part : {"\"model\"", "\"optim\"", "\"data_cursor\""}) {
    const size_t at = lost.output.find("\"part\": " + std::string(part));
    ASSERT_NE(at, std::string::npos) << part << "\n" << lost.output;
    const size_t differ = lost.output.rfind("\"differ\": ", at) ;
    ASSERT_NE(differ, std::string::npos);
    EXPECT_NE(lost.output.substr(differ, 12), "\"differ\": 0,") << part << " should differ:\n" << lost.output;
  }
}

TEST_F(ResumeTest, DamagedShardIsRefusedNamingTheFile) {
  // One rank, so the refusal is not followed by a peer's rendezvous timeout.
  std::string job = kMlpJob;
  job.replace(job.find("world_size: 2"), 13, "world_size: 1");
  WriteScenario(job);
  const std::string ck = Path("ck");
  ASSERT_EQ(Train("--steps 4 --set checkpoint.every=4 --set checkpoint.dir=" + ck).rc, 0);
  const std::string shard = ck + "/step-4/rank-0.pt";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) / 2));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);  // one bit
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) / 2));
    f.write(&c, 1);
  }
  Outcome r = Train("--steps 2 --set checkpoint.dir=" + ck + " --set checkpoint.resume_from=" + ck + "/step-4");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("rank-0.pt: SHA-256 mismatch"), std::string::npos) << r.output;

  // Truncated: refused on size before anything is decoded.
  fs::resize_file(shard, fs::file_size(shard) - 100);
  r = Train("--steps 2 --set checkpoint.dir=" + ck + " --set checkpoint.resume_from=" + ck + "/step-4");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("rank-0.pt"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("size"), std::string::npos) << r.output;
}

TEST_F(ResumeTest, CheckpointOfAnotherModelIsRefused) {
  std::string job = kMlpJob;
  job.replace(job.find("world_size: 2"), 13, "world_size: 1");
  WriteScenario(job);
  const std::string ck = Path("ck");
  ASSERT_EQ(Train("--steps 2 --set checkpoint.every=2 --set checkpoint.dir=" + ck).rc, 0);
  Outcome r = Train("--steps 2 --set model.hidden=64 --set checkpoint.dir=" + ck +
                " --set checkpoint.resume_from=latest");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("config hash mismatch"), std::string::npos) << r.output;
}

// Each rank is a process with its own tracked memory, as each GPU is its own
// device: rank 0's peak in a 2-rank job is rank 0's, not the sum of both
// ranks' (as it was when firedrill-train ran ranks as threads).
TEST_F(ResumeTest, MemoryIsMeasuredPerRank) {
  WriteScenario(kMlpJob);
  const double one = RankZeroPeak("--steps 6 --set world_size=1");
  const double two = RankZeroPeak("--steps 6 --set world_size=2");
  ASSERT_GT(one, 0);
  ASSERT_GT(two, 0);
  EXPECT_LT(two / one, 1.3) << "world 1: " << one << " B, world 2: " << two << " B";
}

}  // namespace
