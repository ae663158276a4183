// Team drills from the command line: `firedrill note|update|propose TEXT`
// post to the session's shared timeline, `firedrill timeline [-f]` shows it
// (a server stream), `firedrill postmortem` writes the postmortem once the
// drill is scored.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>

#include "cli/commands.h"

namespace firedrill::cli {

struct TeamCommands;

std::shared_ptr<TeamCommands> AddTeamCommands(CLI::App& app);
// Runs the team command that was parsed (on the current session), or
// nullopt when none was.
std::optional<int> RunTeamCommand(TeamCommands& cmds, CliContext& ctx, DrillClient& client);

// One timeline entry as a line: "12:03:07  ada (investigator)  tool  RunProbe {...}".
std::string TimelineLine(const v1::TimelineItem& t);

}  // namespace firedrill::cli
