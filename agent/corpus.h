// The token streams gpt-tiny trains on: the shipped public-domain text
// (data/corpus.txt, see data/README.md) or a seeded synthetic language.
//
// Tokenisation is byte-level: token = byte value, vocabulary 256. No merges
// and no special tokens: byte-level means any file is valid input and the
// model's embedding table stays tiny; padding is carried by the batch's mask,
// never by a reserved id. Free of LibTorch, so it compiles fast.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace firedrill::agent {

inline constexpr int kByteVocab = 256;

// Byte-level tokenizer. Encode/Decode are exact inverses for any bytes.
struct ByteTokenizer {
  static std::vector<int32_t> Encode(std::string_view text);
  // Ids outside [0, 255] decode as '?'.
  static std::string Decode(const int32_t* ids, size_t n);
  static std::string Decode(const std::vector<int32_t>& ids) { return Decode(ids.data(), ids.size()); }
};

struct Corpus {
  std::string name;             // file path, or "synthetic(seed=..., vocab=...)"
  int vocab_size = kByteVocab;  // every token is in [0, vocab_size)
  std::vector<int32_t> tokens;
  uint64_t fingerprint = 0;  // hash of name-independent content: detects a changed corpus on resume
};

// Where the shipped corpus is: $FIREDRILL_DATA (the file, or a folder with
// corpus.txt) if set, else <source dir>/data/corpus.txt. NotFound names
// every place tried and how to fix it.
StatusOr<std::string> LocateTextCorpus();

// Reads and tokenises a text file (`path` empty: LocateTextCorpus()).
// Cached per path for the life of the process: ranks run as threads in tests
// and all share one copy.
StatusOr<std::shared_ptr<const Corpus>> LoadTextCorpus(const std::string& path = "");

// A deterministic synthetic language of `length` tokens over `vocab` ids: an
// order-1 Markov chain in which each token has four possible successors
// with fixed, skewed probabilities (entropy ~1.2 nats vs ln(vocab) for
// uniform), so a model's loss visibly falls. Cached per arguments.
StatusOr<std::shared_ptr<const Corpus>> SyntheticCorpus(uint64_t seed, int vocab, int64_t length);

}  // namespace firedrill::agent
