// `firedrill exam ...`: what a proctor runs. The checks that need no
// controller live here too: `exam check` (an exam file against the
// catalogue), `exam verify` (a signed result against the controller's public
// key) and `exam verify-audit` (an exported audit trail, and that it ends
// where a signed result says it did).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>

#include "cli/commands.h"

namespace firedrill::cli {

struct ExamCommands;

// Adds `exam` and its subcommands to `app`; the returned object holds their
// options until RunExamCommand.
std::shared_ptr<ExamCommands> AddExamCommands(CLI::App& app);
// Runs the offline exam subcommand that was parsed (check, verify,
// verify-audit), or nullopt when none was.
std::optional<int> RunExamCommand(ExamCommands& cmds, CliContext& ctx);
// The same for the ones that call the controller (create, list, issue,
// start, status, open, finish, results, rescore, pubkey, audit).
std::optional<int> RunExamServerCommand(ExamCommands& cmds, CliContext& ctx, DrillClient& client);

}  // namespace firedrill::cli
