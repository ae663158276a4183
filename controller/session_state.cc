#include "controller/session_state.h"

namespace firedrill::controller {

namespace {
constexpr const char* kSessionNames[] = {"created", "baseline", "running", "fixing",
                                         "verifying", "scored", "ended", "aborted"};
constexpr const char* kRankNames[] = {"idle", "starting", "running", "finished", "failed", "lost", "retired", "stopped"};
constexpr const char* kRunNames[] = {"starting", "running", "finished", "failed", "stopped"};
constexpr const char* kKindNames[] = {"baseline", "main", "healthy", "verify"};
}  // namespace

const char* Name(SessionState s) { return kSessionNames[static_cast<int>(s)]; }
const char* Name(RankState s) { return kRankNames[static_cast<int>(s)]; }
const char* Name(RunState s) { return kRunNames[static_cast<int>(s)]; }
const char* Name(RunKind k) { return kKindNames[static_cast<int>(k)]; }

std::optional<SessionState> ParseSessionState(std::string_view name) {
  for (int i = 0; i < static_cast<int>(std::size(kSessionNames)); ++i)
    if (name == kSessionNames[i]) return static_cast<SessionState>(i);
  return std::nullopt;
}

bool Terminal(SessionState s) {
  return s == SessionState::kScored || s == SessionState::kEnded || s == SessionState::kAborted;
}

bool TerminalState(std::string_view name) {
  const auto s = ParseSessionState(name);
  return s && Terminal(*s);
}

}  // namespace firedrill::controller
