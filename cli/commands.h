// The firedrill command line: parsing, dispatch, and each subcommand.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "cli/client.h"

namespace firedrill::cli {

struct CliContext {
  std::string controller;
  std::string state_dir;
  std::string session;  // --session, else the remembered current session
  bool json = false;
  std::ostream* out;
  std::ostream* err;
};

// Runs `firedrill ARGS...` (args[0] is the program name). Returns the exit
// code; errors are one line on `err`.
int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Shared with the demo.
StatusOr<std::string> CurrentSession(const CliContext& ctx);
void RememberSession(const CliContext& ctx, const std::string& id);
// Polls until the session leaves `while_states`, drawing the run's progress.
StatusOr<v1::SessionStatus> WaitWhile(DrillClient& client, const std::string& id,
                                      const std::vector<std::string>& while_states, const std::string& label,
                                      int timeout_s);
// "KEY=VALUE" -> setting; InvalidArgument otherwise.
StatusOr<v1::FixSetting> ParseSetting(const std::string& kv);

}  // namespace firedrill::cli
