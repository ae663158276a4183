// The firedrill command line: parsing, dispatch, and each subcommand.
//   commands.cc          parsing, dispatch, the read-only views (logs, top, trace, node, fr, probe, config)
//   session_commands.cc  start, diagnose, fix, hint, score, end, scenarios show, causes
//   context.cc           which controller and state dir, the current session, errors
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "cli/client.h"

namespace firedrill::cli {

struct CliContext {
  std::string controller;
  std::string state_dir;
  std::string session;  // --session, else the remembered current session
  std::string token_file;  // --token-file (else FIREDRILL_TOKEN, else the state dir's owner token)
  std::string tls_ca;      // --tls-ca: the controller speaks TLS with a certificate this CA signed
  bool json = false;
  std::ostream* out;
  std::ostream* err;
};

// Runs `firedrill ARGS...` (args[0] is the program name). Returns the exit
// code; errors are one line on `err` (a JSON object under --json).
int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// --- context.cc ---------------------------------------------------------------

// What `up` last started, so that later commands find that controller and
// its state dir without flags: $XDG_CONFIG_HOME/firedrill/context (or
// ~/.config/firedrill/context), lines `controller=ADDR`, `state_dir=DIR`
// and, for a controller that speaks TLS, `tls_ca=FILE`.
struct SavedContext {
  std::string controller;
  std::string state_dir;
  std::string tls_ca;  // `up --tls DIR`: DIR/ca.pem
};
std::string ContextFile();
SavedContext LoadSavedContext();
void SaveContext(const SavedContext& c);
// Gives `client` the token this command presents (cli/client.h ResolveToken).
Status UseToken(const CliContext& ctx, DrillClient* client);

// Fills in what the flags left open: --controller, else FIREDRILL_CONTROLLER,
// else the saved context's, else 127.0.0.1:50071; --state-dir, else
// FIREDRILL_STATE_DIR, else the saved context's (when it belongs to that
// controller), else the default; --tls-ca, else FIREDRILL_TLS_CA, else the
// saved context's (when it belongs to that controller).
void ResolveContext(CliContext* ctx, bool controller_given, bool state_dir_given, bool tls_ca_given = false);

StatusOr<std::string> CurrentSession(const CliContext& ctx);
void RememberSession(const CliContext& ctx, const std::string& id);
// Prints the error (one line, or {"error": {...}} under --json); returns 1.
int Fail(const CliContext& ctx, const Status& st);

// --- session_commands.cc ------------------------------------------------------

// Polls until the session leaves `while_states`, drawing the run's progress.
StatusOr<v1::SessionStatus> WaitWhile(DrillClient& client, const std::string& id,
                                      const std::vector<std::string>& while_states, const std::string& label,
                                      int timeout_s);
// "KEY=VALUE" -> setting; InvalidArgument otherwise.
StatusOr<v1::FixSetting> ParseSetting(const std::string& kv);
// "CAUSE" or "CAUSE:R1,R2" -> a finding; InvalidArgument otherwise.
StatusOr<v1::Finding> ParseFinding(const std::string& text);
// The findings of `diagnose --cause ... [--rank ...]`: one --cause takes the
// --rank list; several causes carry their ranks as CAUSE:R1,R2.
StatusOr<std::vector<v1::Finding>> FindingsFromFlags(const std::vector<std::string>& causes,
                                                     const std::vector<int>& ranks);
// The causes a diagnosis may name, for `diagnose --help`.
std::string CauseHelp();

int CmdStart(CliContext& ctx, DrillClient& client, const std::string& scenario, int64_t seed, bool wait);
int CmdDiagnose(CliContext& ctx, DrillClient& client, const std::vector<std::string>& causes,
                const std::vector<int>& ranks, const std::string& note);
int CmdFix(CliContext& ctx, DrillClient& client, const std::vector<int>& replace, const std::vector<std::string>& sets,
           bool no_change, bool wait, int64_t resume_from = -1);
int CmdHint(CliContext& ctx, DrillClient& client);
int CmdScore(CliContext& ctx, DrillClient& client, const std::string& id);
// `report`: the session's attempt as Markdown, or HTML with `out` FILE.html.
int CmdReport(CliContext& ctx, DrillClient& client, const std::string& id, const std::string& out);
int CmdEnd(CliContext& ctx, DrillClient& client);
int CmdScenarioShow(CliContext& ctx, DrillClient& client, const std::string& id);
int CmdCauses(CliContext& ctx, DrillClient& client);

}  // namespace firedrill::cli
