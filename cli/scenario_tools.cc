#include "cli/scenario_tools.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/output.h"
#include "common/suggest.h"
#include "scenario/loader.h"

namespace firedrill::cli {

namespace {

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "| a | b |" -> {"a", "b"}; the outer pipes are optional on the right.
std::vector<std::string> Cells(const std::string& row) {
  std::string body = row.substr(1);
  if (!body.empty() && body.back() == '|') body.pop_back();
  std::vector<std::string> cells;
  std::stringstream in(body);
  for (std::string cell; std::getline(in, cell, '|');) cells.push_back(Trim(cell));
  if (!body.empty() && body.back() == '|') cells.push_back("");  // getline drops an empty last cell
  return cells;
}

bool IsSeparator(const std::vector<std::string>& cells) {
  for (const auto& c : cells) {
    if (c.empty() || c.find_first_not_of("-: ") != std::string::npos) return false;
  }
  return !cells.empty();
}

bool IsAtom(const std::vector<SkillAtom>& table, const std::string& skill) {
  return std::any_of(table.begin(), table.end(),
                     [&](const SkillAtom& a) { return SameSkill(a.atom, skill); });
}

std::string SkillWarning(const std::vector<SkillAtom>& table, const std::string& skill) {
  std::string msg =
      "skill '" + skill +
      "' is not a skill atom of the course, so `firedrill scenarios coverage` does not count it";
  const SkillAtom* best = nullptr;
  size_t best_d = 0;
  for (const auto& a : table) {
    const size_t d = EditDistance(Lower(a.atom), Lower(skill));
    if (!best || d < best_d) best = &a, best_d = d;
  }
  if (best && best_d <= std::max<size_t>(3, skill.size() / 4)) msg += "; did you mean '" + best->atom + "'?";
  return msg;
}

// A runbook path is relative to the repository root (scenarios/ sits in it),
// or to the scenario file's own directory.
std::vector<std::string> RunbookCandidates(const std::string& scenario_file, const std::string& runbook) {
  namespace fs = std::filesystem;
  if (fs::path(runbook).is_absolute()) return {runbook};
  const fs::path dir = fs::path(scenario_file).parent_path();
  return {(dir / runbook).lexically_normal().string(), (dir / ".." / runbook).lexically_normal().string()};
}

}  // namespace

StatusOr<std::vector<SkillAtom>> ParseSkillsTable(const std::string& markdown, const std::string& filename) {
  std::vector<SkillAtom> out;
  std::map<std::string, int> line_of;  // lower-cased atom -> line, for duplicates
  bool in_table = false;
  size_t module_col = 0, atom_col = 0;
  std::string module;
  std::istringstream in(markdown);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const std::string row = Trim(line);
    const std::string where = filename + ":" + std::to_string(line_no) + ": ";
    if (row.empty() || row[0] != '|') {
      if (in_table) break;  // the table ended; only the first one counts
      continue;
    }
    const auto cells = Cells(row);
    if (!in_table) {
      std::vector<std::string> names;
      for (const auto& c : cells) names.push_back(Lower(c));
      const auto m = std::find(names.begin(), names.end(), "module");
      const auto a = std::find(names.begin(), names.end(), "skill atom");
      if (m != names.end() && a != names.end()) {
        in_table = true;
        module_col = m - names.begin();
        atom_col = a - names.begin();
      }
      continue;
    }
    if (IsSeparator(cells)) continue;
    const std::string m = module_col < cells.size() ? cells[module_col] : "";
    const std::string atom = atom_col < cells.size() ? cells[atom_col] : "";
    if (atom.empty()) return InvalidArgument(where + "row has no skill atom");
    if (!m.empty()) module = m;
    if (module.empty()) {
      return InvalidArgument(where + "skill atom '" + atom +
                             "' has an empty module cell and no module above it; name its module");
    }
    auto [it, fresh] = line_of.emplace(Lower(atom), line_no);
    if (!fresh) {
      return InvalidArgument(where + "skill atom '" + atom + "' is listed twice (also on line " +
                             std::to_string(it->second) + "); coverage would count it twice");
    }
    out.push_back({module, atom});
  }
  if (out.empty()) {
    return InvalidArgument(filename +
                           ": no skill table found; expected rows `| module | skill atom | ... |` " +
                           "after a header naming those columns");
  }
  return out;
}

StatusOr<std::vector<SkillAtom>> LoadSkillsFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open skills table (pass --skills FILE or set FIREDRILL_SKILLS)");
  std::ostringstream text;
  text << in.rdbuf();
  return ParseSkillsTable(text.str(), path);
}

bool SameSkill(const std::string& a, const std::string& b) { return Lower(a) == Lower(b); }

Coverage ComputeCoverage(const std::vector<SkillAtom>& table, const std::vector<v1::Scenario>& scenarios) {
  Coverage c;
  for (const auto& atom : table) {
    AtomCoverage ac{atom, {}};
    for (const auto& s : scenarios) {
      const auto& skills = s.skills();
      if (std::any_of(skills.begin(), skills.end(),
                      [&](const std::string& k) { return SameSkill(k, atom.atom); })) {
        ac.scenarios.push_back(s.id());
      }
    }
    std::sort(ac.scenarios.begin(), ac.scenarios.end());
    if (c.modules.empty() || c.modules.back().module != atom.module) c.modules.push_back({atom.module, 0, 0});
    ++c.modules.back().atoms;
    if (!ac.scenarios.empty()) {
      ++c.modules.back().covered;
      ++c.covered;
    }
    c.atoms.push_back(std::move(ac));
  }
  for (const auto& s : scenarios) {
    for (const auto& k : s.skills()) {
      if (!IsAtom(table, k)) c.unknown.push_back({s.id(), k});
    }
  }
  return c;
}

void PrintCoverage(const Coverage& c, std::ostream& out) {
  Table t({"MODULE", "SKILL ATOM", "SCENARIOS"});
  std::string last_module;
  for (const auto& a : c.atoms) {
    std::string ids;
    for (const auto& id : a.scenarios) ids += (ids.empty() ? "" : ", ") + id;
    t.Add({a.atom.module == last_module ? "" : a.atom.module, a.atom.atom,
           ids.empty() ? "** UNCOVERED **" : ids});
    last_module = a.atom.module;
  }
  t.Print(out);
  out << "\n";
  for (const auto& m : c.modules) {
    out << "module " << m.module << ": " << m.covered << "/" << m.atoms << " atoms covered\n";
  }
  out << "total: " << c.covered << "/" << c.atoms.size() << " atoms covered";
  if (c.covered < static_cast<int>(c.atoms.size())) out << ", " << c.atoms.size() - c.covered << " uncovered";
  out << "\n";
  for (const auto& u : c.unknown) {
    out << "warning: scenario " << u.scenario << " lists skill '" << u.skill
        << "', which is not a skill atom; it is not counted (check it with `firedrill scenarios validate`)\n";
  }
}

std::string CoverageJson(const Coverage& c) {
  nlohmann::ordered_json atoms = nlohmann::ordered_json::array(), modules = nlohmann::ordered_json::array(),
                         unknown = nlohmann::ordered_json::array();
  for (const auto& a : c.atoms) {
    atoms.push_back({{"module", a.atom.module},
                     {"atom", a.atom.atom},
                     {"covered", !a.scenarios.empty()},
                     {"scenarios", a.scenarios}});
  }
  for (const auto& m : c.modules)
    modules.push_back({{"module", m.module}, {"atoms", m.atoms}, {"covered", m.covered}});
  for (const auto& u : c.unknown) unknown.push_back({{"scenario", u.scenario}, {"skill", u.skill}});
  nlohmann::ordered_json j = {{"atoms", atoms},
                              {"modules", modules},
                              {"total", {{"atoms", c.atoms.size()}, {"covered", c.covered}}},
                              {"unknown_skills", unknown}};
  return j.dump(2);
}

FileCheck CheckScenarioFile(const std::string& path, const std::vector<SkillAtom>* table) {
  FileCheck r;
  r.file = path;
  auto s = scenario::LoadScenarioFile(path);
  if (!s.ok()) {
    r.error = s.status().message();
    if (r.error.compare(0, path.size(), path) != 0) r.error = path + ": " + r.error;
    return r;
  }
  r.ok = true;
  r.id = s->id();
  r.title = s->title();
  for (auto& w : scenario::ScenarioWarnings(*s)) r.warnings.push_back(std::move(w));
  if (table) {
    if (s->skills().empty())
      r.warnings.push_back("no `skills:` listed, so it covers no skill atom of the course");
    for (const auto& k : s->skills()) {
      if (!IsAtom(*table, k)) r.warnings.push_back(SkillWarning(*table, k));
    }
  }
  if (!s->runbook().empty()) {
    const auto candidates = RunbookCandidates(path, s->runbook());
    std::error_code ec;
    const bool found = std::any_of(candidates.begin(), candidates.end(), [&](const std::string& p) {
      return std::filesystem::is_regular_file(p, ec);
    });
    if (!found) {
      std::string looked;
      for (const auto& p : candidates) looked += (looked.empty() ? "" : ", ") + p;
      r.warnings.push_back("runbook '" + s->runbook() + "' not found (looked for " + looked + ")");
    }
  }
  return r;
}

void PrintFileChecks(const std::vector<FileCheck>& checks, std::ostream& out, std::ostream& err) {
  for (const auto& c : checks) {
    if (c.ok)
      out << c.file << ": ok (" << c.id << ": " << c.title << ")\n";
    else
      err << c.error << "\n";
    for (const auto& w : c.warnings) err << c.file << ": warning: " << w << "\n";
  }
}

std::string FileChecksJson(const std::vector<FileCheck>& checks) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& c : checks) {
    j.push_back({{"file", c.file},
                 {"ok", c.ok},
                 {"id", c.id},
                 {"title", c.title},
                 {"error", c.error},
                 {"warnings", c.warnings}});
  }
  return j.dump(2);
}

int RunScenarioValidate(CliContext& ctx, const std::vector<std::string>& files,
                        const std::string& skills_file) {
  auto table = LoadSkillsFile(skills_file);
  if (!table.ok())
    *ctx.err << "warning: " << table.status().message() << "; `skills:` entries are not checked\n";
  std::vector<FileCheck> checks;
  for (const auto& f : files) checks.push_back(CheckScenarioFile(f, table.ok() ? &*table : nullptr));
  if (ctx.json)
    *ctx.out << FileChecksJson(checks) << "\n";
  else
    PrintFileChecks(checks, *ctx.out, *ctx.err);
  return std::all_of(checks.begin(), checks.end(), [](const FileCheck& c) { return c.ok; }) ? 0 : 1;
}

int RunScenarioCoverage(CliContext& ctx, const std::string& dir, const std::string& skills_file) {
  auto table = LoadSkillsFile(skills_file);
  if (!table.ok()) {
    *ctx.err << "error: " << table.status().message() << "\n";
    return 1;
  }
  auto scenarios = scenario::LoadScenarioDir(dir);
  if (!scenarios.ok()) {
    // A bad file stops the count: coverage that skipped it would look lower than it is.
    const bool bad_file = scenarios.status().code() == StatusCode::kInvalidArgument;
    *ctx.err << "error: " << scenarios.status().message()
             << (bad_file ? "; check every file with `firedrill scenarios validate`" : "") << "\n";
    return 1;
  }
  const Coverage c = ComputeCoverage(*table, *scenarios);
  if (ctx.json)
    *ctx.out << CoverageJson(c) << "\n";
  else
    PrintCoverage(c, *ctx.out);
  return 0;
}

}  // namespace firedrill::cli
