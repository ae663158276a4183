#include "cli/commands.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <condition_variable>
#include <ctime>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli/autopilot.h"
#include "cli/certs.h"
#include "cli/demo.h"
#include "cli/exam_commands.h"
#include "cli/flight_recorder.h"
#include "cli/local_controller.h"
#include "cli/mesh.h"
#include "cli/metrics.h"
#include "cli/node.h"
#include "cli/output.h"
#include "cli/plan.h"
#include "cli/probe.h"
#include "cli/scenario_tools.h"
#include "cli/team_commands.h"
#include "cli/token_commands.h"
#include "cli/trace.h"
#include "common/paths.h"
#include "common/suggest.h"

namespace firedrill::cli {

namespace {

template <typename T>
int PrintOr(const CliContext& ctx, const StatusOr<T>& r, void (*print)(const T&, std::ostream&)) {
  if (!r.ok()) return Fail(ctx, r.status());
  if (ctx.json) {
    *ctx.out << ToJson(*r) << "\n";
  } else {
    print(*r, *ctx.out);
  }
  return 0;
}

int CmdUp(CliContext& ctx, const std::string& listen, const std::vector<std::string>& scenario_dirs,
          const std::string& tls_dir, const std::string& http_listen) {
  if (auto pid = RunningControllerPid(ctx.state_dir)) {
    *ctx.out << "a controller is already running (pid " << *pid << ") for state dir " << ctx.state_dir << "\n";
    return 0;
  }
  auto p =
      StartController(listen, ctx.state_dir, scenario_dirs, tls_dir, http_listen == "off" ? "" : http_listen);
  if (!p.ok()) return Fail(ctx, p.status());
  // Later commands find this controller, its state and its CA without flags.
  SaveContext({p->address, ctx.state_dir, p->tls_ca});
  *ctx.out << "controller running at " << p->address << " (pid " << p->pid << ")"
           << (p->tls_ca.empty() ? "" : ", TLS (clients trust " + p->tls_ca + ")") << "\n"
           << "  log:   " << p->log_path << "\n"
           << "  state: " << p->state_dir << " (firedrill.db, agent logs in logs/)\n"
           << "  token: " << OwnerTokenFile(p->state_dir) << " (the owner's; this CLI presents it)\n"
           << (p->http_address.empty() ? ""
                                       : "  http:  http://" + p->http_address +
                                             "/ the dashboard (`firedrill dashboard` prints a login link), "
                                             "/metrics for Prometheus (the token as a bearer token)\n")
           << "stop it with `firedrill down`\n";
  return 0;
}

int CmdCerts(CliContext& ctx, const std::string& dir, const std::vector<std::string>& hosts, int days) {
  auto f = MakeCerts(dir, hosts, days);
  if (!f.ok()) return Fail(ctx, f.status());
  std::ifstream in(f->server_cert);
  const std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto names = CertNames(pem);
  std::string list;
  for (const auto& n : names.ok() ? *names : std::vector<std::string>{})
    list += (list.empty() ? "" : ", ") + n;
  *ctx.out << "CA:     " << f->ca_cert << " (give it to clients: --tls-ca), key " << f->ca_key << "\n"
           << "server: " << f->server_cert << " for " << list << ", key " << f->server_key << ", " << days
           << " days\n"
           << "start a controller with it: firedrill up --tls " << dir << " --listen HOST:PORT\n";
  return 0;
}

int CmdDown(CliContext& ctx) {
  auto pid = StopController(ctx.state_dir);
  if (!pid.ok()) return Fail(ctx, pid.status());
  *ctx.out << "controller (pid " << *pid << ") stopped; its agents were stopped with it\n";
  return 0;
}

// A one-time login link to the controller's dashboard: the CLI asks the
// HTTP side (its address is in the state dir) for one with its token, on
// loopback only.
int CmdDashboard(CliContext& ctx, const std::string& session) {
  auto token = ResolveToken(ctx.token_file, ctx.state_dir, ctx.controller);
  if (!token.ok()) return Fail(ctx, token.status());
  auto link = NewLoginLink(ctx.state_dir, *token, session.empty() ? "/" : "/#/s/" + session, 60);
  if (!link.ok()) return Fail(ctx, link.status());
  if (ctx.json) {
    *ctx.out << nlohmann::json{{"url", link->url}, {"expires_in_s", link->expires_in_s}}.dump() << "\n";
    return 0;
  }
  *ctx.out << "open " << link->url << "\n"
           << "  a one-time link for " << link->name << ", valid " << link->expires_in_s
           << " s; it logs this browser in (then " << link->home << ")\n";
  return 0;
}

int CmdLogs(CliContext& ctx, DrillClient& client, const std::string& id, int rank, int tail, bool follow) {
  v1::GetLogsRequest req;
  req.set_session_id(id);
  req.set_rank(rank);
  req.set_offset(-1);
  req.set_tail_lines(tail);
  bool ended = false;
  while (true) {
    auto lg = client.GetLogs(req);
    if (!lg.ok()) return Fail(ctx, lg.status());
    if (ctx.json) *ctx.out << ToJsonLine(*lg) << "\n";
    else *ctx.out << lg->text();
    ctx.out->flush();
    if (!follow) return 0;
    // An ended session's agents write nothing more: print what is left, stop.
    if (ended) return 0;
    req.set_offset(lg->next_offset());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto st = client.GetStatus(id);
    ended = !st.ok() || SessionOver(st->session().state());
  }
}

// `top`: the status table refreshed in place on a terminal; elsewhere (a
// pipe, a file, --json) one frame after another, like `top -b`.
int CmdTop(CliContext& ctx, DrillClient& client, const std::string& id, double delay_s, int frames) {
  if (!(delay_s >= 0.2 && delay_s <= 3600)) return Fail(ctx, InvalidArgument("--delay must be 0.2..3600 seconds"));
  const bool terminal = ctx.out == &std::cout && isatty(STDOUT_FILENO);
  // A stream: every viewer of a session shares one status a refresh.
  int frame = 0;
  Status st = client.WatchStatus(id, static_cast<int>(delay_s * 1000), [&](const v1::SessionStatus& s) {
    ++frame;
    if (ctx.json) {
      *ctx.out << ToJsonLine(s) << "\n";  // one object per line
    } else {
      const std::time_t now = std::time(nullptr);
      char clock[16];
      std::strftime(clock, sizeof clock, "%H:%M:%S", std::localtime(&now));
      *ctx.out << (terminal ? "\033[H\033[2J" : frame > 1 ? "\n" : "") << "firedrill top - " << clock
               << " - every " << delay_s << " s" << (terminal ? " (Ctrl-C to quit)" : "") << "\n";
      PrintStatus(s, *ctx.out);
    }
    ctx.out->flush();
    return !(frames > 0 && frame >= frames);
  });
  return st.ok() ? 0 : Fail(ctx, st);
}

int CmdTrace(CliContext& ctx, DrillClient& client, const std::string& id, const std::string& path,
             const std::string& steps) {
  v1::GetTraceRequest req;
  req.set_session_id(id);
  if (Status st = ParseStepRange(steps, &req); !st.ok()) return Fail(ctx, st);
  auto tr = client.GetTrace(req);
  if (!tr.ok()) return Fail(ctx, tr.status());
  int64_t lo = INT64_MAX, hi = -1, n = 0;
  for (const auto& r : tr->ranks()) {
    for (const auto& s : r.steps()) {
      lo = std::min(lo, s.step());
      hi = std::max(hi, s.step());
      ++n;
    }
  }
  if (n == 0) return Fail(ctx, NotFound("no steps in that range of the " + tr->run() + " run"));
  std::ofstream f(path, std::ios::trunc);
  f << ChromeTraceJson(*tr) << "\n";
  f.close();
  if (!f) return Fail(ctx, Internal("cannot write " + path));
  if (ctx.json) {
    *ctx.out << "{\"file\": \"" << path << "\", \"run\": \"" << tr->run() << "\", \"from_step\": " << lo
             << ", \"to_step\": " << hi + 1 << ", \"ranks\": " << tr->ranks_size() << "}\n";
  } else {
    *ctx.out << "wrote " << path << ": steps " << lo << ".." << hi << " of the " << tr->run() << " run, "
             << tr->ranks_size() << " ranks; open it in https://ui.perfetto.dev or chrome://tracing\n";
  }
  return 0;
}

int CmdNode(CliContext& ctx, DrillClient& client, const std::string& id, int rank, int steps) {
  v1::GetTraceRequest req;
  req.set_session_id(id);
  req.set_last(steps);
  req.set_node(true);
  auto tr = client.GetTrace(req);
  if (!tr.ok()) return Fail(ctx, tr.status());
  const std::vector<NodeView> views = NodeViews(*tr, rank);
  if (views.empty())
    return Fail(ctx, NotFound(rank >= 0 ? "rank " + std::to_string(rank) + " is not in this job (" +
                                              std::to_string(tr->ranks_size()) + " ranks)"
                                        : "no rank has reported a step of the " + tr->run() + " run yet"));
  if (ctx.json) *ctx.out << NodeJson(*tr, views) << "\n";
  else PrintNode(*tr, views, *ctx.out);
  return 0;
}

int CmdMetrics(CliContext& ctx, DrillClient& client, const std::string& id, const std::string& series_csv,
               const std::string& steps, const std::string& run, int rank, bool csv, int max_points) {
  auto series = ParseSeries(series_csv);
  if (!series.ok()) return Fail(ctx, series.status());
  v1::GetTraceRequest range;
  if (Status st = ParseStepRange(steps, &range); !st.ok()) return Fail(ctx, st);
  v1::GetMetricsRequest req;
  req.set_session_id(id);
  req.set_run(run);
  req.set_from_step(range.from_step());
  req.set_to_step(range.to_step());
  req.set_max_points(max_points);
  auto m = client.GetMetrics(req);
  if (!m.ok()) return Fail(ctx, m.status());
  if (rank >= m->ranks_size())
    return Fail(ctx, NotFound("rank " + std::to_string(rank) + " is not in this job (" +
                              std::to_string(m->ranks_size()) + " ranks)"));
  if (ctx.json) *ctx.out << MetricsJson(*m, *series, rank) << "\n";
  else if (csv) *ctx.out << MetricsCsv(*m, *series, rank);
  else PrintMetrics(*m, *series, rank, *ctx.out);
  return 0;
}

// A probe can take many seconds (each size, each pair): say so on a
// terminal while it runs.
StatusOr<v1::RunProbeResponse> ProbeWithProgress(DrillClient& client, const v1::RunProbeRequest& req) {
  std::optional<StatusOr<v1::RunProbeResponse>> result;
  std::mutex mu;
  std::condition_variable cv;
  std::thread t([&] {
    auto r = client.RunProbe(req);
    std::lock_guard<std::mutex> lock(mu);
    result = std::move(r);
    cv.notify_all();
  });
  Progress bar("");
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu);
  while (!cv.wait_for(lock, std::chrono::milliseconds(250), [&] { return result.has_value(); })) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bar.Update(req.spec().op() == "resume"
                   ? "probe resume: two runs from the checkpoint, beside the job (" + Num(s) + " s)"
                   : "probe " + req.spec().op() + ": waiting for a step boundary, then measuring (" + Num(s) + " s)",
               0, 0);
  }
  lock.unlock();
  t.join();
  return std::move(*result);
}

// The command the user meant, for a word that is none.
std::string UnknownCommand(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].empty() || args[i][0] == '-') {
      if (args[i].find('=') == std::string::npos && i + 1 < args.size() && args[i] != "--json") ++i;
      continue;
    }
    std::string all;
    for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
    const std::string near = ClosestMatch(args[i], names);
    return "unknown command '" + args[i] + "'" + (near.empty() ? "" : " (did you mean '" + near + "'?)") +
           "; commands: " + all;
  }
  return "";
}

}  // namespace

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CliContext ctx;
  ctx.controller = DefaultControllerAddress();
  ctx.state_dir = DefaultStateDir();
  ctx.out = &out;
  ctx.err = &err;

  CLI::App app{"firedrill: break-fix drills on a real distributed training job"};
  app.require_subcommand(1);
  app.fallthrough();  // `firedrill status --json` as well as `firedrill --json status`
  auto* controller_opt = app.add_option("--controller", ctx.controller,
                                        "controller address (or FIREDRILL_CONTROLLER; default: the one `up` started)");
  auto* state_opt = app.add_option("--state-dir", ctx.state_dir,
                                   "the controller's state and the current session (or FIREDRILL_STATE_DIR)");
  app.add_option("--session", ctx.session, "session id (default: the last one started here)");
  auto* tls_ca_opt = app.add_option("--tls-ca", ctx.tls_ca,
                                    "the controller speaks TLS: the CA (PEM) that signed its certificate (or "
                                    "FIREDRILL_TLS_CA; default: the one `up --tls` saved)");
  app.add_option(
      "--token-file", ctx.token_file,
      "a file whose first line is the token to present (or FIREDRILL_TOKEN; default: the owner token "
      "of --state-dir, sent only to the controller that wrote it)");
  app.add_flag("--json", ctx.json, "print data as JSON (errors too, on stderr)");

  std::string listen;  // default: --controller, known only after parsing
  std::vector<std::string> add_scenarios;
  auto* up = app.add_subcommand("up", "start a controller in the background");
  up->add_option("--listen", listen, "address to serve on (default: --controller)");
  up->add_option("--add-scenarios", add_scenarios, "a folder of your own scenarios, beside the shipped ones (repeatable)");
  std::string up_tls;
  up->add_option("--tls", up_tls,
                 "serve TLS with DIR/server.pem and DIR/server.key (from `firedrill certs --out DIR`)");
  std::string up_http = kDefaultHttpListen;
  up->add_option("--http-listen", up_http,
                 "the controller's HTTP side (/metrics, the dashboard's API): host:port, or off")
      ->capture_default_str();
  auto* down = app.add_subcommand("down", "stop the background controller and its agents");
  auto* dashboard =
      app.add_subcommand("dashboard", "a one-time link that logs a browser in to the dashboard");
  std::string dashboard_session;
  dashboard->add_option("session", dashboard_session, "open this session's view (default: the session list)");
  std::string certs_dir = "firedrill-tls";
  std::vector<std::string> certs_hosts = {"localhost", "127.0.0.1"};
  int certs_days = 365;
  auto* certs =
      app.add_subcommand("certs", "make a CA and a server certificate for TLS on the controller's port");
  certs
      ->add_option("--out", certs_dir,
                   "folder for ca.pem, ca.key, server.pem, server.key (an existing CA there "
                   "signs the new pair)")
      ->capture_default_str();
  certs->add_option("--host", certs_hosts, "a name or address clients reach the controller by (repeatable)")
      ->capture_default_str();
  certs->add_option("--days", certs_days, "how long the certificates are valid")->capture_default_str();

  auto* scenarios = app.add_subcommand("scenarios", "the scenario catalogue");
  scenarios->require_subcommand(1);
  auto* scen_list = scenarios->add_subcommand("list", "list scenarios");
  std::string show_id;
  auto* scen_show = scenarios->add_subcommand("show", "a scenario's brief: what you may read before starting it");
  scen_show->add_option("ID", show_id, "scenario id")->required();
  std::vector<std::string> scen_files;
  std::string skills_file = DefaultSkillsFile(), scen_dir = DefaultScenarioDir();
  auto* scen_validate = scenarios->add_subcommand("validate", "check scenario files (no controller needed)");
  scen_validate->add_option("FILE", scen_files, "scenario YAML files")->required();
  scen_validate->add_option("--skills", skills_file, "skill-atom table for `skills:`")->capture_default_str();
  auto* scen_coverage = scenarios->add_subcommand("coverage", "which scenarios exercise each skill atom of the course");
  scen_coverage->add_option("--dir", scen_dir, "scenario directory")->capture_default_str();
  scen_coverage->add_option("--skills", skills_file, "skill-atom table (Markdown)")->capture_default_str();
  auto* sessions = app.add_subcommand("sessions", "list sessions, including finished ones");
  auto exam_cmds = AddExamCommands(app);
  auto token_cmds = AddTokenCommands(app);
  auto team_cmds = AddTeamCommands(app);
  auto mesh_cmd = AddMeshCommand(app);
  auto plan_cmd = AddPlanCommand(app);
  auto* causes_cmd = app.add_subcommand("causes", "the causes a diagnosis may name, with their meaning");

  std::string scenario;
  int64_t seed = 0;
  bool no_wait = false;
  auto* start = app.add_subcommand("start", "start a drill session");
  start->add_option("SCENARIO", scenario, "scenario id (see `firedrill scenarios list`)")->required();
  start->add_option("--seed", seed, "fixes every random draw of the scenario (0: random)");
  start->add_flag("--no-wait", no_wait, "return without waiting for the baseline");

  auto* status = app.add_subcommand("status", "per-rank view of the job");
  double top_delay = 2.0;
  int top_frames = 0;
  auto* top = app.add_subcommand("top", "the status table, refreshed in place (Ctrl-C to quit)");
  top->add_option("-d,--delay", top_delay, "seconds between refreshes")->capture_default_str();
  top->add_option("-n,--iterations", top_frames, "stop after N refreshes (0: until the session ends)");
  auto* config = app.add_subcommand("config", "the job's settings (keys as `fix --set` takes them)");
  int log_rank = -1, log_tail = 50;
  bool log_follow = false;
  auto* logs = app.add_subcommand("logs", "a rank's agent log (its own output and library errors)");
  logs->add_option("--rank", log_rank, "rank")->required();
  logs->add_option("--tail", log_tail, "lines to show first")->capture_default_str();
  logs->add_flag("-f,--follow", log_follow, "keep printing new lines (stops when the session ends; Ctrl-C to stop)");
  int fr_last = 8;
  auto* fr = app.add_subcommand("fr", "every rank's flight recorder (recent collectives) and where they disagree");
  fr->add_option("--last", fr_last, "entries per rank to show")->capture_default_str();
  std::string probe_op, probe_min, probe_max;
  int probe_factor = 0, probe_iters = 0, probe_warmup = -1, probe_steps = 0;
  int64_t probe_from = 0;
  auto* probe = app.add_subcommand("probe", "measure the job's collectives between its steps, like nccl-tests");
  probe
      ->add_option(
          "OP", probe_op,
          "allreduce | allgather | reducescatter | p2p | checksum (every parameter's hash on every rank) | "
          "resume (a save and resume from a checkpoint against the same steps straight, bitwise) | "
          "activations (each layer's output magnitudes on the last batch, forward only) | "
          "scaling (the job's model trained on 1, 2, 4, ... of its ranks in turn: one device's rate, MFU "
          "and what each more rank adds) | "
          "memory (each rank's measured breakdown beside the memory model's prediction; no run)")
      ->required()
      ->check(CLI::IsMember({"allreduce", "allgather", "reducescatter", "p2p", "checksum", "resume",
                             "activations", "scaling", "memory"}));
  probe->add_option("-b,--min", probe_min, "smallest size (default 8; p2p: --max)");
  probe->add_option("-e,--max", probe_max, "largest size (default 16M; p2p: the message size, default 4M)");
  probe->add_option("-f,--factor", probe_factor, "size multiplier between rows (default 2)");
  probe->add_option(
      "-n,--iters", probe_iters,
      "timed iterations per size (default 20; scaling: timed steps per rank count, default 10, at most 50)");
  probe->add_option(
      "-w,--warmup", probe_warmup,
      "warm-up iterations per size (default 5; scaling: steps per rank count, default 2, at most 10)");
  probe->add_option("--from", probe_from, "resume: the checkpoint (its step) to start from (default: the newest that verifies)")
      ->check(CLI::PositiveNumber);
  probe->add_option("--steps", probe_steps, "resume: k, the steps before and after the save (default 10)")
      ->check(CLI::Range(1, 200));
  std::string trace_out, trace_steps;
  auto* trace = app.add_subcommand("trace", "the ranks' step timelines as one Chrome trace (Perfetto, chrome://tracing)");
  trace->add_option("-o,--output", trace_out, "file to write")->required();
  trace->add_option("--steps", trace_steps, "FROM:TO (TO exclusive) or FROM: (default: the last 20 steps)");

  int node_rank = -1, node_steps = 20;
  auto* node = app.add_subcommand(
      "node", "each rank's host CPU: bandwidth limit, throttling, where the training thread's steps went "
              "(as nvidia-smi -q -d PERFORMANCE for a GPU)");
  node->add_option("--rank", node_rank, "one rank (default: every rank)");
  node->add_option("--steps", node_steps, "over the last N steps")->capture_default_str()->check(CLI::Range(2, 1000));

  std::string metrics_series, metrics_steps, metrics_run;
  int metrics_rank = -1, metrics_points = 0;
  bool metrics_csv = false;
  auto* metrics = app.add_subcommand(
      "metrics", "the run's training curves, step by step: loss, gradient norm, loss scale, skipped steps, lr, "
                 "throughput (as TensorBoard shows them)");
  metrics->add_option("--series", metrics_series,
                      "comma-separated: loss, grad_norm, loss_scale, skipped, lr, throughput, step_ms, global_batch, "
                      "samples (consumed so far) (default: the first six)");
  metrics->add_option("--steps", metrics_steps, "FROM:TO (TO exclusive) or FROM: (default: the whole run)");
  metrics->add_option("--run", metrics_run, "baseline | main (default: the run in progress, or the last one)")
      ->check(CLI::IsMember({"baseline", "main"}));
  metrics->add_option("--rank", metrics_rank, "one rank (default: the job, over every rank)")->check(CLI::Range(0, 4096));
  metrics->add_flag("--csv", metrics_csv, "print CSV (step,rank,series...) instead of plots");
  metrics->add_option("--max-points", metrics_points,
                      "at most this many steps per rank, evenly thinned (default 2000; 20000 rows in all)")
      ->check(CLI::Range(1, 10000));

  auto* ckpt = app.add_subcommand("ckpt", "the job's checkpoints, each verified as a resume would (manifest, SHA-256)");
  ckpt->require_subcommand(1);
  auto* ckpt_list = ckpt->add_subcommand("list", "every checkpoint, newest first: valid or why not, and what a resume redoes");
  int64_t ckpt_step = -1;
  auto* ckpt_verify = ckpt->add_subcommand("verify", "one checkpoint: what was checked, or the first problem");
  ckpt_verify->add_option("STEP", ckpt_step, "the checkpoint's step (`firedrill ckpt list`)")->required();

  std::vector<std::string> causes;
  std::string note;
  std::vector<int> ranks;
  auto* diagnose = app.add_subcommand(
      "diagnose", "submit your diagnosis (revise it until you apply the fix; each revision after the first costs points)");
  diagnose->add_option("--cause", causes, CauseHelp())->required();
  diagnose->add_option("--rank", ranks, "culprit rank of a single --cause (repeatable)");
  diagnose->add_option("--note", note, "your evidence, in words");

  std::vector<int> replace;
  std::vector<std::string> sets;
  bool no_change = false;
  auto* fix = app.add_subcommand(
      "fix", "apply your one fix: it ends the attempt (the job is re-run, measured and scored)");
  fix->add_option("--replace-host", replace, "move RANK to a fresh host (repeatable)");
  fix->add_option("--set", sets, "change a job setting, KEY=VALUE (repeatable; `firedrill config` lists them)");
  fix->add_flag("--no-change", no_change, "the fix is to change nothing (you found no fault)");
  int64_t resume_from = -1;
  fix->add_option("--resume-from", resume_from,
                  "restart the job from the checkpoint of step STEP (`firedrill ckpt list`): "
                  "checkpoint.resume_from=<the job's checkpoint dir>/step-STEP")
      ->check(CLI::NonNegativeNumber);
  fix->add_flag("--no-wait", no_wait, "return without waiting for verification");

  auto* hint = app.add_subcommand("hint", "take a hint (costs points)");
  auto* score = app.add_subcommand("score", "the session's score, item by item (until scored: only what you submitted)");
  auto* report = app.add_subcommand(
      "report",
      "the session's attempt as a document: Markdown, or with -o FILE.html a page with its charts inline");
  std::string report_out;
  report->add_option("-o,--out", report_out,
                     "write it to this new file (.html: the HTML page; else Markdown)");
  auto* end = app.add_subcommand("end", "end the session (scored as it stands) and stop its agents");

  std::string pilot_scenario;
  auto* autopilot = app.add_subcommand("autopilot", "play a learner through a scenario from its telemetry alone");
  autopilot->add_option("SCENARIO", pilot_scenario, "scenario id")->required();
  autopilot->add_option("--seed", seed, "seed (0: random)");

  std::string demo_scenario = "throughput-halved";
  auto* demo = app.add_subcommand("demo", "run a whole drill, playing the learner");
  demo->add_option("--scenario", demo_scenario, "scenario to play")->capture_default_str();
  demo->add_option("--seed", seed, "seed (0: random)");

  if (args.size() <= 1) {  // `firedrill` alone
    out << app.help();
    return 0;
  }
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp& e) {
    const CLI::App* deepest = &app;  // `scenarios show --help` is show's help
    while (!deepest->get_subcommands().empty()) deepest = deepest->get_subcommands().back();
    out << deepest->help();
    return 0;
  } catch (const CLI::CallForAllHelp& e) {
    out << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    // CLI11 reports a mistyped command as "a subcommand is required": name it.
    if (app.get_subcommands().empty()) {
      if (std::string named = UnknownCommand(app, args); !named.empty()) msg = named;
    }
    msg += " (see `firedrill --help`)";
    if (std::find(args.begin(), args.end(), "--json") != args.end())
      err << nlohmann::json{{"error", {{"code", "INVALID_ARGUMENT"}, {"message", msg}}}}.dump() << "\n";
    else
      err << "error: " << msg << "\n";
    return 2;
  }
  ResolveContext(&ctx, controller_opt->count() > 0, state_opt->count() > 0, tls_ca_opt->count() > 0);

  if (up->parsed())
    return CmdUp(ctx, listen.empty() ? ctx.controller : listen, add_scenarios, up_tls, up_http);
  if (certs->parsed()) return CmdCerts(ctx, certs_dir, certs_hosts, certs_days);
  if (down->parsed()) return CmdDown(ctx);
  if (dashboard->parsed()) return CmdDashboard(ctx, dashboard_session);
  if (scen_validate->parsed()) return RunScenarioValidate(ctx, scen_files, skills_file);
  if (scen_coverage->parsed()) return RunScenarioCoverage(ctx, scen_dir, skills_file);
  if (auto code = RunExamCommand(*exam_cmds, ctx)) return *code;
  if (auto code = RunMeshOffline(*mesh_cmd, ctx)) return *code;
  if (auto code = RunPlanOffline(*plan_cmd, ctx)) return *code;

  DrillClient client(ctx.controller, std::chrono::seconds(10), ctx.tls_ca);
  if (demo->parsed()) return RunDemo(ctx, demo_scenario, seed);
  if (Status st = UseToken(ctx, &client); !st.ok()) return Fail(ctx, st);
  if (auto code = RunTokenCommand(*token_cmds, ctx, client)) return *code;
  if (auto code = RunExamServerCommand(*exam_cmds, ctx, client)) return *code;
  if (auto code = RunTeamCommand(*team_cmds, ctx, client)) return *code;
  if (auto code = RunMeshCommand(*mesh_cmd, ctx, client)) return *code;
  if (auto code = RunPlanCommand(*plan_cmd, ctx, client)) return *code;
  if (autopilot->parsed()) return RunAutopilot(ctx, pilot_scenario, seed);
  if (scen_list->parsed()) return PrintOr(ctx, client.ListScenarios(), &PrintScenarios);
  if (scen_show->parsed()) return CmdScenarioShow(ctx, client, show_id);
  if (causes_cmd->parsed()) return CmdCauses(ctx, client);
  if (sessions->parsed()) return PrintOr(ctx, client.ListSessions(), &PrintSessions);
  if (start->parsed()) return CmdStart(ctx, client, scenario, seed, !no_wait);
  if (diagnose->parsed()) return CmdDiagnose(ctx, client, causes, ranks, note);
  if (fix->parsed()) return CmdFix(ctx, client, replace, sets, no_change, !no_wait, resume_from);
  if (hint->parsed()) return CmdHint(ctx, client);
  if (end->parsed()) return CmdEnd(ctx, client);
  auto id = CurrentSession(ctx);
  if (!id.ok()) return Fail(ctx, id.status());
  if (status->parsed()) return PrintOr(ctx, client.GetStatus(*id), &PrintStatus);
  if (top->parsed()) return CmdTop(ctx, client, *id, top_delay, top_frames);
  if (fr->parsed()) {
    auto rec = client.GetFlightRecorder(*id);
    if (!rec.ok()) return Fail(ctx, rec.status());
    const analysis::FrAnalysis a = analysis::AnalyzeFlightRecords(*rec);
    if (ctx.json) {
      *ctx.out << "{\"records\": " << ToJson(*rec) << ", \"desync\": " << (a.desync ? "true" : "false")
               << ", \"odd_ranks\": [";
      for (size_t i = 0; i < a.odd_ranks.size(); ++i) *ctx.out << (i ? ", " : "") << a.odd_ranks[i];
      *ctx.out << "], \"summary\": " << nlohmann::json(a.summary).dump() << "}\n";
    } else {
      PrintFlightRecords(*rec, a, fr_last, *ctx.out);
    }
    return 0;
  }
  if (logs->parsed()) return CmdLogs(ctx, client, *id, log_rank, log_tail, log_follow);
  if (probe->parsed() && probe_op == "memory") return CmdProbeMemory(ctx, client, *id);
  if (probe->parsed()) {
    v1::RunProbeRequest req;
    req.set_session_id(*id);
    auto* s = req.mutable_spec();
    s->set_op(probe_op);
    for (auto [text, field] : {std::pair{&probe_min, 0}, std::pair{&probe_max, 1}}) {
      if (text->empty()) continue;
      auto size = ParseSize(*text);
      if (!size.ok()) return Fail(ctx, size.status());
      field == 0 ? s->set_min_bytes(*size) : s->set_max_bytes(*size);
    }
    s->set_factor(probe_factor);
    s->set_iters(probe_iters);
    // The request's 0 means "the default (5)", so no warm-up cannot be asked for.
    if (probe_warmup == 0)
      return Fail(ctx, InvalidArgument("--warmup must be at least 1 (the default is 5; scaling: 2)"));
    s->set_warmup_iters(probe_warmup < 0 ? 0 : probe_warmup);
    s->set_from_step(probe_from);
    s->set_resume_steps(probe_steps);
    return PrintOr(ctx, ProbeWithProgress(client, req), &PrintProbe);
  }
  if (trace->parsed()) return CmdTrace(ctx, client, *id, trace_out, trace_steps);
  if (node->parsed()) return CmdNode(ctx, client, *id, node_rank, node_steps);
  if (ckpt_list->parsed()) return PrintOr(ctx, client.ListCheckpoints(*id), &PrintCheckpoints);
  if (ckpt_verify->parsed()) {
    auto v = client.VerifyCheckpoint(*id, ckpt_step);
    if (!v.ok()) return Fail(ctx, v.status());
    if (ctx.json) *ctx.out << ToJson(*v) << "\n";
    else PrintCheckpointVerify(*v, *ctx.out);
    return v->valid() ? 0 : 1;
  }
  if (metrics->parsed())
    return CmdMetrics(ctx, client, *id, metrics_series, metrics_steps, metrics_run, metrics_rank, metrics_csv,
                      metrics_points);
  if (config->parsed()) {
    auto st = client.GetStatus(*id);
    if (!st.ok()) return Fail(ctx, st.status());
    if (ctx.json) *ctx.out << ToJson(st->job()) << "\n";
    else PrintConfig(*st, *ctx.out);
    return 0;
  }
  if (score->parsed()) return CmdScore(ctx, client, *id);
  if (report->parsed()) return CmdReport(ctx, client, *id, report_out);
  return Fail(ctx, InvalidArgument("unknown command; see `firedrill --help`"));
}

}  // namespace firedrill::cli
