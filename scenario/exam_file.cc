#include "scenario/exam_file.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/suggest.h"
#include "scenario/internal.h"

namespace firedrill::scenario {

using namespace scenario_internal;  // NOLINT: this library's own helpers

namespace {

std::vector<std::string> Ids(const std::vector<v1::Scenario>& catalogue) {
  std::vector<std::string> ids;
  for (const auto& s : catalogue) ids.push_back(s.id());
  return ids;
}

Check KnownScenario(const std::string& path, const std::string& id,
                    const std::vector<v1::Scenario>& catalogue) {
  const std::vector<std::string> ids = Ids(catalogue);
  if (std::find(ids.begin(), ids.end(), id) != ids.end()) return std::nullopt;
  return Fail(path, "no scenario '" + id + "' in the catalogue" + DidYouMean(id, ids) +
                        " (`firedrill scenarios list` shows them)");
}

// Resolves `skill:` into a pool (the skill is kept beside it, to show), then
// checks the item. Checked once, as the file is read: a stored exam holds both.
Check CheckItem(v1::ExamItem* item, const std::string& p, const std::vector<v1::Scenario>& catalogue) {
  const int given = !item->scenario().empty() + (item->pool_size() > 0) + !item->skill().empty();
  if (given != 1)
    return Fail(p, given == 0 ? "give a scenario, a pool or a skill"
                              : "scenario, pool and skill are alternatives: give only one");
  if (item->points() < 0 || item->points() > 1000) return Fail(p + ".points", "must be 0-1000 (0 means 100)");
  if (!item->scenario().empty()) return KnownScenario(p + ".scenario", item->scenario(), catalogue);
  if (!item->skill().empty()) {
    std::set<std::string> skills;
    for (const auto& s : catalogue) {
      bool trains = false;
      for (const auto& k : s.skills()) {
        skills.insert(k);
        trains = trains || k == item->skill();
      }
      if (trains) item->add_pool(s.id());
    }
    if (item->pool_size() == 0)
      return Fail(p + ".skill", "no scenario in the catalogue trains '" + item->skill() + "'" +
                                    DidYouMean(item->skill(), {skills.begin(), skills.end()}));
    return std::nullopt;
  }
  std::set<std::string> seen;
  for (int i = 0; i < item->pool_size(); ++i) {
    const std::string path = Indexed(p + ".pool", i);
    if (Check c = KnownScenario(path, item->pool(i), catalogue)) return c;
    if (!seen.insert(item->pool(i)).second) return Fail(path, "'" + item->pool(i) + "' is in the pool twice");
  }
  return std::nullopt;
}

Check CheckExam(v1::ExamSpec* e, const std::vector<v1::Scenario>& catalogue) {
  if (e->id().empty()) return Fail("id", "required: a name for the exam (letters, digits, '-', '_', '.')");
  if (e->id().size() > 64 || e->id()[0] == '.' ||
      e->id().find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
          std::string::npos)
    return Fail("id", "'" + e->id() + "': use at most 64 letters, digits, '-', '_' or '.' (not first)");
  if (e->time_limit_min() <= 0 || e->time_limit_min() > 24 * 60)
    return Fail("time_limit_min", "required: the sitting's length in minutes, 1-1440");
  if (e->pass_mark() <= 0 || e->pass_mark() > 100)
    return Fail("pass_mark", "required: the percent of the exam's points that passes, 1-100");
  if (e->hints().cost() < 0) return Fail("hints.cost", "must be 0 or more (0: the scenario's own hint cost)");
  if (e->hints().cost() > 0 && !e->hints().allowed())
    return Fail("hints.cost", "hints are off: set hints.allowed: true to price them");
  if (e->attempts() < 0 || e->attempts() > 10) return Fail("attempts", "must be 0-10 (0 means 1)");
  if (e->retakes() < 0 || e->retakes() > 10) return Fail("retakes", "must be 0-10");
  if (e->items_size() == 0)
    return Fail("items", "required: at least one item (a scenario, a pool or a skill)");
  for (int i = 0; i < e->items_size(); ++i)
    if (Check c = CheckItem(e->mutable_items(i), Indexed("items", i), catalogue)) return c;
  for (auto& item : *e->mutable_items()) std::sort(item.mutable_pool()->begin(), item.mutable_pool()->end());
  return std::nullopt;
}

}  // namespace

StatusOr<v1::ExamSpec> ParseExam(const std::string& yaml_text, const std::string& filename,
                                 const std::vector<v1::Scenario>& catalogue) {
  v1::ExamSpec e;
  std::map<std::string, YAML::Mark> marks;
  FD_RETURN_IF_ERROR(MapYamlText(yaml_text, filename, "exam file", &e, &marks));
  e.set_source_file(filename);
  if (Check p = CheckExam(&e, catalogue)) return LocateProblem(filename, marks, *p);
  return e;
}

StatusOr<v1::ExamSpec> LoadExamFile(const std::string& path, const std::vector<v1::Scenario>& catalogue) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open the exam file");
  std::ostringstream text;
  text << in.rdbuf();
  return ParseExam(text.str(), path, catalogue);
}

std::vector<std::string> ItemScenarios(const v1::ExamItem& item) {
  if (!item.scenario().empty()) return {item.scenario()};
  return {item.pool().begin(), item.pool().end()};
}

int ItemPoints(const v1::ExamItem& item) { return item.points() == 0 ? 100 : item.points(); }

int ExamPoints(const v1::ExamSpec& exam) {
  int total = 0;
  for (const auto& item : exam.items()) total += ItemPoints(item);
  return total;
}

}  // namespace firedrill::scenario
