#include "controller/exam/exam_clock.h"

#include <gtest/gtest.h>

#include <set>

#include "controller/exam/variants.h"

namespace firedrill::controller {
namespace {

constexpr int64_t kMin = 60 * 1000;
constexpr int64_t kStart = 1'700'000'000'000;

TEST(ExamClock, WarnsAtThirtyFifteenAndFiveMinutesLeftOnce) {
  const ExamClock clock(kStart, 120 * kMin);
  std::set<int> posted;
  EXPECT_EQ(clock.DueWarning(kStart, posted), 0);
  EXPECT_EQ(clock.DueWarning(kStart + 89 * kMin, posted), 0);
  EXPECT_EQ(clock.DueWarning(kStart + 90 * kMin, posted), 30);
  for (int m : ExamClock::Settled(30)) posted.insert(m);
  EXPECT_EQ(clock.DueWarning(kStart + 100 * kMin, posted), 0);
  EXPECT_EQ(clock.DueWarning(kStart + 105 * kMin, posted), 15);
  for (int m : ExamClock::Settled(15)) posted.insert(m);
  EXPECT_EQ(clock.DueWarning(kStart + 115 * kMin, posted), 5);
  for (int m : ExamClock::Settled(5)) posted.insert(m);
  EXPECT_EQ(clock.DueWarning(kStart + 119 * kMin, posted), 0);
  EXPECT_FALSE(clock.Expired(kStart + 120 * kMin - 1));
  EXPECT_TRUE(clock.Expired(kStart + 120 * kMin));
  EXPECT_EQ(clock.RemainingMs(kStart + 121 * kMin), 0);
}

TEST(ExamClock, AClockThatSkippedMarksPostsOnlyTheNearestAndNothingAfterTheEnd) {
  const ExamClock clock(kStart, 120 * kMin);
  EXPECT_EQ(clock.DueWarning(kStart + 116 * kMin, {}), 5);
  EXPECT_EQ(ExamClock::Settled(5), (std::vector<int>{30, 15, 5}));
  EXPECT_EQ(clock.DueWarning(kStart + 125 * kMin, {}), 0);
}

TEST(ExamClock, AShortExamIsNotWarnedAtMarksBeyondItsLength) {
  const ExamClock clock(kStart, 20 * kMin);
  EXPECT_EQ(clock.DueWarning(kStart, {}), 0);
  EXPECT_EQ(clock.DueWarning(kStart + 5 * kMin, {}), 15);
}

TEST(ExamVariants, CandidatesDifferAndAReturningCandidateGetsTheSameVariant) {
  const std::string secret(32, 'k');
  const ItemVariant ada = DrawItemVariant(secret, "infra", "ada", 0, 5);
  EXPECT_EQ(DrawItemVariant(secret, "infra", "ada", 0, 5).seed, ada.seed);
  EXPECT_EQ(DrawItemVariant(secret, "infra", "ada", 0, 5).pool_index, ada.pool_index);
  EXPECT_NE(DrawItemVariant(secret, "infra", "bob", 0, 5).seed, ada.seed);
  EXPECT_NE(DrawItemVariant(secret, "infra", "ada", 1, 5).seed, ada.seed);
  EXPECT_NE(DrawItemVariant(std::string(32, 'j'), "infra", "ada", 0, 5).seed, ada.seed);
  // Parts are length-prefixed: moving a character between them is another draw.
  EXPECT_NE(DrawItemVariant(secret, "infr", "aada", 0, 5).seed, ada.seed);
  std::set<size_t> picked;
  for (int c = 0; c < 200; ++c) {
    const ItemVariant v = DrawItemVariant(secret, "infra", "candidate-" + std::to_string(c), 0, 5);
    EXPECT_GE(v.seed, 1);
    EXPECT_LT(v.seed, int64_t{1} << 31);
    EXPECT_LT(v.pool_index, 5u);
    picked.insert(v.pool_index);
  }
  EXPECT_EQ(picked.size(), 5u);
  EXPECT_EQ(DrawItemVariant(secret, "infra", "ada", 0, 1).pool_index, 0u);
}

}  // namespace
}  // namespace firedrill::controller
