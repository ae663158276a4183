// Runs a short command (iproute2's `ip`, `tc`) to completion and keeps what it
// printed, for the messages of the code that calls it. Not for long-running
// children: the controller's launcher owns those.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace firedrill {

struct CommandResult {
  int exit_code = -1;   // -1: it did not run or was killed
  std::string output;   // stdout and stderr together, trailing newline trimmed
  bool timed_out = false;  // killed at RunLimits::limit
  bool cancelled = false;  // killed because RunLimits::cancelled said so
};

// For a command that may run a while (a training run beside the job): it
// gets a process group of its own and dies with the thread that started it
// (PR_SET_PDEATHSIG), and the whole group is killed at `limit` or as soon
// as `cancelled` (polled every 100 ms) returns true.
struct RunLimits {
  std::chrono::milliseconds limit{0};  // 0: none
  std::function<bool()> cancelled;     // empty: never
  std::vector<std::string> env;        // NAME=VALUE, added to its environment
};

// argv[0] is looked up in the system's directories (/usr/sbin, /usr/bin,
// /sbin, /bin), never on PATH: these run as root. It runs with LC_ALL=C, so
// callers can match its messages. Errors only when it cannot be started.
StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv);
StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, const RunLimits& limits);

// RunCommand, and an error (naming the command and quoting its output)
// unless it exited 0.
Status RunChecked(const std::vector<std::string>& argv);

// The absolute path of a system tool (see RunCommand); "" if there is none.
std::string SystemTool(const std::string& name);

// "ip netns add fd-1": argv joined for messages.
std::string CommandLine(const std::vector<std::string>& argv);

}  // namespace firedrill
