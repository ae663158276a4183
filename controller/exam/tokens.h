// Bearer tokens and the roles they carry. A token is shown once, when it is
// issued; the book keeps only its SHA-256, so a copy of the database holds
// no token anyone could present (it holds the answer keys, though: the state
// dir stays the controller's alone).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace firedrill::controller {

// What a token may do. One person may hold several roles.
enum Role : uint32_t {
  kRoleOwner = 1u << 0,         // whoever started the controller: every call
  kRoleLearner = 1u << 1,       // practice sessions of their own (chosen seeds too)
  kRoleCandidate = 1u << 2,     // one exam's items, their own only
  kRoleProctor = 1u << 3,       // exams: create, issue, watch, results, rescore
  kRoleInstructor = 1u << 4,    // scenarios: validate, the autopilot
  kRoleCommander = 1u << 5,     // a team session: the only one who fixes or resolves
  kRoleInvestigator = 1u << 6,  // a team session: tools, proposed diagnoses
  kRoleScribe = 1u << 7,        // a team session: the timeline
  kRoleComms = 1u << 8,         // a team session: status updates
};

// "owner", "candidate", ...; "" for an unknown bit.
const char* RoleName(Role r);
// The roles in `mask`, as "proctor+instructor".
std::string RoleNames(uint32_t mask);
// Parses "proctor+instructor" (or comma-separated); InvalidArgument naming
// the unknown role and listing the known ones.
StatusOr<uint32_t> ParseRoles(const std::string& text);

struct Grant {
  std::string name;  // who, as shown in the audit trail and timeline
  uint32_t roles = 0;
  std::string exam_id;  // a candidate's exam
  std::string session;  // a team role's session
  int64_t issued_ms = 0;
  bool revoked = false;
};

// The stored digest of a token (hex SHA-256).
std::string TokenDigest(const std::string& token);
// A new token: "fdt_" and 64 hex digits (32 random bytes).
std::string NewToken();

class TokenBook {
 public:
  // A new token ("fdt_" and 64 hex digits) for `grant`. The caller shows it
  // once and stores the digest (Digests) with the grant.
  std::string Issue(const Grant& grant, std::string* digest = nullptr);
  // Puts back a grant loaded from the store.
  void Restore(const std::string& digest, const Grant& grant);
  // The grant of a presented token; nullopt for an unknown or revoked one.
  std::optional<Grant> Find(const std::string& token) const;
  // Revokes every grant named `name`; returns their digests, for the caller
  // to store the revocations.
  std::vector<std::string> Revoke(const std::string& name);
  std::vector<std::pair<std::string, Grant>> All() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, Grant> by_digest_;
};

}  // namespace firedrill::controller
