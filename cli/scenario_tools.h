// `firedrill scenarios validate` and `firedrill scenarios coverage`: checks on
// scenario files and on how they cover the course's skill atoms. Local only:
// they read files and never talk to a controller.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::cli {

struct SkillAtom {
  std::string module;  // "6 Diagnosing throughput loss"
  std::string atom;    // "straggler rank identification"
};

// The `| module | skill atom | ... |` table of a Markdown file shaped like
// docs/SKILLS.md, in table order. A row whose module cell is empty continues
// the module above. Text outside the table is ignored. `filename` is used
// only in messages, which name file:line.
StatusOr<std::vector<SkillAtom>> ParseSkillsTable(const std::string& markdown, const std::string& filename);
StatusOr<std::vector<SkillAtom>> LoadSkillsFile(const std::string& path);

// Skill names match atoms exactly, ignoring case.
bool SameSkill(const std::string& a, const std::string& b);

struct AtomCoverage {
  SkillAtom atom;
  std::vector<std::string> scenarios;  // ids, sorted
};
struct ModuleCoverage {
  std::string module;
  int atoms = 0;
  int covered = 0;
};
struct UnknownSkill {
  std::string scenario;  // id
  std::string skill;
};
struct Coverage {
  std::vector<AtomCoverage> atoms;      // table order
  std::vector<ModuleCoverage> modules;  // table order
  std::vector<UnknownSkill> unknown;    // `skills:` entries that are no atom
  int covered = 0;
};

Coverage ComputeCoverage(const std::vector<SkillAtom>& table, const std::vector<v1::Scenario>& scenarios);
void PrintCoverage(const Coverage& c, std::ostream& out);
std::string CoverageJson(const Coverage& c);

struct FileCheck {
  std::string file;
  bool ok = false;
  std::string id;
  std::string title;
  std::string error;                  // file:line:col: field: message
  std::vector<std::string> warnings;  // problems that do not make it invalid
};

// Loads and validates one scenario file. Warns about `skills:` entries that
// are not atoms of `table` (skipped when `table` is null) and about a
// `runbook:` that exists neither beside the file nor one directory up (the
// repository root for scenarios/).
FileCheck CheckScenarioFile(const std::string& path, const std::vector<SkillAtom>* table);
// Valid files on `out`; errors and warnings on `err`.
void PrintFileChecks(const std::vector<FileCheck>& checks, std::ostream& out, std::ostream& err);
std::string FileChecksJson(const std::vector<FileCheck>& checks);

// The subcommands. Validate returns 1 if any file is invalid; a skill table
// that cannot be read only turns the skill check off, with a warning.
int RunScenarioValidate(CliContext& ctx, const std::vector<std::string>& files,
                        const std::string& skills_file);
int RunScenarioCoverage(CliContext& ctx, const std::string& dir, const std::string& skills_file);

}  // namespace firedrill::cli
