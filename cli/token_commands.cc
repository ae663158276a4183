#include "cli/token_commands.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cli/output.h"
#include "common/paths.h"
#include "common/text.h"

namespace firedrill::cli {

using json = nlohmann::json;

struct TokenCommands {
  CLI::App* token = nullptr;
  CLI::App* issue = nullptr;
  CLI::App* revoke = nullptr;
  CLI::App* list = nullptr;
  CLI::App* whoami = nullptr;
  std::string name;
  std::vector<std::string> roles;
  std::string exam_id;
  std::string session_id;
  std::string out_file;
};

std::shared_ptr<TokenCommands> AddTokenCommands(CLI::App& app) {
  auto c = std::make_shared<TokenCommands>();
  c->token =
      app.add_subcommand("token", "who may call the controller: issue, revoke and list tokens (owner only)");
  c->token->require_subcommand(1);
  c->issue =
      c->token->add_subcommand("issue", "a new token, shown once (the controller keeps only its digest)");
  c->issue->add_option("NAME", c->name, "who holds it, as the audit trail and timeline show it")->required();
  c->issue
      ->add_option("--role", c->roles,
                   "learner, candidate, proctor, instructor, commander, investigator, scribe, comms "
                   "(repeatable, or joined by '+')")
      ->required();
  c->issue->add_option("--exam", c->exam_id, "a candidate's exam");
  c->issue->add_option("--session", c->session_id, "a team role's session");
  c->issue->add_option("--out", c->out_file,
                       "write the token to this new file (mode 0600) instead of printing it");
  c->revoke =
      c->token->add_subcommand("revoke", "revoke every live token of a name: its next call is refused");
  c->revoke->add_option("NAME", c->name, "the token's name")->required();
  c->list = c->token->add_subcommand(
      "list", "every token issued: name, roles, scope, when, revoked (never the token)");
  c->whoami = app.add_subcommand("whoami", "the name and roles of the token this CLI presents");
  return c;
}

namespace {

json ToJson(const v1::TokenInfo& t) {
  return {{"name", t.name()},
          {"roles", t.roles()},
          {"exam_id", t.exam_id()},
          {"session_id", t.session_id()},
          {"issued_unix_ms", t.issued_unix_ms()},
          {"revoked", t.revoked()}};
}

std::string Joined(const google::protobuf::RepeatedPtrField<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : "+") + s;
  return out;
}

std::string Scope(const v1::TokenInfo& t) {
  if (!t.exam_id().empty()) return "exam " + t.exam_id();
  if (!t.session_id().empty()) return "session " + t.session_id();
  return "-";
}

// "alice (learner)", "cmd (commander, session s-1)".
std::string Holder(const v1::TokenInfo& t) {
  const std::string scope = Scope(t);
  return t.name() + " (" + Joined(t.roles()) + (scope == "-" ? "" : ", " + scope) + ")";
}

int Issue(TokenCommands& c, CliContext& ctx, DrillClient& client) {
  if (!c.out_file.empty() && ::access(c.out_file.c_str(), F_OK) == 0)
    return Fail(
        ctx, FailedPrecondition("--out " + c.out_file + " exists (it is not overwritten: pick a new file)"));
  v1::IssueTokenRequest req;
  req.set_name(c.name);
  for (const auto& r : c.roles) req.add_roles(r);
  req.set_exam_id(c.exam_id);
  req.set_session_id(c.session_id);
  auto r = client.IssueToken(req);
  if (!r.ok()) return Fail(ctx, r.status());
  if (!c.out_file.empty()) {
    // Only this user reads it: a token is a credential.
    if (const int err = WriteNewFile(c.out_file, r->token() + "\n", 0600); err != 0) {
      // The token exists now: revoke it rather than leave one nobody holds.
      (void)client.RevokeToken(c.name);
      return Fail(ctx, FailedPrecondition("--out " + c.out_file + ": " + std::strerror(err) +
                                          "; the token was revoked"));
    }
  }
  if (ctx.json) {
    json j = ToJson(r->info());
    if (c.out_file.empty())
      j["token"] = r->token();
    else
      j["token_file"] = c.out_file;
    *ctx.out << j.dump() << "\n";
    return 0;
  }
  *ctx.out << "token for " << Holder(r->info());
  if (c.out_file.empty()) {
    *ctx.out << ", shown this once:\n" << r->token() << "\n";
  } else {
    *ctx.out << " written to " << c.out_file << " (mode 0600)\n";
  }
  *ctx.out << "its holder runs: FIREDRILL_TOKEN=... firedrill --controller " << client.address()
           << " ... (or --token-file FILE)\n";
  return 0;
}

int List(CliContext& ctx, DrillClient& client) {
  auto r = client.ListTokens();
  if (!r.ok()) return Fail(ctx, r.status());
  if (ctx.json) {
    json a = json::array();
    for (const auto& t : r->tokens()) a.push_back(ToJson(t));
    *ctx.out << a.dump() << "\n";
    return 0;
  }
  Table t({"NAME", "ROLES", "SCOPE", "ISSUED", "STATE"});
  for (const auto& tok : r->tokens())
    t.Add({tok.name(), Joined(tok.roles()), Scope(tok), UtcText(tok.issued_unix_ms()),
           tok.revoked() ? "revoked" : "live"});
  t.Print(*ctx.out);
  return 0;
}

}  // namespace

std::optional<int> RunTokenCommand(TokenCommands& c, CliContext& ctx, DrillClient& client) {
  if (c.issue->parsed()) return Issue(c, ctx, client);
  if (c.list->parsed()) return List(ctx, client);
  if (c.revoke->parsed()) {
    auto r = client.RevokeToken(c.name);
    if (!r.ok()) return Fail(ctx, r.status());
    if (ctx.json) {
      *ctx.out << json{{"name", c.name}, {"revoked", r->revoked()}}.dump() << "\n";
    } else {
      *ctx.out << "revoked " << r->revoked() << " token(s) named " << c.name << "\n";
    }
    return 0;
  }
  if (c.whoami->parsed()) {
    auto r = client.WhoAmI();
    if (!r.ok()) return Fail(ctx, r.status());
    if (ctx.json) {
      *ctx.out << ToJson(r->token()).dump() << "\n";
    } else {
      *ctx.out << Holder(r->token()) << " at " << client.address() << "\n";
    }
    return 0;
  }
  return std::nullopt;
}

}  // namespace firedrill::cli
