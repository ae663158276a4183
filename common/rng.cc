#include "common/rng.h"

namespace firedrill {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t HashLabel(std::string_view label) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : label) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

int64_t DrawInt(uint64_t seed, std::string_view label, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  // Unsigned arithmetic: hi - lo overflows int64 for wide ranges, and the
  // full int64 range wraps span to 0 (any 64-bit value is then a fair draw).
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  uint64_t x = SplitMix64(seed ^ SplitMix64(HashLabel(label)));
  if (span == 0) return static_cast<int64_t>(x);
  // Rejection sampling keeps the draw unbiased for any span.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  while (x >= limit) x = SplitMix64(x);
  return lo + static_cast<int64_t>(x % span);
}

}  // namespace firedrill
