#include "agent/corpus.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "common/rng.h"

namespace firedrill::agent {

namespace {

bool IsRegularFile(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDirectory(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

uint64_t HashTokens(const std::vector<int32_t>& t, int vocab) {
  uint64_t h = SplitMix64(static_cast<uint64_t>(vocab) ^ 0xC0FFEEULL);
  for (int32_t v : t) h = SplitMix64(h ^ static_cast<uint32_t>(v));
  return h;
}

// Loaded corpora are immutable and shared; a process loads each once.
std::mutex& CacheMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

std::vector<int32_t> ByteTokenizer::Encode(std::string_view text) {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::Decode(const int32_t* ids, size_t n) {
  std::string s(n, '?');
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] >= 0 && ids[i] < kByteVocab) s[i] = static_cast<char>(ids[i]);
  }
  return s;
}

StatusOr<std::string> LocateTextCorpus() {
  std::vector<std::string> tried;
  if (const char* env = std::getenv("FIREDRILL_DATA"); env != nullptr && *env != '\0') {
    std::string p = env;
    if (IsDirectory(p)) p += "/corpus.txt";
    if (IsRegularFile(p)) return p;
    tried.push_back(p + " (from $FIREDRILL_DATA)");
  }
#ifdef FIREDRILL_SOURCE_DIR
  {
    const std::string p = std::string(FIREDRILL_SOURCE_DIR) + "/data/corpus.txt";
    if (IsRegularFile(p)) return p;
    tried.push_back(p + " (source tree)");
  }
#endif
  std::string msg = "text corpus not found; tried: ";
  for (size_t i = 0; i < tried.size(); ++i) msg += (i ? ", " : "") + tried[i];
  if (tried.empty()) msg += "nothing (no source tree compiled in)";
  msg += ". Set FIREDRILL_DATA to data/corpus.txt (or its folder), or use data.source: synthetic";
  return NotFound(msg);
}

StatusOr<std::shared_ptr<const Corpus>> LoadTextCorpus(const std::string& path_in) {
  std::string path = path_in;
  if (path.empty()) {
    auto located = LocateTextCorpus();
    if (!located.ok()) return located.status();
    path = *located;
  }
  static std::map<std::string, std::shared_ptr<const Corpus>> cache;
  std::lock_guard<std::mutex> lock(CacheMutex());
  if (auto it = cache.find(path); it != cache.end()) return it->second;

  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open text corpus " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Internal("reading text corpus " + path + " failed");
  auto c = std::make_shared<Corpus>();
  c->name = path;
  c->vocab_size = kByteVocab;
  c->tokens = ByteTokenizer::Encode(ss.str());
  if (c->tokens.size() < 2) return FailedPrecondition("text corpus " + path + " is empty");
  c->fingerprint = HashTokens(c->tokens, c->vocab_size);
  cache.emplace(path, c);
  return std::shared_ptr<const Corpus>(c);
}

StatusOr<std::shared_ptr<const Corpus>> SyntheticCorpus(uint64_t seed, int vocab, int64_t length) {
  if (vocab < 2) return InvalidArgument("synthetic corpus: vocab must be >= 2, got " + std::to_string(vocab));
  if (length < 2) return InvalidArgument("synthetic corpus: length must be >= 2");
  using Key = std::tuple<uint64_t, int, int64_t>;
  static std::map<Key, std::shared_ptr<const Corpus>> cache;
  std::lock_guard<std::mutex> lock(CacheMutex());
  const Key key{seed, vocab, length};
  if (auto it = cache.find(key); it != cache.end()) return it->second;

  // Successor table: four candidates per token. Cumulative weights
  // 55/25/15/5 % give a predictable but not trivial next token.
  constexpr int kFan = 4;
  static constexpr uint32_t kCum[kFan] = {55, 80, 95, 100};
  uint64_t s = SplitMix64(seed ^ HashLabel("corpus.synthetic"));
  auto next = [&s] { return s = SplitMix64(s); };
  std::vector<int32_t> succ(static_cast<size_t>(vocab) * kFan);
  for (auto& v : succ) v = static_cast<int32_t>(next() % static_cast<uint64_t>(vocab));

  auto c = std::make_shared<Corpus>();
  c->name = "synthetic(seed=" + std::to_string(seed) + ", vocab=" + std::to_string(vocab) + ")";
  c->vocab_size = vocab;
  c->tokens.resize(static_cast<size_t>(length));
  int32_t cur = static_cast<int32_t>(next() % static_cast<uint64_t>(vocab));
  for (auto& t : c->tokens) {
    t = cur;
    const uint32_t r = static_cast<uint32_t>(next() % 100);
    int k = 0;
    while (r >= kCum[k]) ++k;
    cur = succ[static_cast<size_t>(cur) * kFan + k];
  }
  c->fingerprint = HashTokens(c->tokens, vocab);
  cache.emplace(key, c);
  return std::shared_ptr<const Corpus>(c);
}

}  // namespace firedrill::agent
