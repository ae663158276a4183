// `firedrill token issue|revoke|list` (the controller's owner) and
// `firedrill whoami` (anyone): who may call the controller.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>

#include "cli/commands.h"

namespace firedrill::cli {

struct TokenCommands;

// Adds `token` and `whoami` to `app`; the returned object holds their
// options until RunTokenCommand.
std::shared_ptr<TokenCommands> AddTokenCommands(CLI::App& app);
// Runs the token command that was parsed, or nullopt when none was.
std::optional<int> RunTokenCommand(TokenCommands& cmds, CliContext& ctx, DrillClient& client);

}  // namespace firedrill::cli
