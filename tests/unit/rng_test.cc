#include "common/rng.h"

#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <string>

namespace firedrill {
namespace {

TEST(DrawInt, SameSeedAndLabelSameValue) {
  for (uint64_t seed : {0ULL, 1ULL, 42ULL, 0xdeadbeefULL}) {
    EXPECT_EQ(DrawInt(seed, "faults.0.target", 0, 3), DrawInt(seed, "faults.0.target", 0, 3));
  }
}

TEST(DrawInt, StaysWithinBounds) {
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    const int64_t v = DrawInt(seed, "faults.0.trigger.step", 30, 60);
    ASSERT_GE(v, 30);
    ASSERT_LE(v, 60);
  }
}

TEST(DrawInt, CoversTheWholeRangeOverSeeds) {
  std::set<int64_t> seen;
  for (uint64_t seed = 0; seed < 500; ++seed) seen.insert(DrawInt(seed, "x", -2, 5));
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_EQ(*seen.begin(), -2);
  EXPECT_EQ(*seen.rbegin(), 5);
}

TEST(DrawInt, LabelsAreIndependent) {
  // Two labels under one seed must not move in lock-step, or adding a draw
  // would correlate faults.
  int same = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) same += DrawInt(seed, "a", 0, 99) == DrawInt(seed, "b", 0, 99);
  EXPECT_LT(same, 20);
}

TEST(DrawInt, DegenerateAndExtremeRanges) {
  EXPECT_EQ(DrawInt(7, "x", 4, 4), 4);
  EXPECT_EQ(DrawInt(7, "x", 9, 3), 9);  // hi < lo: lo, never UB
  const int64_t lo = std::numeric_limits<int64_t>::min();
  const int64_t hi = std::numeric_limits<int64_t>::max();
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const int64_t v = DrawInt(seed, "full", lo, hi);
    EXPECT_GE(v, lo);
    EXPECT_LE(v, hi);
  }
}

}  // namespace
}  // namespace firedrill
