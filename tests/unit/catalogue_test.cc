// The shipped catalogue as a whole, the way a learner who has played every
// drill sees it: no config line a learner can read (`firedrill config`)
// may occur only in drills of one answer, unless the fault itself put it
// there (then it is the evidence). A value that only one kind of drill
// uses is a tell: it lets a learner pattern-match the catalogue instead of
// reading the symptoms. The live surface (columns, hosts, events) is held
// to the same rule by the e2e leak test.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/output.h"
#include "scenario/loader.h"
#include "faults/registry.h"
#include "faults/targeting.h"

namespace firedrill::cli {
namespace {

// `firedrill config` lines as features: strings and booleans by value,
// numbers and paths by key only (a batch of 64 says nothing about a cause;
// `transport = gloo` only in communication drills would).
std::set<std::string> Features(const v1::JobSpec& job) {
  v1::SessionStatus st;
  *st.mutable_job() = job;
  std::ostringstream out;
  PrintConfig(st, out);
  std::set<std::string> f;
  std::istringstream in(out.str());
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find("  #"));  // the key's class
    while (!line.empty() && line.back() == ' ') line.pop_back();
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 3);
    const bool numeric = !value.empty() && value.find_first_not_of("0123456789.-e+") == std::string::npos;
    f.insert(numeric || value[0] == '/' ? key : line);
  }
  return f;
}

// The kinds of problem a drill's answer is (its causes' classes): a line
// that only communication drills show tells a learner "communication" as
// surely as one that only slow-link drills show tells "slow-link".
std::string AnswerClassOf(const v1::Scenario& sc) {
  std::set<std::string> classes;
  auto add = [&](const std::string& cause) {
    const std::string c = faults::CauseClass(cause);
    classes.insert(c.empty() ? "none" : c);
  };
  for (const auto& f : faults::AnswerKey(sc)) add(f.cause());
  std::string out;
  for (const auto& c : classes) out += (out.empty() ? "" : "+") + c;
  return out;
}

TEST(Catalogue, NoConfigValueIsATellOfOneKindOfProblem) {
  auto all = scenario::LoadScenarioDir(FIREDRILL_SOURCE_DIR "/scenarios");
  ASSERT_TRUE(all.ok()) << all.status().message();
  ASSERT_GE(all->size(), 13u);
  // feature -> the answer classes of the drills that show it; and whether some
  // drill shows it without its fault having put it there.
  std::map<std::string, std::set<std::string>> answers;
  std::map<std::string, std::vector<std::string>> incidental;  // feature -> drills
  for (const auto& sc : *all) {
    std::vector<std::string> hosts;
    for (int r = 0; r < sc.job().world_size(); ++r) hosts.push_back("node-" + std::to_string(r));
    auto faults = faults::ResolveFaults(sc, 1, hosts);
    ASSERT_TRUE(faults.ok()) << sc.id() << ": " << faults.status().message();
    v1::JobSpec deployed = sc.job();
    faults::ApplyFaultsToJob(*faults, &deployed);
    const std::set<std::string> healthy = Features(sc.job()), seen = Features(deployed);
    for (const auto& f : seen) {
      answers[f].insert(AnswerClassOf(sc));
      // A line the deploy changed is the fault's evidence; only lines that
      // were there in the healthy job too can be tells.
      if (healthy.count(f)) incidental[f].push_back(sc.id());
    }
  }
  for (const auto& [feature, drills] : incidental) {
    EXPECT_GE(answers[feature].size(), 2u)
        << "'" << feature << "' is in the config of " << drills.size() << " drill(s) (" << drills.front()
        << (drills.size() > 1 ? ", ..." : "") << ") and every drill that shows it is a "
        << *answers[feature].begin() << " problem: a tell";
  }
}

// The brief (`scenarios show`) lists the workload settings a drill lets a
// fix change: an entry only drills of one kind of problem list is a tell.
TEST(Catalogue, NoMayChangeEntryIsATellOfOneKindOfProblem) {
  auto all = scenario::LoadScenarioDir(FIREDRILL_SOURCE_DIR "/scenarios");
  ASSERT_TRUE(all.ok()) << all.status().message();
  std::map<std::string, std::set<std::string>> classes;
  for (const auto& sc : *all)
    for (const auto& k : sc.may_change()) classes[k].insert(AnswerClassOf(sc));
  for (const auto& [key, cls] : classes)
    EXPECT_GE(cls.size(), 2u) << "may_change '" << key << "' is listed only by " << *cls.begin() << " drills: a tell";
}

TEST(Catalogue, TheNegativeControlsShip) {
  // The negative controls ship: a drill with no fault, one with two.
  auto all = scenario::LoadScenarioDir(FIREDRILL_SOURCE_DIR "/scenarios");
  ASSERT_TRUE(all.ok()) << all.status().message();
  bool none = false, two = false;
  for (const auto& sc : *all) {
    none = none || (sc.faults().empty() && sc.answer().cause() == "no-fault");
    two = two || sc.answer().findings_size() >= 2;
  }
  EXPECT_TRUE(none) << "no scenario without a fault";
  EXPECT_TRUE(two) << "no scenario with two faults at once";
}

}  // namespace
}  // namespace firedrill::cli
