// Sharded checkpoints: see checkpoint.h for the layout and the write protocol.
#include "agent/checkpoint.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <iterator>
#include <set>
#include <thread>

namespace firedrill::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormatName = "firedrill-checkpoint";
constexpr const char* kRollBack = "roll back to an earlier checkpoint with `firedrill-ckpt list`";
constexpr const char* kTensorKey = "tensor/";
constexpr const char* kBlobKey = "blob/";
constexpr size_t kHashChunk = 4 << 20;

std::string Errno() { return std::strerror(errno); }
std::string BaseName(const std::string& p) { return fs::path(p).filename().string(); }
std::string Join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }
std::string Short(const std::string& hex) { return hex.substr(0, 8) + "\u2026"; }

// One thing wrong with a checkpoint. Kept structured so that the listing can
// show the short form while load/verify return the full sentence:
// "checkpoint FILE: WHAT: WHY; ADVICE".
struct Problem {
  StatusCode code = StatusCode::kOk;
  std::string file, what, why, advice = kRollBack;
  bool ok() const { return code == StatusCode::kOk; }
  Status status() const {
    if (ok()) return Status::Ok();
    std::string m = "checkpoint " + file + ": " + what;
    if (!why.empty()) m += ": " + why;
    if (!advice.empty()) m += "; " + advice;
    return Status(code, m);
  }
};
Problem Bad(StatusCode code, std::string file, std::string what, std::string why) {
  return Problem{code, std::move(file), std::move(what), std::move(why)};
}

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    ok_ = ctx_ && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1;
  }
  void Update(const void* p, size_t n) { ok_ = ok_ && EVP_DigestUpdate(ctx_.get(), p, n) == 1; }
  std::string HexDigest() {  // "" if OpenSSL failed
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!ok_ || EVP_DigestFinal_ex(ctx_.get(), md, &len) != 1) return "";
    static const char* kHex = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; ++i) out += {kHex[md[i] >> 4], kHex[md[i] & 15]};
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
  bool ok_ = false;
};

class Fd {  // closes on every early return
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { if (fd_ >= 0) ::close(fd_); }
  int get() const { return fd_; }
  int release() { int f = fd_; fd_ = -1; return f; }
 private:
  int fd_;
};

Status FsyncDir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) return Internal("fsync of directory " + dir + " failed: " + Errno());
  return Status::Ok();
}

Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Internal("cannot write " + path + ": " + Errno());
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// Streams bytes into the temp file, hashing them on the way, and asks the
// kernel to start writeback of each finished chunk so the disk works while the
// CPU encodes and hashes the next one (the final fsync then waits for little).
// After the first error it swallows further bytes: LibTorch's zip writer must
// never see a failed write, since its destructor would rethrow (terminate).
class FileSink {
 public:
  FileSink(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void Write(const char* p, size_t n) {
    while (n > 0 && st_.ok()) {
      const size_t k = std::min(n, kHashChunk);
      sha_.Update(p, k);
      st_ = WriteAll(fd_, p, k, path_);
      p += k;
      n -= k;
      bytes_ += static_cast<int64_t>(k);
#ifdef __linux__
      if (bytes_ - flushed_ >= static_cast<int64_t>(kHashChunk)) {
        ::sync_file_range(fd_, flushed_, bytes_ - flushed_, SYNC_FILE_RANGE_WRITE);  // a hint; fsync decides
        flushed_ = bytes_;
      }
#endif
    }
  }
  const Status& status() const { return st_; }
  int64_t bytes() const { return bytes_; }
  std::string HexDigest() { return sha_.HexDigest(); }

 private:
  int fd_;
  std::string path_;
  Sha256 sha_;
  Status st_;
  int64_t bytes_ = 0, flushed_ = 0;
};

// Atomic replace: temp file in the same directory (rename is atomic only
// within one file system), fsync, rename, fsync of the directory so the new
// name itself survives a crash. `before_rename` runs after the data is durable
// and before it becomes visible (WriteShard uses it to retract a stale manifest).
// `info` (may be null) receives the size and SHA-256 of what was written.
Status WriteFileAtomic(const std::string& path, const std::function<Status(FileSink&)>& produce,
                       const std::function<Status()>& before_rename = nullptr, ShardInfo* info = nullptr) {
  static std::atomic<uint64_t> counter{0};
  const std::string dir = fs::path(path).parent_path().string();
  const std::string tmp = Join(dir, "." + BaseName(path) + ".tmp." + std::to_string(::getpid()) + "." +
                                        std::to_string(counter++));
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) return Internal("cannot create " + tmp + ": " + Errno());
  FileSink sink(fd.get(), tmp);
  Status st = produce(sink);
  if (st.ok()) st = sink.status();
  if (st.ok() && ::fsync(fd.get()) != 0) st = Internal("fsync of " + tmp + " failed: " + Errno());
  if (st.ok() && ::close(fd.release()) != 0) st = Internal("close of " + tmp + " failed: " + Errno());
  if (st.ok() && info) {
    info->bytes = sink.bytes();
    info->sha256 = sink.HexDigest();
    if (info->sha256.empty()) st = Internal("SHA-256 failed (OpenSSL)");
  }
  if (st.ok() && before_rename) st = before_rename();
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = Internal("cannot rename " + tmp + " to " + path + ": " + Errno());
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return FsyncDir(dir.empty() ? "." : dir);
}

// Reads a whole file, hashing it. With `keep`, the bytes are kept there (one
// buffer of expect+1 bytes, so growth past `expect` shows as a size change).
Status ReadHashed(const std::string& path, std::string* hex, int64_t* bytes, std::vector<char>* keep = nullptr,
                  int64_t expect = 0) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return (errno == ENOENT ? NotFound : Internal)("cannot open " + path + ": " + Errno());
  std::vector<char> scratch;
  std::vector<char>& buf = keep ? *keep : scratch;
  const size_t cap = keep ? static_cast<size_t>(expect) + 1 : kHashChunk;
  buf.resize(cap);
  Sha256 sha;
  size_t off = 0;
  int64_t total = 0;
  for (;;) {
    if (off == cap && keep) break;
    if (off == cap) off = 0;
    ssize_t r = ::read(fd.get(), buf.data() + off, cap - off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Internal("cannot read " + path + ": " + Errno());
    if (r == 0) break;
    sha.Update(buf.data() + off, static_cast<size_t>(r));
    off += static_cast<size_t>(r);
    total += r;
  }
  if (keep) buf.resize(off);
  *hex = sha.HexDigest();
  if (hex->empty()) return Internal("SHA-256 of " + path + " failed (OpenSSL)");
  if (bytes) *bytes = total;
  return Status::Ok();
}

std::optional<int64_t> ParseStepName(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5 || name.size() > 5 + 18) return std::nullopt;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(name.data() + 5, name.data() + name.size(), v);
  if (ec != std::errc() || p != name.data() + name.size()) return std::nullopt;
  return v;
}

// step-<N> directories under root, newest first.
StatusOr<std::vector<std::pair<int64_t, std::string>>> StepDirs(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return NotFound("checkpoint root " + root + ": no such directory");
  std::vector<std::pair<int64_t, std::string>> out;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    auto step = ParseStepName(it->path().filename().string());
    std::error_code dec;
    if (step && it->is_directory(dec)) out.emplace_back(*step, it->path().string());
  }
  if (ec) return Internal("cannot list " + root + ": " + ec.message());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

bool IsHex64(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// ordered_json: the manifest reads top-down for a human (format first, shards last).
nlohmann::ordered_json ToJson(const Manifest& m) {
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  for (const auto& s : m.shards) shards.push_back({{"file", s.file}, {"rank", s.rank}, {"bytes", s.bytes}, {"sha256", s.sha256}});
  nlohmann::ordered_json out = {{"format", kFormatName},          {"format_version", m.format_version},
                                {"step", m.step},                 {"world_size", m.world_size},
                                {"config_hash", m.config_hash},   {"created", FormatUtc(m.created_unix_ms)},
                                {"created_unix_ms", m.created_unix_ms}, {"shards", shards}};
  if (!m.tensors.empty()) {
    nlohmann::ordered_json tensors = nlohmann::ordered_json::object();
    for (const auto& [name, p] : m.tensors) {
      nlohmann::ordered_json chunks = nlohmann::ordered_json::array();
      for (const auto& c : p.chunks) chunks.push_back({{"file", c.file}, {"offset", c.offset}, {"numel", c.numel}});
      tensors[name] = {{"layout", p.layout}, {"numel", p.numel}, {"chunks", chunks}};
    }
    out["tensors"] = tensors;
  }
  return out;
}

// Structural checks shared by the writer and the reader; "" if fine.
std::string ValidateManifest(const Manifest& m) {
  if (m.world_size < 1) return "world_size " + std::to_string(m.world_size) + " is not positive";
  if (m.step < 0) return "step " + std::to_string(m.step) + " is negative";
  if (m.shards.size() != static_cast<size_t>(m.world_size))
    return "lists " + std::to_string(m.shards.size()) + " shards for world size " + std::to_string(m.world_size);
  std::set<int> ranks;
  for (const auto& s : m.shards) {
    if (s.rank < 0 || s.rank >= m.world_size || !ranks.insert(s.rank).second)
      return "shard rank " + std::to_string(s.rank) + " is out of range or listed twice";
    if (s.file != ShardFileName(s.rank)) return "shard of rank " + std::to_string(s.rank) + " is named '" + s.file + "'";
    if (s.bytes < 0 || !IsHex64(s.sha256)) return "entry for " + s.file + " has a bad size or SHA-256";
  }
  if (m.format_version >= 2 && m.tensors.empty()) return "format 2 without a tensor map";
  if (m.format_version < 2 && !m.tensors.empty()) return "a tensor map in format " + std::to_string(m.format_version);
  for (const auto& [name, p] : m.tensors) {
    if (p.layout != "once" && p.layout != "partitioned")
      return "tensor " + name + " has layout '" + p.layout + "' (once or partitioned)";
    if (p.layout == "once" && p.chunks.size() != 1) return "tensor " + name + " is stored once, in " +
                                                          std::to_string(p.chunks.size()) + " chunks";
    if (p.numel < 0) return "tensor " + name + " has " + std::to_string(p.numel) + " elements";
    int64_t next = 0;  // the chunks tile [0, numel) in order
    for (const auto& c : p.chunks) {
      const bool listed = std::any_of(m.shards.begin(), m.shards.end(), [&](const ShardInfo& s) { return s.file == c.file; });
      if (!listed) return "tensor " + name + " has a chunk in '" + c.file + "', which is not a shard of the checkpoint";
      if (c.offset != next || c.numel < 0 || c.numel > p.numel - next)
        return "tensor " + name + ": chunk at " + std::to_string(c.offset) + " (" + std::to_string(c.numel) +
               " elements) does not follow the one before, which ends at " + std::to_string(next) +
               ", inside its " + std::to_string(p.numel) + " elements";
      next += c.numel;
    }
    if (next != p.numel) return "tensor " + name + ": the chunks hold " + std::to_string(next) + " of its " +
                                std::to_string(p.numel) + " elements";
  }
  return "";
}

Problem ParseManifest(const std::string& step_dir, Manifest* out) {
  const std::string path = Join(step_dir, kManifestFileName);
  std::error_code ec;
  if (!fs::is_directory(step_dir, ec))
    return Problem{StatusCode::kNotFound, step_dir, "no such checkpoint directory", "",
                   "list checkpoints with `firedrill-ckpt list ROOT`"};
  if (!fs::exists(path, ec))
    return Bad(StatusCode::kDataLoss, step_dir, "incomplete checkpoint (no manifest.json)", "the write did not finish");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Bad(StatusCode::kInternal, path, "cannot open manifest (" + Errno() + ")", "");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string corrupt = "the manifest is corrupt";
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return Bad(StatusCode::kDataLoss, path, "unreadable manifest (" + std::string(e.what()) + ")", corrupt);
  }
  Manifest m;
  try {  // json::at/get throw on a missing or wrongly typed field
    if (j.at("format").get<std::string>() != kFormatName) throw std::runtime_error("format is not " + std::string(kFormatName));
    m.format_version = j.at("format_version").get<int>();
    m.step = j.at("step").get<int64_t>();
    m.world_size = j.at("world_size").get<int>();
    m.config_hash = j.at("config_hash").get<std::string>();
    m.created_unix_ms = j.at("created_unix_ms").get<int64_t>();
    for (const auto& s : j.at("shards"))
      m.shards.push_back({s.at("file").get<std::string>(), s.at("rank").get<int>(), s.at("bytes").get<int64_t>(),
                          s.at("sha256").get<std::string>()});
    if (j.contains("tensors")) {
      for (const auto& [name, t] : j.at("tensors").items()) {
        TensorPlacement p;
        p.layout = t.at("layout").get<std::string>();
        p.numel = t.at("numel").get<int64_t>();
        for (const auto& c : t.at("chunks"))
          p.chunks.push_back({c.at("file").get<std::string>(), c.at("offset").get<int64_t>(), c.at("numel").get<int64_t>()});
        m.tensors[name] = std::move(p);
      }
    }
  } catch (const std::exception& e) {
    return Bad(StatusCode::kDataLoss, path, "malformed manifest (" + std::string(e.what()) + ")", corrupt);
  }
  if (m.format_version > kCheckpointFormatVersion)
    return Problem{StatusCode::kFailedPrecondition, path,
                   "format version " + std::to_string(m.format_version) + " is newer than this build reads (" +
                       std::to_string(kCheckpointFormatVersion) + ")", "", "use a newer firedrill"};
  if (std::string why = ValidateManifest(m); !why.empty())
    return Bad(StatusCode::kDataLoss, path, "malformed manifest (" + why + ")", corrupt);
  if (auto dir_step = ParseStepName(BaseName(step_dir)); dir_step && *dir_step != m.step)
    return Bad(StatusCode::kDataLoss, path,
               "step mismatch (directory step-" + std::to_string(*dir_step) + ", manifest " + std::to_string(m.step) + ")",
               "the manifest belongs to another checkpoint");
  *out = std::move(m);
  return {};
}

Problem SizeProblem(const std::string& path, int64_t want, int64_t got) {
  return Bad(StatusCode::kDataLoss, path,
             "size mismatch (manifest " + std::to_string(want) + " bytes, file " + std::to_string(got) + " bytes)",
             got < want ? "the shard is truncated" : "the shard has extra bytes");
}
Problem ShaProblem(const std::string& path, const std::string& want, const std::string& got) {
  return Bad(StatusCode::kDataLoss, path, "SHA-256 mismatch (manifest " + Short(want) + ", file " + Short(got) + ")",
             "the shard is corrupt");
}

// Presence, size and SHA-256 of one listed shard. With `contents`, the file is
// read into it and hashed from memory (LoadShard decodes exactly these bytes).
Problem CheckShard(const std::string& step_dir, const ShardInfo& s, std::vector<char>* contents) {
  const std::string path = Join(step_dir, s.file);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return errno == ENOENT ? Bad(StatusCode::kDataLoss, path, "missing shard (listed in manifest.json, not on disk)",
                                 "a rank's write was lost or the file was deleted")
                           : Bad(StatusCode::kInternal, path, "cannot stat (" + Errno() + ")", "");
  if (st.st_size != s.bytes) return SizeProblem(path, s.bytes, st.st_size);  // no need to read it
  std::string hex;
  int64_t n = 0;
  if (Status rs = ReadHashed(path, &hex, &n, contents, s.bytes); !rs.ok()) return Bad(rs.code(), path, rs.message(), "");
  if (n != s.bytes) return SizeProblem(path, s.bytes, n);  // changed while we read
  if (hex != s.sha256) return ShaProblem(path, s.sha256, hex);
  return {};
}

Problem VerifyProblem(const std::string& step_dir, Manifest* manifest) {
  Problem p = ParseManifest(step_dir, manifest);
  for (size_t i = 0; p.ok() && i < manifest->shards.size(); ++i) p = CheckShard(step_dir, manifest->shards[i], nullptr);
  return p;
}

// Short form for listings: the step column already names the directory.
std::string Reason(const Problem& p, const std::string& step_dir) {
  return p.file == step_dir ? p.what : BaseName(p.file) + ": " + p.what;
}

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

// What torch::jit::pickle_save does (same bytes, so Python's torch.load reads
// it), but streamed: pickle_save grows one std::vector to the whole file,
// which measured ~8x slower than the encoding itself for a 64 MiB shard.
// Tensor data goes from the tensors' own storage straight into the sink.
Status Encode(const c10::Dict<std::string, at::Tensor>& dict, FileSink& sink) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamWriter> writer;
  try {
    std::vector<char> pickle;
    torch::jit::Pickler pickler([&](const char* p, size_t n) { pickle.insert(pickle.end(), p, p + n); });
    pickler.protocol();
    pickler.pushIValue(c10::IValue(dict));
    pickler.stop();
    writer = std::make_unique<caffe2::serialize::PyTorchStreamWriter>([&](const void* p, size_t n) {
      sink.Write(static_cast<const char*>(p), n);
      return n;
    });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), *writer);
    writer->writeEndOfFile();
  } catch (const std::exception& e) {  // c10::Error derives from std::exception
    // An unfinished writer's destructor finalises and may throw again: leak it
    // on this (rare) path rather than terminate.
    if (writer && !writer->finalized()) (void)writer.release();
    return Internal("cannot serialize checkpoint shard: " + FirstLine(e.what()));
  }
  return sink.status();
}

}  // namespace

std::string StepDir(const std::string& root, int64_t step) { return Join(root, "step-" + std::to_string(step)); }
std::string ShardFileName(int rank) { return "rank-" + std::to_string(rank) + ".pt"; }

std::string FormatUtc(int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Sha256Hex(const void* data, size_t n) {
  Sha256 sha;
  sha.Update(data, n);
  return sha.HexDigest();
}

StatusOr<std::string> Sha256File(const std::string& path) {
  std::string hex;
  FD_RETURN_IF_ERROR(ReadHashed(path, &hex, nullptr));
  return hex;
}

Status WriteShard(const std::string& step_dir, int rank, const ShardData& data, ShardInfo* out) {
  if (rank < 0) return InvalidArgument("WriteShard: rank " + std::to_string(rank) + " is negative");
  c10::Dict<std::string, at::Tensor> dict;
  try {
    for (const auto& [name, t] : data.tensors) {
      if (!t.defined() || t.layout() != at::kStrided)
        return InvalidArgument("checkpoint tensor '" + name + "' is undefined or not a dense tensor");
      at::Tensor c = t.detach();
      if (!c.device().is_cpu()) c = c.cpu();
      // Compact and unaliased: see the header.
      if (!c.is_contiguous() || c.storage_offset() != 0 || c.storage().nbytes() != c.nbytes())
        c = c.clone(at::MemoryFormat::Contiguous);
      dict.insert(kTensorKey + name, c);
    }
    for (const auto& [name, bytes] : data.blobs) {
      at::Tensor b = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
      if (!bytes.empty()) std::memcpy(b.data_ptr(), bytes.data(), bytes.size());
      dict.insert(kBlobKey + name, b);
    }
  } catch (const std::exception& e) {
    return Internal("cannot prepare checkpoint shard: " + FirstLine(e.what()));
  }
  std::error_code ec;
  fs::create_directories(step_dir, ec);
  if (ec) return Internal("cannot create checkpoint directory " + step_dir + ": " + ec.message());
  const std::string parent = fs::path(step_dir).parent_path().string();
  FD_RETURN_IF_ERROR(FsyncDir(parent.empty() ? "." : parent));  // the step dir's own entry

  // Retract a manifest left by an earlier write of this step before our new
  // shard replaces the one it vouched for (see the header).
  auto retract_manifest = [&]() -> Status {
    const std::string m = Join(step_dir, kManifestFileName);
    if (::unlink(m.c_str()) == 0) return FsyncDir(step_dir);
    return errno == ENOENT ? Status::Ok() : Internal("cannot remove stale " + m + ": " + Errno());
  };
  ShardInfo info{ShardFileName(rank), rank, 0, ""};
  FD_RETURN_IF_ERROR(WriteFileAtomic(
      Join(step_dir, info.file), [&](FileSink& sink) { return Encode(dict, sink); }, retract_manifest, &info));
  if (out) *out = std::move(info);
  return Status::Ok();
}

StatusOr<ShardInfo> DescribeShard(const std::string& step_dir, int rank) {
  ShardInfo info{ShardFileName(rank), rank, 0, ""};
  FD_RETURN_IF_ERROR(ReadHashed(Join(step_dir, info.file), &info.sha256, &info.bytes));
  return info;
}

Status WriteManifest(const std::string& step_dir, const Manifest& manifest) {
  Manifest m = manifest;
  if (m.created_unix_ms == 0)
    m.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
  std::sort(m.shards.begin(), m.shards.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  if (std::string why = ValidateManifest(m); !why.empty())
    return InvalidArgument("manifest for " + step_dir + ": " + why);
  if (auto dir_step = ParseStepName(BaseName(step_dir)); dir_step && *dir_step != m.step)
    return InvalidArgument("manifest for " + step_dir + ": step " + std::to_string(m.step) + " does not match the directory");
  for (const auto& s : m.shards) {  // never vouch for a shard that is not there
    struct stat st;
    const std::string path = Join(step_dir, s.file);
    if (::stat(path.c_str(), &st) != 0) return FailedPrecondition("manifest for " + step_dir + ": shard " + path + " is missing");
    if (st.st_size != s.bytes)
      return FailedPrecondition("manifest for " + step_dir + ": shard " + path + " has " + std::to_string(st.st_size) +
                                " bytes, the manifest says " + std::to_string(s.bytes));
  }
  const std::string text = ToJson(m).dump(2) + "\n";
  return WriteFileAtomic(Join(step_dir, kManifestFileName), [&](FileSink& sink) {
    sink.Write(text.data(), text.size());
    return Status::Ok();
  });
}

StatusOr<Manifest> ReadManifest(const std::string& step_dir) {
  Manifest m;
  FD_RETURN_IF_ERROR(ParseManifest(step_dir, &m).status());
  return m;
}

StatusOr<ShardData> LoadShard(const std::string& step_dir, int rank, const LoadExpect& expect) {
  Manifest m;
  FD_RETURN_IF_ERROR(ParseManifest(step_dir, &m).status());
  if (expect.world_size > 0 && expect.world_size != m.world_size)
    return Problem{StatusCode::kFailedPrecondition, step_dir,
                   "world size mismatch (checkpoint " + std::to_string(m.world_size) + " ranks, job " +
                       std::to_string(expect.world_size) + ")",
                   "each rank resumes its own data cursor and RNG state",
                   "run the job with world_size " + std::to_string(m.world_size) + " to resume from it"}.status();
  if (!expect.config_hash.empty() && expect.config_hash != m.config_hash)
    return Problem{StatusCode::kFailedPrecondition, step_dir,
                   "config hash mismatch (checkpoint " + m.config_hash + ", job " + expect.config_hash + ")",
                   "it was written by a differently configured job",
                   "resume with the configuration that wrote it, or pick another with `firedrill-ckpt list`"}.status();
  auto it = std::find_if(m.shards.begin(), m.shards.end(), [&](const ShardInfo& s) { return s.rank == rank; });
  if (it == m.shards.end())
    return Problem{StatusCode::kInvalidArgument, step_dir,
                   "no shard for rank " + std::to_string(rank) + " (checkpoint has " + std::to_string(m.world_size) + " ranks)",
                   "", ""}.status();
  std::vector<char> bytes;
  FD_RETURN_IF_ERROR(CheckShard(step_dir, *it, &bytes).status());

  const std::string path = Join(step_dir, it->file);
  ShardData out;
  try {
    c10::IValue v = torch::jit::pickle_load(bytes);
    if (!v.isGenericDict()) throw std::runtime_error("top level is not a dict");
    for (const auto& e : v.toGenericDict()) {
      if (!e.key().isString() || !e.value().isTensor()) throw std::runtime_error("entry is not string -> tensor");
      const std::string& key = e.key().toStringRef();
      const at::Tensor& t = e.value().toTensor();
      if (key.rfind(kTensorKey, 0) == 0) {
        out.tensors[key.substr(std::strlen(kTensorKey))] = t;
      } else if (key.rfind(kBlobKey, 0) == 0 && t.scalar_type() == at::kByte && t.dim() == 1 && t.is_contiguous()) {
        out.blobs[key.substr(std::strlen(kBlobKey))] =
            std::string(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()));
      } else {
        throw std::runtime_error("unexpected entry '" + key + "'");
      }
    }
  } catch (const std::exception& e) {  // includes c10::Error
    return Bad(StatusCode::kDataLoss, path, "cannot decode shard (" + FirstLine(e.what()) + ")",
               "its checksum matches, so it was written corrupt or by something else").status();
  }
  return out;
}

Status VerifyCheckpoint(const std::string& step_dir) {
  Manifest m;
  return VerifyProblem(step_dir, &m).status();
}

StatusOr<std::vector<CheckpointSummary>> ListCheckpoints(const std::string& root) {
  auto dirs = StepDirs(root);
  FD_RETURN_IF_ERROR(dirs.status());
  std::vector<CheckpointSummary> out;
  for (const auto& [step, dir] : *dirs) {
    CheckpointSummary s;
    s.step = step;
    s.dir = dir;
    Manifest m;
    Problem p = VerifyProblem(dir, &m);
    s.valid = p.ok();
    std::error_code mec;
    s.manifest = fs::exists(Join(dir, kManifestFileName), mec);
    if (!p.ok()) {
      s.reason = Reason(p, dir);
      s.error = p.status().message();
    }
    s.world_size = m.world_size;
    s.created_unix_ms = m.created_unix_ms;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code fec;
      if (name.rfind("rank-", 0) == 0 && name.size() > 3 && name.substr(name.size() - 3) == ".pt") {
        s.bytes += static_cast<int64_t>(it->file_size(fec));
        if (m.shards.empty()) ++s.shards;  // no readable manifest: count files on disk
      }
    }
    if (!m.shards.empty()) s.shards = static_cast<int>(m.shards.size());
    out.push_back(std::move(s));
  }
  return out;
}

StatusOr<std::string> LatestCheckpoint(const std::string& root) {
  auto dirs = StepDirs(root);
  FD_RETURN_IF_ERROR(dirs.status());
  for (const auto& [step, dir] : *dirs) {
    std::error_code ec;
    if (fs::exists(Join(dir, kManifestFileName), ec)) return dir;
  }
  return NotFound("no checkpoint with a manifest under " + root +
                  (dirs->empty() ? std::string(" (none written)") : " (" + std::to_string(dirs->size()) +
                                                                       " step directories, none complete)"));
}

namespace {
Status DamageFile(const std::string& path, const std::string& damage, uint64_t seed, std::string* what) {
  std::error_code ec;
  const auto size = static_cast<int64_t>(fs::file_size(path, ec));
  if (ec) return Internal("cannot stat " + path + ": " + ec.message());
  if (size <= 0) return FailedPrecondition(path + " is empty: nothing to damage");
  if (damage == "truncated") {
    const int64_t to = (size / 2) & ~int64_t{4095};
    if (::truncate(path.c_str(), to) != 0) return Internal("cannot truncate " + path + ": " + Errno());
    if (what) *what += path + ": " + std::to_string(size) + " -> " + std::to_string(to) + " bytes\n";
    return Status::Ok();
  }
  if (damage != "bit_rot") return InvalidArgument("unknown damage '" + damage + "' (bit_rot | truncated)");
  const int64_t offset = static_cast<int64_t>(seed % static_cast<uint64_t>(size));
  const int bit = static_cast<int>((seed / static_cast<uint64_t>(size)) % 8);
  const int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) return Internal("cannot open " + path + ": " + Errno());
  unsigned char b = 0;
  Status st;
  if (::pread(fd, &b, 1, offset) != 1) {
    st = Internal("cannot read " + path + ": " + Errno());
  } else {
    b ^= static_cast<unsigned char>(1u << bit);
    if (::pwrite(fd, &b, 1, offset) != 1) st = Internal("cannot write " + path + ": " + Errno());
  }
  ::close(fd);
  if (st.ok() && what) *what += path + ": bit " + std::to_string(bit) + " of byte " + std::to_string(offset) + " flipped\n";
  return st;
}
}  // namespace

Status DamageNewestShards(const std::string& root, int rank, const std::string& damage, int count, uint64_t seed,
                          double manifest_wait_s, std::string* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(manifest_wait_s);
  const std::string shard = ShardFileName(rank);
  while (true) {
    auto dirs = StepDirs(root);
    FD_RETURN_IF_ERROR(dirs.status());
    std::vector<std::string> targets;
    bool waiting = false;
    for (const auto& [step, dir] : *dirs) {
      std::error_code ec;
      if (!fs::exists(Join(dir, shard), ec)) continue;
      if (!fs::exists(Join(dir, kManifestFileName), ec)) {
        // The newest save holding this rank's shard: its manifest is due.
        if (targets.empty()) waiting = true;
        continue;
      }
      targets.push_back(dir);
      if (static_cast<int>(targets.size()) == count) break;
    }
    if (waiting && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (targets.empty()) return FailedPrecondition("no complete checkpoint under " + root + " holds " + shard);
    for (size_t i = 0; i < targets.size(); ++i)
      FD_RETURN_IF_ERROR(DamageFile(Join(targets[i], shard), damage, seed + 7919 * i, what));
    return Status::Ok();
  }
}

StatusOr<std::string> LatestValidCheckpoint(const std::string& root) {
  auto dirs = StepDirs(root);
  FD_RETURN_IF_ERROR(dirs.status());
  std::string skipped;
  for (const auto& [step, dir] : *dirs) {
    Manifest m;
    Problem p = VerifyProblem(dir, &m);
    if (p.ok()) return dir;
    skipped += (skipped.empty() ? "" : "; ") + ("step-" + std::to_string(step) + ": " + Reason(p, dir));
  }
  return NotFound("no valid checkpoint under " + root +
                  (dirs->empty() ? std::string(" (none written)") : " (" + skipped + ")"));
}

Status PruneCheckpoints(const std::string& root, int keep, int keep_period) {
  if (keep <= 0) return Status::Ok();
  auto dirs = StepDirs(root);
  FD_RETURN_IF_ERROR(dirs.status());
  int valid = 0;
  size_t i = 0;
  for (; i < dirs->size() && valid < keep; ++i) {
    Manifest m;
    if (VerifyProblem((*dirs)[i].second, &m).ok()) ++valid;
  }
  if (valid < keep) return Status::Ok();  // never delete while fewer than `keep` good ones exist
  for (; i < dirs->size(); ++i) {
    if (keep_period > 0 && (*dirs)[i].first % keep_period == 0) continue;
    // Rename first (atomic), so a crash mid-delete never leaves a half-deleted
    // step-N that reads as a damaged checkpoint.
    const std::string& dir = (*dirs)[i].second;
    const std::string doomed = Join(root, ".deleting-" + BaseName(dir) + "." + std::to_string(::getpid()));
    if (::rename(dir.c_str(), doomed.c_str()) != 0) return Internal("cannot remove " + dir + ": " + Errno());
    FD_RETURN_IF_ERROR(FsyncDir(root));
    std::error_code ec;
    fs::remove_all(doomed, ec);
    if (ec) return Internal("cannot delete " + doomed + ": " + ec.message());
  }
  return Status::Ok();
}

Status ExportConsolidated(const std::string& step_dir, const std::string& out_file, StateDictFormat format) {
  // Rank 0's model tensors are all we export, but we still refuse a checkpoint
  // that `list` calls invalid: an export must never come from one we would
  // not resume from.
  FD_RETURN_IF_ERROR(VerifyCheckpoint(step_dir));
  auto shard = LoadShard(step_dir, 0);
  FD_RETURN_IF_ERROR(shard.status());
  std::map<std::string, at::Tensor> model;
  const size_t n = std::strlen(kModelTensorPrefix);
  for (const auto& [name, t] : shard->tensors)
    if (name.rfind(kModelTensorPrefix, 0) == 0) model.emplace(name.substr(n), t);
  if (model.empty())
    return FailedPrecondition("checkpoint " + Join(step_dir, ShardFileName(0)) + ": no model tensors (names starting with '" +
                              kModelTensorPrefix + "') to export");
  std::string target = out_file;
  if (fs::path(target).parent_path().empty()) target = (fs::path(".") / target).string();
  return WriteFileAtomic(target, [&](FileSink& sink) {
    FD_RETURN_IF_ERROR(WriteStateDict(model, format, [&](const char* p, size_t k) { sink.Write(p, k); }));
    return sink.status();
  });
}

StatusOr<std::vector<ReplicaTensor>> CompareReplicas(const std::string& step_dir) {
  auto m = ReadManifest(step_dir);
  if (!m.ok()) return m.status();
  if (!m->tensors.empty())
    return FailedPrecondition("checkpoint " + step_dir + " holds the parameters once (format 2, rank 0's shard): "
                              "it has no replicas to compare");
  const size_t n = std::strlen(kModelTensorPrefix);
  std::vector<ReplicaTensor> out;
  for (int rank = 0; rank < m->world_size; ++rank) {
    auto shard = LoadShard(step_dir, rank);
    if (!shard.ok()) return shard.status();
    size_t i = 0;
    for (const auto& [key, t] : shard->tensors) {  // a std::map: name order
      if (key.rfind(kModelTensorPrefix, 0) != 0) continue;
      const std::string name = key.substr(n);
      if (rank == 0) {
        out.push_back({name, t.numel(), {}});
      } else if (i >= out.size() || out[i].name != name || out[i].numel != t.numel()) {
        return FailedPrecondition("checkpoint " + Join(step_dir, ShardFileName(rank)) + ": model tensor " + name + " (" +
                                  std::to_string(t.numel()) + " elements) is not in rank 0's shard as such: the "
                                  "shards hold different models");
      }
      const at::Tensor c = t.contiguous();
      std::string h = Sha256Hex(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
      if (h.empty()) return Internal("SHA-256 of " + name + " failed (OpenSSL)");
      out[i++].sha256.push_back(std::move(h));
    }
    if (i != out.size())
      return FailedPrecondition("checkpoint " + Join(step_dir, ShardFileName(rank)) + ": " + std::to_string(i) +
                                " model tensors, rank 0's shard has " + std::to_string(out.size()));
  }
  return out;
}

}  // namespace firedrill::agent
