// Checkpoint write throughput vs `dd ... conv=fsync` of the same size on the
// same disk, alternating (ckpt first on even rounds, dd first on odd) so that
// drift in the disk or the machine hits both alike. Reports medians.
//
//   ckpt_bench [--mb 64] [--rounds 7] [--dir DIR] [--cpu-dir /dev/shm]
//
// The checkpoint side is the whole WriteShard + WriteManifest path a rank pays:
// pickle encode, SHA-256, write, fsync, rename, directory fsyncs. The same
// write into tmpfs, and SHA-256 alone, show where the gap to dd goes.
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>
#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "agent/checkpoint.h"

namespace fa = firedrill::agent;
namespace fs = std::filesystem;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"checkpoint write throughput vs dd"};
  int mb = 64, rounds = 7;
  std::string dir = "/tmp/fd-ckpt-bench", cpu_dir = "/dev/shm";
  app.add_option("--mb", mb, "checkpoint size in MiB");
  app.add_option("--rounds", rounds, "alternating rounds");
  app.add_option("--dir", dir, "scratch directory on the disk to measure (emptied)");
  app.add_option("--cpu-dir", cpu_dir, "tmpfs for the no-disk breakdown (\"\" to skip)");
  CLI11_PARSE(app, argc, argv);

  fs::remove_all(dir);
  fs::create_directories(dir);
  // A realistic shard: several parameter-sized float tensors plus small blobs.
  fa::ShardData data;
  const int64_t per = static_cast<int64_t>(mb) * (1 << 20) / 4 / 16;
  for (int i = 0; i < 16; ++i) data.tensors["model/layer" + std::to_string(i) + ".weight"] = at::randn({per});
  data.blobs["rng"] = std::string(5056, 'r');
  data.blobs["data_cursor"] = "12345";

  std::vector<double> ckpt_mbs, dd_mbs, mem_s, hash_s;
  int64_t shard_bytes = 0;
  const std::string dd_file = dir + "/dd.bin";
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      const bool ckpt = (k == 0) == (r % 2 == 0);
      if (ckpt) {
        const std::string step_dir = fa::StepDir(dir, r);
        fa::Manifest m;
        m.step = r;
        m.world_size = 1;
        m.shards.resize(1);
        const double t0 = Now();
        firedrill::Status st = fa::WriteShard(step_dir, 0, data, &m.shards[0]);
        if (st.ok()) st = fa::WriteManifest(step_dir, m);
        const double t1 = Now();
        if (!st.ok()) {
          std::fprintf(stderr, "%s\n", st.ToString().c_str());
          return 1;
        }
        shard_bytes = m.shards[0].bytes;
        ckpt_mbs.push_back(shard_bytes / 1048576.0 / (t1 - t0));
        fs::remove_all(step_dir);
      } else {
        const int64_t count = (std::max<int64_t>(shard_bytes, int64_t(mb) << 20) + (1 << 20) - 1) >> 20;
        const std::string cmd = "dd if=/dev/zero of=" + dd_file + " bs=1M count=" + std::to_string(count) +
                                " conv=fsync status=none";
        const double t0 = Now();
        if (std::system(cmd.c_str()) != 0) return 1;
        const double t1 = Now();
        dd_mbs.push_back(count / (t1 - t0));
        fs::remove(dd_file);
      }
    }
  }
  // Where the time goes: the same checkpoint write into memory (tmpfs), i.e.
  // encode + SHA-256 + copy into the page cache with no disk behind it, and
  // SHA-256 alone over the same bytes.
  if (!cpu_dir.empty() && fs::is_directory(cpu_dir)) {
    const std::string shm = cpu_dir + "/fd-ckpt-bench";
    for (int r = 0; r < 3; ++r) {
      const std::string step_dir = fa::StepDir(shm, r);
      fa::ShardInfo info;
      const double t0 = Now();
      if (!fa::WriteShard(step_dir, 0, data, &info).ok()) return 1;
      const double t1 = Now();
      mem_s.push_back(t1 - t0);
      std::string bytes(static_cast<size_t>(info.bytes), '\0');
      FILE* f = std::fopen((step_dir + "/rank-0.pt").c_str(), "rb");
      if (!f || std::fread(bytes.data(), 1, bytes.size(), f) != bytes.size()) return 1;
      std::fclose(f);
      unsigned char md[EVP_MAX_MD_SIZE];
      unsigned int len = 0;
      const double t2 = Now();
      EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr);
      hash_s.push_back(Now() - t2);
      fs::remove_all(shm);
    }
  }
  fs::remove_all(dir);

  const double c = Median(ckpt_mbs), d = Median(dd_mbs);
  std::printf("checkpoint shard: %.1f MiB, %d rounds alternating with dd, medians\n", shard_bytes / 1048576.0, rounds);
  std::printf("  checkpoint write (encode+sha256+write+fsync+rename+manifest): %8.1f MiB/s\n", c);
  std::printf("  dd if=/dev/zero bs=1M conv=fsync:                            %8.1f MiB/s\n", d);
  std::printf("  ratio checkpoint/dd: %.2f\n", c / d);
  const double mib = shard_bytes / 1048576.0;
  if (!mem_s.empty())
    std::printf("  same write into %s (no disk): %.1f ms (%.0f MiB/s), of which sha256 alone %.1f ms (%.0f MiB/s)\n",
                cpu_dir.c_str(), Median(mem_s) * 1e3, mib / Median(mem_s), Median(hash_s) * 1e3, mib / Median(hash_s));
  std::printf("  per round ckpt MiB/s:");
  for (double v : ckpt_mbs) std::printf(" %.0f", v);
  std::printf("\n  per round dd   MiB/s:");
  for (double v : dd_mbs) std::printf(" %.0f", v);
  std::printf("\n");
  return 0;
}
