// The states of a session, of one rank's agent within it, and of a job run,
// as enums. Their names are what the store, the API and the CLI carry (the
// stored and wire form stays a string, so old databases load unchanged).
//
//   session: created -> baseline -> running -> fixing -> verifying -> scored
//            (ended: the learner or the time limit stopped it before a
//            scored fix; aborted: something failed)
//   rank:    idle -> starting -> running -> finished | failed | lost;
//            retired (stopped on purpose), stopped (the session is over)
//   run:     starting -> running -> finished | failed | stopped
#pragma once

#include <optional>
#include <string_view>

namespace firedrill::controller {

enum class SessionState { kCreated, kBaseline, kRunning, kFixing, kVerifying, kScored, kEnded, kAborted };
enum class RankState { kIdle, kStarting, kRunning, kFinished, kFailed, kLost, kRetired, kStopped };
enum class RunState { kStarting, kRunning, kFinished, kFailed, kStopped };
// baseline: the healthy job before the drill; main: the drill (faults armed,
// no planned end); healthy / verify: the two arms of a verification pair.
enum class RunKind { kBaseline, kMain, kHealthy, kVerify };

const char* Name(SessionState s);
const char* Name(RankState s);
const char* Name(RunState s);
const char* Name(RunKind k);

// The state a stored or reported name stands for; nullopt for a name that is
// none of them (a damaged record).
std::optional<SessionState> ParseSessionState(std::string_view name);

// scored, ended and aborted: nothing happens to the session any more.
bool Terminal(SessionState s);
// True for the names of those states (what clients read).
bool TerminalState(std::string_view name);

}  // namespace firedrill::controller
