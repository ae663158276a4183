#include "controller/exam/tokens.h"

#include "common/suggest.h"
#include "controller/exam/crypto.h"

namespace firedrill::controller {

namespace {

struct Named {
  Role role;
  const char* name;
};
constexpr Named kRoles[] = {
    {kRoleOwner, "owner"},
    {kRoleLearner, "learner"},
    {kRoleCandidate, "candidate"},
    {kRoleProctor, "proctor"},
    {kRoleInstructor, "instructor"},
    {kRoleCommander, "commander"},
    {kRoleInvestigator, "investigator"},
    {kRoleScribe, "scribe"},
    {kRoleComms, "comms"},
};

}  // namespace

const char* RoleName(Role r) {
  for (const auto& n : kRoles)
    if (n.role == r) return n.name;
  return "";
}

std::string RoleNames(uint32_t mask) {
  std::string out;
  for (const auto& n : kRoles)
    if (mask & n.role) out += (out.empty() ? "" : "+") + std::string(n.name);
  return out.empty() ? "none" : out;
}

StatusOr<uint32_t> ParseRoles(const std::string& text) {
  std::vector<std::string> known;
  for (const auto& n : kRoles) known.push_back(n.name);
  uint32_t mask = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = text.find_first_of("+,", pos);
    const std::string part = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (part.empty())
      return InvalidArgument("an empty role name in '" + text + "' (roles are joined by '+')");
    bool found = false;
    for (const auto& n : kRoles)
      if (part == n.name) {
        mask |= n.role;
        found = true;
      }
    if (!found) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return InvalidArgument("unknown role '" + part + "'" + DidYouMean(part, known) + "; roles: " + list);
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return mask;
}

std::string TokenDigest(const std::string& token) { return Sha256Hex("firedrill token\n" + token); }

std::string NewToken() { return "fdt_" + HexEncode(RandomBytes(32)); }

std::string TokenBook::Issue(const Grant& grant, std::string* digest) {
  const std::string token = NewToken();
  const std::string d = TokenDigest(token);
  {
    std::lock_guard<std::mutex> lock(mu_);
    by_digest_[d] = grant;
  }
  if (digest != nullptr) *digest = d;
  return token;
}

void TokenBook::Restore(const std::string& digest, const Grant& grant) {
  std::lock_guard<std::mutex> lock(mu_);
  by_digest_[digest] = grant;
}

std::optional<Grant> TokenBook::Find(const std::string& token) const {
  if (token.empty()) return std::nullopt;
  // The lookup is by digest: timing can tell at most how much of a stored
  // digest a guess's digest shares, which says nothing about the token.
  const std::string d = TokenDigest(token);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_digest_.find(d);
  if (it == by_digest_.end() || it->second.revoked) return std::nullopt;
  return it->second;
}

std::vector<std::string> TokenBook::Revoke(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (auto& [d, g] : by_digest_)
    if (g.name == name && !g.revoked) {
      g.revoked = true;
      out.push_back(d);
    }
  return out;
}

std::vector<std::pair<std::string, Grant>> TokenBook::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {by_digest_.begin(), by_digest_.end()};
}

}  // namespace firedrill::controller
