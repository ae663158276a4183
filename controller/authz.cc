#include "controller/authz.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/clock.h"
#include "common/log.h"
#include "controller/store.h"

namespace firedrill::controller {

namespace {

constexpr uint32_t kTeamRoles = kRoleCommander | kRoleInvestigator | kRoleScribe | kRoleComms;

bool Has(const Grant& g, uint32_t mask) { return (g.roles & mask) != 0; }

// Writes `text` to `path` readable by this user only, replacing what was
// there in one rename.
Status WritePrivateFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Internal("cannot write " + tmp + ": " + std::strerror(errno));
  const bool ok = ::fchmod(fd, 0600) == 0 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Internal("cannot write " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

std::string ARoles(uint32_t roles) {
  const std::string names = RoleNames(roles);
  return (!names.empty() && std::string("aeiou").find(names[0]) != std::string::npos ? "an " : "a ") + names;
}

std::string BearerToken(std::string_view header) {
  constexpr std::string_view kScheme = "Bearer ";
  if (header.size() <= kScheme.size() || header.substr(0, kScheme.size()) != kScheme) return "";
  return std::string(header.substr(kScheme.size()));
}

Status CheckAccess(const Grant& who, Access what) {
  switch (what) {
    case Access::kAnyToken:
    case Access::kListSessions:
      return Status::Ok();
    case Access::kCatalogue:
      if (Has(who, kRoleOwner | kRoleLearner | kRoleInstructor | kRoleProctor | kTeamRoles))
        return Status::Ok();
      return PermissionDenied("the scenario catalogue is not open to " + ARoles(who.roles) +
                              " token (an exam shows its candidates their items)");
    case Access::kStartSession:
      if (Has(who, kRoleOwner | kRoleLearner | kRoleInstructor)) return Status::Ok();
      return PermissionDenied(
          ARoles(who.roles) +
          " token cannot start sessions (learner, instructor or owner tokens can; a candidate's "
          "items are started by their exam)");
    case Access::kProctor:
      if (Has(who, kRoleOwner | kRoleProctor)) return Status::Ok();
      return PermissionDenied("exams are run by a proctor (or the controller's owner), not by " +
                              ARoles(who.roles) + " token");
    case Access::kSitting:
      if (Has(who, kRoleCandidate)) return Status::Ok();
      return PermissionDenied(
          "only a candidate sits an exam: a proctor issues candidate tokens with "
          "`firedrill exam issue`; this is " +
          ARoles(who.roles) + " token");
    case Access::kExamView:
      if (Has(who, kRoleOwner | kRoleProctor | kRoleCandidate)) return Status::Ok();
      return PermissionDenied("a sitting is read by its candidate or a proctor, not by " + ARoles(who.roles) +
                              " token");
    case Access::kAdmin:
      if (Has(who, kRoleOwner)) return Status::Ok();
      return PermissionDenied(
          "tokens are issued and revoked by the controller's owner (the token `firedrill up` "
          "wrote to the state dir), not by " +
          ARoles(who.roles) + " token");
  }
  return PermissionDenied("unknown access");
}

bool MayUseSession(const Grant& who, const std::string& session_id, const std::string& session_owner,
                   SessionUse use) {
  if (Has(who, kRoleOwner)) return true;
  // A team token is bound to its one session; its roles decide what it
  // does there (the commander alone fixes and ends).
  if (!who.session.empty() && who.session == session_id && Has(who, kTeamRoles)) {
    switch (use) {
      case SessionUse::kWatch:
        return true;
      case SessionUse::kInvestigate:
        return Has(who, kRoleInvestigator | kRoleCommander);
      case SessionUse::kCommand:
        return Has(who, kRoleCommander);
    }
  }
  // Practice sessions and a candidate's items belong to whoever started
  // them (never a session of nobody's: those are the owner's).
  if (!session_owner.empty() && session_owner == who.name &&
      Has(who, kRoleLearner | kRoleInstructor | kRoleCandidate))
    return true;
  // A proctor watches; it never acts on a candidate's work.
  return use == SessionUse::kWatch && Has(who, kRoleProctor);
}

namespace {
// The team roles that may do `kind`, most fitting first.
std::vector<Role> TeamRolesFor(const std::string& kind) {
  if (kind == "note") return {kRoleScribe, kRoleCommander, kRoleInvestigator, kRoleComms};
  if (kind == "update") return {kRoleComms, kRoleCommander};
  if (kind == "fix") return {kRoleCommander};
  return {kRoleInvestigator, kRoleCommander};  // tool, proposal, diagnosis, hint
}
bool OnTeamOf(const Grant& who, const std::string& session_id) {
  return !who.session.empty() && who.session == session_id && Has(who, kTeamRoles);
}
}  // namespace

Status MayPost(const Grant& who, const std::string& session_id, const std::string& session_owner,
               const std::string& kind) {
  if (kind != "note" && kind != "update" && kind != "proposal")
    return InvalidArgument("a timeline entry is a note, an update or a proposal, not '" + kind + "'");
  if (Has(who, kRoleOwner)) return Status::Ok();
  if (OnTeamOf(who, session_id)) {
    for (Role r : TeamRolesFor(kind))
      if (Has(who, r)) return Status::Ok();
    std::string may;
    for (Role r : TeamRolesFor(kind)) may += std::string(may.empty() ? "" : " or ") + RoleName(r);
    return PermissionDenied("a " + kind + " is posted by the " + may + ", not by " + ARoles(who.roles) +
                            " token");
  }
  if (!session_owner.empty() && session_owner == who.name &&
      Has(who, kRoleLearner | kRoleInstructor | kRoleCandidate))
    return Status::Ok();
  return PermissionDenied(ARoles(who.roles) + " token posts nothing on this session" +
                          (Has(who, kRoleProctor) ? " (a proctor watches)" : ""));
}

std::string ActingRole(const Grant& who, const std::string& session_id, const std::string& kind) {
  if (OnTeamOf(who, session_id))
    for (Role r : TeamRolesFor(kind))
      if (Has(who, r)) return RoleName(r);
  if (Has(who, kRoleOwner)) return "owner";
  return RoleNames(who.roles);
}

Status Gatekeeper::Init(const std::string& owner_token_file) {
  auto grants = store_->LoadGrants();
  if (!grants.ok()) return grants.status();
  for (const auto& [digest, grant] : *grants) book_.Restore(digest, grant);
  std::string token;
  {
    std::ifstream in(owner_token_file);
    std::getline(in, token);
  }
  if (auto g = book_.Find(token); g && Has(*g, kRoleOwner)) return Status::Ok();
  // A new owner token replaces every earlier one: deleting the file and
  // restarting is how a leaked owner token is revoked.
  FD_RETURN_IF_ERROR(RevokeWhere([](const Grant& g) { return Has(g, kRoleOwner); }).status());
  Grant owner;
  owner.name = "owner";
  owner.roles = kRoleOwner;
  owner.issued_ms = UnixNowMs();
  const std::string digest_of_new = TokenDigest(token = NewToken());
  FD_RETURN_IF_ERROR(store_->SaveGrant(digest_of_new, owner));
  book_.Restore(digest_of_new, owner);
  FD_RETURN_IF_ERROR(WritePrivateFile(owner_token_file, token + "\n"));
  spdlog::info("a new owner token is in {} (the CLI reads it from there; earlier owner tokens are revoked)",
               owner_token_file);
  return Status::Ok();
}

StatusOr<int> Gatekeeper::RevokeWhere(const std::function<bool(const Grant&)>& which) {
  // The store first: a revocation the store did not take would come back
  // to life at the next start.
  int n = 0;
  for (const auto& [digest, g] : book_.All()) {
    if (g.revoked || !which(g)) continue;
    Grant revoked = g;
    revoked.revoked = true;
    FD_RETURN_IF_ERROR(store_->SaveGrant(digest, revoked));
    book_.Restore(digest, revoked);
    ++n;
  }
  return n;
}

StatusOr<Grant> Gatekeeper::Authenticate(std::string_view header) const {
  if (header.empty()) {
    return Unauthenticated(
        "this call carries no token: put one in FIREDRILL_TOKEN or --token-file (the controller's "
        "owner token is <state-dir>/owner.token; others come from `firedrill token issue`)");
  }
  const std::string token = BearerToken(header);
  if (auto g = book_.Find(token)) return *g;
  return Unauthenticated(
      "the token presented is not one this controller issued, or it was revoked; ask whoever runs "
      "the controller for a new one");
}

StatusOr<std::string> Gatekeeper::Issue(Grant* issued) {
  Grant& grant = *issued;
  if (grant.name.empty()) return InvalidArgument("a token needs a name (--name): the audit trail shows it");
  if (grant.name.size() > 64) return InvalidArgument("a token's name is at most 64 characters");
  for (unsigned char c : grant.name)
    if (c < 0x20 || c == 0x7f)
      return InvalidArgument("a token's name has a control character; use letters, digits, '-', '.', '@'");
  if (grant.roles == 0) return InvalidArgument("a token needs at least one role (--role)");
  if (Has(grant, kRoleOwner)) return PermissionDenied("there is one owner token: the one in the state dir");
  if (Has(grant, kRoleCandidate) && grant.roles != kRoleCandidate)
    return InvalidArgument("a candidate token holds no other role: a candidate sees only their exam");
  if (Has(grant, kRoleCandidate) && grant.exam_id.empty())
    return InvalidArgument("a candidate token belongs to one exam: give its exam id");
  if (Has(grant, kTeamRoles) && grant.session.empty())
    return InvalidArgument(
        "team roles (commander, investigator, scribe, comms) belong to one session: give its id");
  std::lock_guard<std::mutex> lock(issue_mu_);
  // Sessions and audit records name their token's holder: a name, once
  // issued, is never another person's, even after it is revoked.
  for (const auto& [d, g] : book_.All())
    if (g.name == grant.name)
      return AlreadyExists("a token named '" + grant.name + "' was issued already" +
                           (g.revoked ? " (and revoked)" : "") +
                           "; names are never reused (sessions and audit records name them): pick another");
  grant.issued_ms = UnixNowMs();
  grant.revoked = false;
  const std::string token = NewToken();
  const std::string digest = TokenDigest(token);
  FD_RETURN_IF_ERROR(store_->SaveGrant(digest, grant));  // stored before it works
  book_.Restore(digest, grant);
  return token;
}

StatusOr<int> Gatekeeper::Revoke(const std::string& name) {
  std::lock_guard<std::mutex> lock(issue_mu_);
  for (const auto& [d, g] : book_.All())
    if (g.name == name && !g.revoked && Has(g, kRoleOwner))
      return PermissionDenied(
          "the owner token is not revoked over the API: delete <state-dir>/owner.token and "
          "restart the controller, which writes a new one and revokes the old");
  auto n = RevokeWhere([&](const Grant& g) { return g.name == name; });
  if (!n.ok()) return n.status();
  if (*n == 0) return NotFound("no live token is named '" + name + "'; `firedrill token list` shows them");
  return n;
}

std::vector<Grant> Gatekeeper::List() const {
  std::vector<Grant> out;
  for (const auto& [d, g] : book_.All()) out.push_back(g);
  return out;
}

}  // namespace firedrill::controller
