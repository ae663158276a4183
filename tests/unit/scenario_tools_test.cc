// `firedrill scenarios validate` and `coverage`: the skill-table parser, the
// coverage count, per-file checks, and the shipped scenarios against the
// shipped skill table.
#include "cli/scenario_tools.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace firedrill::cli {
namespace {

const std::string kSource = FIREDRILL_SOURCE_DIR;
const std::string kShippedSkills = kSource + "/docs/SKILLS.md";

// Line numbers in the error tests below count from this text's first line.
const char* kSkillsSample = R"(# Course

Some prose | with a pipe that is not a table.

| module | skill atom | what a drill needs |
|---|---|---|
| 1 Memory | weight memory math | a memory probe |
| | OOM failure signatures | an OOM fault |
| 2 Throughput | straggler rank identification | per-rank step times |
| | data-loader starvation | |
|  | NCCL timeout and hang triage | a hang fault |

| module | skill atom |
|---|---|
| 9 Ignored | a second table is not read |
)";

v1::Scenario Scn(const std::string& id, std::vector<std::string> skills) {
  v1::Scenario s;
  s.set_id(id);
  for (auto& k : skills) s.add_skills(k);
  return s;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(SkillsTable, ParsesRowsAndContinuationRows) {
  auto t = ParseSkillsTable(kSkillsSample, "s.md");
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->size(), 5u);
  EXPECT_EQ((*t)[0].module, "1 Memory");
  EXPECT_EQ((*t)[0].atom, "weight memory math");
  EXPECT_EQ((*t)[1].module, "1 Memory");
  EXPECT_EQ((*t)[1].atom, "OOM failure signatures");
  EXPECT_EQ((*t)[2].module, "2 Throughput");
  EXPECT_EQ((*t)[3].module, "2 Throughput");
  EXPECT_EQ((*t)[3].atom, "data-loader starvation");  // empty last cell
  EXPECT_EQ((*t)[4].atom, "NCCL timeout and hang triage");
}

TEST(SkillsTable, ErrorsNameFileAndLine) {
  auto orphan = ParseSkillsTable("| module | skill atom |\n|---|---|\n| | lonely atom |\n", "s.md");
  ASSERT_FALSE(orphan.ok());
  EXPECT_NE(orphan.status().message().find("s.md:3: "), std::string::npos) << orphan.status().message();
  EXPECT_NE(orphan.status().message().find("lonely atom"), std::string::npos);

  auto twice =
      ParseSkillsTable("| module | skill atom |\n|---|---|\n| 1 M | a |\n| | B |\n| | A |\n", "s.md");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("s.md:5: "), std::string::npos) << twice.status().message();
  EXPECT_NE(twice.status().message().find("line 3"), std::string::npos);

  auto none = ParseSkillsTable("# no table here\n| a | b |\n", "s.md");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("s.md: no skill table"), std::string::npos);
}

TEST(SkillsTable, ShippedTableHasSixModulesAnd42Atoms) {
  auto t = LoadSkillsFile(kShippedSkills);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->size(), 42u);
  const Coverage c = ComputeCoverage(*t, {});
  ASSERT_EQ(c.modules.size(), 6u);
  EXPECT_EQ(c.modules[5].module, "6 Diagnosing throughput loss");
  EXPECT_EQ(c.modules[5].atoms, 7);
  EXPECT_EQ(c.covered, 0);
}

TEST(Coverage, CountsCaseInsensitiveExactMatches) {
  auto t = ParseSkillsTable(kSkillsSample, "s.md");
  ASSERT_TRUE(t.ok());
  const Coverage c =
      ComputeCoverage(*t, {Scn("zeta", {"Straggler Rank Identification", "oom failure signatures"}),
                           Scn("alpha", {"straggler rank identification", "straggler rank"}),
                           Scn("beta", {"data-loader starvation", "data-loader starvation"})});
  ASSERT_EQ(c.atoms.size(), 5u);
  EXPECT_TRUE(c.atoms[0].scenarios.empty());
  EXPECT_EQ(c.atoms[1].scenarios, std::vector<std::string>{"zeta"});
  EXPECT_EQ(c.atoms[2].scenarios, (std::vector<std::string>{"alpha", "zeta"}));  // sorted
  EXPECT_EQ(c.atoms[3].scenarios, std::vector<std::string>{"beta"});             // listed twice, counted once
  EXPECT_TRUE(c.atoms[4].scenarios.empty());
  ASSERT_EQ(c.modules.size(), 2u);
  EXPECT_EQ(c.modules[0].covered, 1);
  EXPECT_EQ(c.modules[0].atoms, 2);
  EXPECT_EQ(c.modules[1].covered, 2);
  EXPECT_EQ(c.modules[1].atoms, 3);
  EXPECT_EQ(c.covered, 3);
  // A prefix is not a match, and it is reported rather than dropped silently.
  ASSERT_EQ(c.unknown.size(), 1u);
  EXPECT_EQ(c.unknown[0].scenario, "alpha");
  EXPECT_EQ(c.unknown[0].skill, "straggler rank");

  std::ostringstream out;
  PrintCoverage(c, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("UNCOVERED"), std::string::npos) << text;
  EXPECT_NE(text.find("alpha, zeta"), std::string::npos) << text;
  EXPECT_NE(text.find("module 1 Memory: 1/2 atoms covered\n"), std::string::npos) << text;
  EXPECT_NE(text.find("module 2 Throughput: 2/3 atoms covered\n"), std::string::npos) << text;
  EXPECT_NE(text.find("total: 3/5 atoms covered, 2 uncovered\n"), std::string::npos) << text;
  EXPECT_NE(text.find("warning: scenario alpha lists skill 'straggler rank'"), std::string::npos) << text;

  const auto j = nlohmann::json::parse(CoverageJson(c));
  EXPECT_EQ(j["total"]["covered"], 3);
  EXPECT_EQ(j["total"]["atoms"], 5);
  EXPECT_EQ(j["atoms"][2]["scenarios"][1], "zeta");
  EXPECT_EQ(j["atoms"][0]["covered"], false);
  EXPECT_EQ(j["modules"][1]["module"], "2 Throughput");
}

class ValidateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fd-scn-tools-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    shipped_ = ReadFile(kSource + "/scenarios/throughput-halved.yaml");
    ASSERT_FALSE(shipped_.empty());
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // The shipped straggler scenario with `from` replaced by `to`, written to
  // DIR/name.
  std::string Write(const std::string& name, const std::string& from, const std::string& to) {
    std::string text = shipped_;
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  int LineOf(const std::string& needle) const {
    const auto at = shipped_.find(needle);
    return 1 + static_cast<int>(std::count(shipped_.begin(), shipped_.begin() + at, '\n'));
  }

  std::string dir_;
  std::string shipped_;
};

TEST_F(ValidateTest, BrokenLineIsAnErrorNamingFileAndLine) {
  const std::string path = Write("broken.yaml", "world_size: 4", "world_size: four");
  const FileCheck c = CheckScenarioFile(path, nullptr);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.error.rfind(path + ":" + std::to_string(LineOf("world_size: 4")) + ":", 0), 0u) << c.error;
  EXPECT_NE(c.error.find("job.world_size"), std::string::npos) << c.error;

  const FileCheck missing = CheckScenarioFile(dir_ + "/nope.yaml", nullptr);
  EXPECT_FALSE(missing.ok);
  EXPECT_EQ(missing.error.rfind(dir_ + "/nope.yaml: ", 0), 0u) << missing.error;
}

TEST_F(ValidateTest, UnknownSkillAndMissingRunbookAreWarningsOnly) {
  auto table = LoadSkillsFile(kShippedSkills);
  ASSERT_TRUE(table.ok()) << table.status().message();
  std::string path = Write("warn.yaml", "straggler rank identification", "straggler rank identificaton");
  std::string text = ReadFile(path);
  text.replace(text.find("runbooks/straggler.md"), 21, "runbooks/no-such.md");
  std::ofstream(path) << text;

  const FileCheck c = CheckScenarioFile(path, &*table);
  EXPECT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.id, "throughput-halved");
  ASSERT_EQ(c.warnings.size(), 2u);
  EXPECT_NE(c.warnings[0].find("'straggler rank identificaton' is not a skill atom"), std::string::npos)
      << c.warnings[0];
  EXPECT_NE(c.warnings[0].find("did you mean 'straggler rank identification'?"), std::string::npos)
      << c.warnings[0];
  EXPECT_NE(c.warnings[1].find("runbook 'runbooks/no-such.md' not found"), std::string::npos)
      << c.warnings[1];

  // Without a table, skills are not checked; the runbook still is.
  EXPECT_EQ(CheckScenarioFile(path, nullptr).warnings.size(), 1u);
}

TEST_F(ValidateTest, CommandLineExitCodesAndJson) {
  const std::string good = kSource + "/scenarios/throughput-halved.yaml";
  const std::string bad = Write("broken.yaml", "world_size: 4", "world_size: four");
  std::ostringstream out, err;
  // A dead controller address proves validate never needs one.
  int code = RunCli({"firedrill", "--controller", "127.0.0.1:1", "scenarios", "validate", good, bad,
                     "--skills", kShippedSkills},
                    out, err);
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.str().find(good + ": ok (throughput-halved: Throughput halved overnight)\n"), std::string::npos)
      << out.str();
  // Errors go to stderr, valid files to stdout.
  EXPECT_NE(err.str().find(bad + ":" + std::to_string(LineOf("world_size: 4")) + ":"), std::string::npos)
      << err.str();
  EXPECT_EQ(out.str().find(bad), std::string::npos) << out.str();

  std::ostringstream jout, jerr;
  code =
      RunCli({"firedrill", "scenarios", "validate", good, "--json", "--skills", kShippedSkills}, jout, jerr);
  EXPECT_EQ(code, 0) << jerr.str();
  const auto j = nlohmann::json::parse(jout.str());
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["file"], good);
  EXPECT_EQ(j[0]["ok"], true);
  EXPECT_EQ(j[0]["id"], "throughput-halved");
  EXPECT_EQ(j[0]["error"], "");
}

TEST(ScenarioTools, EveryShippedScenarioValidatesWithoutWarnings) {
  auto table = LoadSkillsFile(kShippedSkills);
  ASSERT_TRUE(table.ok()) << table.status().message();
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(kSource + "/scenarios")) {
    const std::string ext = e.path().extension().string();
    if (ext != ".yaml" && ext != ".yml") continue;
    ++files;
    const FileCheck c = CheckScenarioFile(e.path().string(), &*table);
    EXPECT_TRUE(c.ok) << c.error;
    for (const auto& w : c.warnings) ADD_FAILURE() << c.file << ": warning: " << w;
  }
  EXPECT_GT(files, 0);
}

TEST(ScenarioTools, CoverageCommandOverShippedScenarios) {
  std::ostringstream out, err;
  const int code = RunCli(
      {"firedrill", "scenarios", "coverage", "--dir", kSource + "/scenarios", "--skills", kShippedSkills},
      out, err);
  EXPECT_EQ(code, 0) << err.str();
  EXPECT_NE(out.str().find("throughput-halved"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("module 6 Diagnosing throughput loss: "), std::string::npos) << out.str();
  // The memory and parallelism modules, every atom (issue 13).
  EXPECT_NE(out.str().find("module 1 Why one GPU runs out: 7/7 atoms covered"), std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("module 2 Parallelism strategies: 7/7 atoms covered"), std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("total: "), std::string::npos) << out.str();

  std::ostringstream bad_out, bad_err;
  EXPECT_EQ(
      RunCli({"firedrill", "scenarios", "coverage", "--skills", "/nonexistent/SKILLS.md"}, bad_out, bad_err),
      1);
  EXPECT_EQ(bad_err.str().rfind("error: /nonexistent/SKILLS.md: cannot open", 0), 0u) << bad_err.str();
}

}  // namespace
}  // namespace firedrill::cli
