// Runs a short command (iproute2's `ip`, `tc`) to completion and keeps what it
// printed, for the messages of the code that calls it. Not for long-running
// children: the controller's launcher owns those.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace firedrill {

struct CommandResult {
  int exit_code = -1;   // -1: it did not run or was killed
  std::string output;   // stdout and stderr together, trailing newline trimmed
};

// argv[0] is looked up in the system's directories (/usr/sbin, /usr/bin,
// /sbin, /bin), never on PATH: these run as root. It runs with LC_ALL=C, so
// callers can match its messages. Errors only when it cannot be started.
StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv);

// RunCommand, and an error (naming the command and quoting its output)
// unless it exited 0.
Status RunChecked(const std::vector<std::string>& argv);

// The absolute path of a system tool (see RunCommand); "" if there is none.
std::string SystemTool(const std::string& name);

// "ip netns add fd-1": argv joined for messages.
std::string CommandLine(const std::vector<std::string>& argv);

}  // namespace firedrill
