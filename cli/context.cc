#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/paths.h"

namespace firedrill::cli {

std::string ContextFile() {
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) return std::string(x) + "/firedrill/context";
  const char* home = std::getenv("HOME");
  // No home, no context: never a shared place such as /tmp, where another
  // user could point this CLI at a controller of theirs.
  return home && *home ? std::string(home) + "/.config/firedrill/context" : "";
}

SavedContext LoadSavedContext() {
  SavedContext c;
  if (ContextFile().empty()) return c;
  std::ifstream in(ContextFile());
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "controller") c.controller = v;
    if (k == "state_dir") c.state_dir = v;
    if (k == "tls_ca") c.tls_ca = v;
  }
  return c;
}

void SaveContext(const SavedContext& c) {
  const std::string path = ContextFile();
  if (path.empty()) return;
  std::string err;
  if (!MakeDirs(path.substr(0, path.rfind('/')), &err)) return;
  std::ofstream(path, std::ios::trunc)
      << "controller=" << c.controller << "\nstate_dir=" << c.state_dir << "\n"
      << (c.tls_ca.empty() ? "" : "tls_ca=" + c.tls_ca + "\n");
}

void ResolveContext(CliContext* ctx, bool controller_given, bool state_dir_given, bool tls_ca_given) {
  const bool controller_env = std::getenv("FIREDRILL_CONTROLLER") && *std::getenv("FIREDRILL_CONTROLLER");
  const bool state_env = std::getenv("FIREDRILL_STATE_DIR") && *std::getenv("FIREDRILL_STATE_DIR");
  const SavedContext saved = LoadSavedContext();
  if (!controller_given && !controller_env && !saved.controller.empty()) ctx->controller = saved.controller;
  if (!state_dir_given && !state_env && !saved.state_dir.empty() && saved.controller == ctx->controller)
    ctx->state_dir = saved.state_dir;
  const bool tls_env = std::getenv("FIREDRILL_TLS_CA") && *std::getenv("FIREDRILL_TLS_CA");
  if (!tls_ca_given && tls_env) ctx->tls_ca = std::getenv("FIREDRILL_TLS_CA");
  if (!tls_ca_given && !tls_env && !saved.tls_ca.empty() && saved.controller == ctx->controller)
    ctx->tls_ca = saved.tls_ca;
}

Status UseToken(const CliContext& ctx, DrillClient* client) {
  auto token = ResolveToken(ctx.token_file, ctx.state_dir, ctx.controller);
  if (!token.ok()) return token.status();
  client->SetToken(*token);
  return Status::Ok();
}

StatusOr<std::string> CurrentSession(const CliContext& ctx) {
  if (!ctx.session.empty()) return ctx.session;
  std::ifstream in(ctx.state_dir + "/current-session");
  std::string id;
  std::getline(in, id);
  if (id.empty()) {
    return FailedPrecondition("no current session; start one with `firedrill start SCENARIO` (or pass --session ID)");
  }
  return id;
}

void RememberSession(const CliContext& ctx, const std::string& id) {
  std::string err;
  if (MakePrivateDir(ctx.state_dir, &err)) std::ofstream(ctx.state_dir + "/current-session") << id << "\n";
}

int Fail(const CliContext& ctx, const Status& st) {
  if (ctx.json) {
    *ctx.err << nlohmann::json{{"error", {{"code", StatusCodeName(st.code())}, {"message", st.message()}}}}.dump(
                    -1, ' ', false, nlohmann::json::error_handler_t::replace)
             << "\n";
  } else {
    *ctx.err << "error: " << st.message() << "\n";
  }
  return 1;
}

}  // namespace firedrill::cli
