// Deterministic draws from a session seed. Every draw is keyed by a label
// (e.g. "faults.0.target"), so adding a draw never shifts the others.
#pragma once

#include <cstdint>
#include <string_view>

namespace firedrill {

uint64_t SplitMix64(uint64_t x);
uint64_t HashLabel(std::string_view label);

// Uniform integer in [lo, hi] (inclusive), fixed by (seed, label).
int64_t DrawInt(uint64_t seed, std::string_view label, int64_t lo, int64_t hi);

}  // namespace firedrill
