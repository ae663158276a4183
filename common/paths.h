// Where firedrill keeps state and finds its binaries and scenario files.
#pragma once

#include <string>

namespace firedrill {

// $FIREDRILL_STATE_DIR, else $XDG_DATA_HOME/firedrill, else
// ~/.local/share/firedrill.
std::string DefaultStateDir();
// Directory holding the running executable (from /proc/self/exe).
std::string ExecutableDir();
// Scenario directory: $FIREDRILL_SCENARIOS, else the source tree's
// scenarios/ (baked in at build time), else <exe>/../share/firedrill/scenarios.
std::string DefaultScenarioDir();
// The course's skill-atom table, found the same way: $FIREDRILL_SKILLS, else
// the source tree's docs/SKILLS.md, else <exe>/../share/firedrill/SKILLS.md.
std::string DefaultSkillsFile();
// Default controller address: $FIREDRILL_CONTROLLER or 127.0.0.1:50071.
std::string DefaultControllerAddress();
// mkdir -p; returns false and sets err on failure.
bool MakeDirs(const std::string& path, std::string* err);
// mkdir -p, then the leaf is made owner-only (0700): the controller's state
// holds every answer key, the agents' logs and join tokens.
bool MakePrivateDir(const std::string& path, std::string* err);
// Writes `text` to `path`, which must not exist yet (never follows or
// replaces anything there), with permission bits `mode`. Returns 0, or the
// errno of what failed (EEXIST: it exists).
int WriteNewFile(const std::string& path, const std::string& text, unsigned mode);

}  // namespace firedrill
