#include "cli/demo.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "analysis/straggler.h"
#include "cli/local_controller.h"
#include "cli/output.h"
#include "common/stats.h"

namespace firedrill::cli {

namespace {

void Heading(std::ostream& out, const std::string& text) { out << "\n== " << text << " ==\n"; }

}  // namespace

int RunDemo(CliContext& ctx, const std::string& scenario, int64_t seed) {
  std::ostream& out = *ctx.out;
  const auto t0 = std::chrono::steady_clock::now();
  DrillClient client(ctx.controller, std::chrono::seconds(10), ctx.tls_ca);
  bool started = false;
  if (!client.Reachable(std::chrono::milliseconds(500))) {
    // The HTTP side on a free port: a demo must not fail for a port in use.
    auto p = StartController(ctx.controller, ctx.state_dir, {}, "", "127.0.0.1:0");
    if (!p.ok()) {
      *ctx.err << "error: " << p.status().message() << "\n";
      return 1;
    }
    started = true;
    out << "started a controller at " << p->address << " (pid " << p->pid << ", log " << p->log_path << ")\n";
    // The drill live in a browser: a one-time link, good for the demo's length.
    if (!p->http_address.empty()) {
      auto token = ResolveToken(ctx.token_file, ctx.state_dir, p->address);
      auto link =
          token.ok() ? NewLoginLink(ctx.state_dir, *token, "/", 900) : StatusOr<LoginLink>(token.status());
      if (link.ok()) {
        out << "watch it live: " << link->url
            << "\n  (a one-time login link, good for 15 min; the dashboard is " << link->home << ")\n";
      } else {
        out << "(no dashboard link: " << link.status().message() << ")\n";
      }
    }
  }
  if (Status st = UseToken(ctx, &client); !st.ok()) {
    *ctx.err << "error: " << st.message() << "\n";
    return 1;
  }
  std::string session_id;
  auto finish = [&](int code) {
    if (!session_id.empty()) (void)client.EndSession(session_id, std::chrono::seconds(60));
    if (started) {
      auto pid = StopController(ctx.state_dir);
      if (pid.ok()) out << "stopped the controller it started (pid " << *pid << ") and its agents\n";
    }
    out << "demo finished in " << Num(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count())
        << " s\n";
    return code;
  };
  auto fail = [&](const Status& st) {
    *ctx.err << "error: " << st.message() << "\n";
    return finish(1);
  };

  Heading(out, "1. start the drill: " + scenario);
  auto info = client.StartSession(scenario, seed);
  if (!info.ok()) return fail(info.status());
  session_id = info->session_id();
  RememberSession(ctx, session_id);
  out << "session " << session_id << " (seed " << info->seed() << "): " << info->title() << "\n\n"
      << info->briefing() << "\n";
  auto st = WaitWhile(client, session_id, {"created", "baseline"}, "", 300);
  if (!st.ok()) return fail(st.status());
  if (st->session().state() != "running") return fail(Aborted("session " + st->session().state()));
  out << "the controller measured a healthy baseline of the same job on this machine: "
      << Num(st->baseline().throughput_samples_per_s()) << " samples/s, median step "
      << Num(st->baseline().median_step_ms(), 1) << " ms\n";

  // The learner's first look, early in the run.
  Heading(out, "2. the learner's first look (`firedrill status`)");
  for (int i = 0; i < 200; ++i) {
    st = client.GetStatus(session_id);
    if (!st.ok()) return fail(st.status());
    if (st->run().steps_done() >= 15) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  PrintStatus(*st, out);

  // Keep watching until the evidence is steady: the same rank stands out in
  // several consecutive looks.
  Heading(out, "3. the job slows down; the learner looks again");
  int culprit = -1, streak = 0, last = -1;
  std::string why;
  const auto watch_until = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (std::chrono::steady_clock::now() < watch_until && streak < 4) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    st = client.GetStatus(session_id);
    if (!st.ok()) return fail(st.status());
    const int r = analysis::FindStraggler(*st, 1.5, &why);
    streak = (r >= 0 && r == last) ? streak + 1 : (r >= 0 ? 1 : 0);
    last = r;
    if (st->run().state() == "finished" || st->run().state() == "failed") break;
  }
  culprit = last;
  PrintStatus(*st, out);

  Heading(out, "4. diagnosis, from the telemetry above");
  v1::SubmitDiagnosisRequest diag;
  diag.set_session_id(session_id);
  v1::ApplyFixRequest fix;
  fix.set_session_id(session_id);
  if (culprit < 0) {
    out << "no rank stands out; the learner concludes nothing is wrong and changes nothing\n";
    diag.set_cause("no-fault");
    fix.set_no_change(true);
  } else {
    out << why << "\n";
    out << "diagnosis: straggler on rank " << culprit << "; fix: move rank " << culprit << " to a fresh host\n";
    diag.set_cause("straggler");
    diag.add_culprit_ranks(culprit);
    diag.set_note(why);
    fix.add_replace_host_ranks(culprit);
  }
  if (auto d = client.SubmitDiagnosis(diag); !d.ok()) return fail(d.status());

  Heading(out, "5. fix and verification (`firedrill fix`)");
  if (auto f = client.ApplyFix(fix); !f.ok()) return fail(f.status());
  st = WaitWhile(client, session_id, {"running", "fixing", "verifying"}, "", 600);
  if (!st.ok()) return fail(st.status());
  PrintStatus(*st, out);

  Heading(out, "6. score (`firedrill score`)");
  auto score = client.GetScore(session_id);
  if (!score.ok()) return fail(score.status());
  PrintScore(*score, out);
  return finish(score->final() ? 0 : 1);
}

}  // namespace firedrill::cli
