// Who may call what on the public service. Every call presents a bearer
// token; the rules below are pure functions of the token's grant and the
// call's target, so that the whole table is tested without a server, and
// DrillService applies them before it does anything else.
//
// A session someone may not see answers exactly as a session that does not
// exist: a refusal must not tell a candidate that another candidate's
// session is there.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "controller/exam/tokens.h"

namespace firedrill::controller {

class Store;

// What a call asks for.
enum class Access {
  kAnyToken,      // the cause taxonomy, who am I
  kCatalogue,     // the scenarios and their briefs (not a candidate: an exam shows its items)
  kStartSession,  // practice sessions: owner, learner, instructor
  kListSessions,  // everyone; filtered to what each may see
  kAdmin,         // tokens: the controller's owner
  kProctor,       // exams: create, issue candidates, results, rescore, audit (proctor, owner)
  kSitting,       // a candidate's own sitting: start, open items, finish (candidates only)
  kExamView,      // a sitting's state: its candidate, or a proctor
};

// What a call does to a session.
enum class SessionUse {
  kWatch,        // status, trace, metrics, logs, checkpoints, flight recorders, score
  kInvestigate,  // probes, checkpoint verification, hints, diagnoses
  kCommand,      // fixes, ending the session
};

// The token in an "authorization" metadata value ("Bearer fdt_..."); empty
// if the value is absent or has another shape.
std::string BearerToken(std::string_view header);

// "an investigator", "a proctor+instructor": the roles with their article.
std::string ARoles(uint32_t roles);

// OK, or PermissionDenied naming the roles that may.
Status CheckAccess(const Grant& who, Access what);
// Whether `who` may use session `session_id` (started by the token named
// `session_owner`) this way. The caller answers "no session" when not.
bool MayUseSession(const Grant& who, const std::string& session_id, const std::string& session_owner,
                   SessionUse use);
// Whether `who` sees `session_id` in a listing at all.
inline bool MaySeeSession(const Grant& who, const std::string& session_id, const std::string& session_owner) {
  return MayUseSession(who, session_id, session_owner, SessionUse::kWatch);
}

// Whether `who`, who may see the session, may post `kind` on its timeline:
// a note (anyone on it who acts: the team, its starter, the owner), a
// status update (comms or the commander) or a proposed diagnosis
// (investigators or the commander). InvalidArgument for another kind,
// PermissionDenied naming who may.
Status MayPost(const Grant& who, const std::string& session_id, const std::string& session_owner,
               const std::string& kind);
// The role `who` acts in when doing `kind` (tool, note, update, proposal,
// diagnosis, fix, hint) on a session: the team role that allows it
// ("investigator"), else "owner", "learner", ... as the timeline shows it.
std::string ActingRole(const Grant& who, const std::string& session_id, const std::string& kind);

// The controller's tokens: a book of digests backed by the store, and the
// owner token `up` leaves in the state dir for the local CLI.
class Gatekeeper {
 public:
  explicit Gatekeeper(Store* store) : store_(store) {}
  // Loads the stored grants and makes sure `owner_token_file` holds a live
  // owner token (a new one, mode 0600, when it is missing, unreadable or
  // revoked; every earlier owner token is then revoked).
  Status Init(const std::string& owner_token_file);
  // The grant of the presented "authorization" value; Unauthenticated
  // saying what to do when there is none or it is unknown or revoked.
  StatusOr<Grant> Authenticate(std::string_view header) const;
  // A new token for `grant` (a name never issued before, and a candidate
  // holds no other role), stored as its digest before it works; the token
  // itself is returned once; `grant` is left as issued (its time).
  StatusOr<std::string> Issue(Grant* grant);
  // Revokes every live token named `name`; NotFound if there is none. The
  // owner token is not revoked here (delete the file and restart).
  StatusOr<int> Revoke(const std::string& name);
  std::vector<Grant> List() const;

 private:
  // Revokes the live grants `which` picks, each stored before it takes
  // effect; how many.
  StatusOr<int> RevokeWhere(const std::function<bool(const Grant&)>& which);
  Store* store_;
  TokenBook book_;
  std::mutex issue_mu_;  // a name check and its issue are one step
};

}  // namespace firedrill::controller
