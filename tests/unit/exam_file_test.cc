#include "scenario/exam_file.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "scenario/loader.h"

namespace firedrill::scenario {
namespace {

const std::vector<v1::Scenario>& Catalogue() {
  static const std::vector<v1::Scenario> all = [] {
    auto loaded = LoadScenarioDir(std::string(FIREDRILL_SOURCE_DIR) + "/scenarios");
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    return loaded.ok() ? *loaded : std::vector<v1::Scenario>{};
  }();
  return all;
}

// Line numbers in the expectations below refer to this text.
const char* kGood = R"(id: infra-practical
title: Distributed training operations, practical
time_limit_min: 120
pass_mark: 66
hints: {allowed: true, cost: 10}
retakes: 1
items:
  - scenario: epoch-end-hang
  - pool: [thermal-throttle, slow-local-disk]
    points: 50
  - skill: straggler rank identification
)";

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

std::string ErrorOf(const std::string& text) {
  auto e = ParseExam(text, "exam.yaml", Catalogue());
  EXPECT_FALSE(e.ok());
  return e.ok() ? "" : e.status().message();
}

TEST(ExamFile, AGoodFileReadsWithItsPoolsResolvedAndSorted) {
  auto e = ParseExam(kGood, "exam.yaml", Catalogue());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->id(), "infra-practical");
  EXPECT_EQ(e->time_limit_min(), 120);
  EXPECT_TRUE(e->hints().allowed());
  ASSERT_EQ(e->items_size(), 3);
  EXPECT_EQ(ItemScenarios(e->items(0)), std::vector<std::string>{"epoch-end-hang"});
  EXPECT_EQ(ItemScenarios(e->items(1)), (std::vector<std::string>{"slow-local-disk", "thermal-throttle"}));
  // Every shipped scenario that trains the atom, and only those.
  const std::vector<std::string> pool = ItemScenarios(e->items(2));
  EXPECT_GE(pool.size(), 3u);
  for (const auto& id : pool) {
    bool trains = false;
    for (const auto& s : Catalogue())
      if (s.id() == id)
        for (const auto& k : s.skills()) trains = trains || k == "straggler rank identification";
    EXPECT_TRUE(trains) << id;
  }
  EXPECT_EQ(ExamPoints(*e), 250);
}

TEST(ExamFile, TheShippedExampleChecks) {
  auto e = LoadExamFile(std::string(FIREDRILL_SOURCE_DIR) + "/exams/practical.yaml", Catalogue());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->items_size(), 3);
}

TEST(ExamFile, AnUnknownKeyIsNamedAtItsLine) {
  const std::string m = ErrorOf(Replace(kGood, "retakes: 1", "retake: 1"));
  EXPECT_NE(m.find("exam.yaml:6:1"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown key 'retake'"), std::string::npos) << m;
}

TEST(ExamFile, AnUnknownScenarioIsNamedWithTheClosestId) {
  const std::string m = ErrorOf(Replace(kGood, "scenario: epoch-end-hang", "scenario: epoch-end-hung"));
  EXPECT_NE(m.find("exam.yaml:8:"), std::string::npos) << m;
  EXPECT_NE(m.find("items[0].scenario"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'epoch-end-hang'"), std::string::npos) << m;
}

TEST(ExamFile, APoolEntryTwiceAndAnItemWithTwoSourcesAreRefused) {
  std::string m =
      ErrorOf(Replace(kGood, "[thermal-throttle, slow-local-disk]", "[thermal-throttle, thermal-throttle]"));
  EXPECT_NE(m.find("items[1].pool[1]"), std::string::npos) << m;
  EXPECT_NE(m.find("twice"), std::string::npos) << m;
  m = ErrorOf(Replace(kGood, "  - scenario: epoch-end-hang", "  - scenario: epoch-end-hang\n    skill: x"));
  EXPECT_NE(m.find("items[0]"), std::string::npos) << m;
  EXPECT_NE(m.find("give only one"), std::string::npos) << m;
}

TEST(ExamFile, ASkillNoScenarioTrainsIsRefused) {
  const std::string m =
      ErrorOf(Replace(kGood, "skill: straggler rank identification", "skill: stragler rank identification"));
  EXPECT_NE(m.find("exam.yaml:11:"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'straggler rank identification'"), std::string::npos) << m;
}

TEST(ExamFile, RequiredFieldsAndRangesAreChecked) {
  EXPECT_NE(ErrorOf(Replace(kGood, "pass_mark: 66\n", "")).find("pass_mark: required"), std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "pass_mark: 66", "pass_mark: 101")).find("exam.yaml:4:"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "time_limit_min: 120", "time_limit_min: 0")).find("time_limit_min"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "time_limit_min: 120", "time_limit_min: two hours")).find("exam.yaml:3:"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "{allowed: true, cost: 10}", "{cost: 10}")).find("hints.allowed: true"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Replace(kGood, "id: infra-practical", "id: infra practical")).find("exam.yaml:1:"),
            std::string::npos);
  EXPECT_NE(ErrorOf("").find("the exam file is empty"), std::string::npos);
}

}  // namespace
}  // namespace firedrill::scenario
