// The commands that act on a session: start, diagnose, fix, hint, score, report, end;
// and the catalogue's `scenarios show` and `causes`.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "cli/commands.h"
#include "cli/output.h"
#include "cli/report.h"
#include "common/paths.h"
#include "faults/registry.h"

namespace firedrill::cli {

namespace {

// What the session is doing, for the progress line.
std::string Phase(const v1::SessionStatus& st) {
  const std::string& state = st.session().state();
  if (state == "created") return "starting the job's agents";
  if (state == "baseline") return "measuring the healthy baseline";
  if (state == "fixing") return "applying the fix";
  if (state == "verifying") {
    if (st.run().kind() == "healthy") return "verifying: measuring the healthy job";
    if (st.run().kind() == "verify") return "verifying: measuring the fixed job";
    return "verifying";
  }
  return state;
}

void PrintFailureEvents(const v1::SessionStatus& st, std::ostream& out) {
  for (const auto& e : st.events()) {
    if (e.kind() == "aborted" || e.kind() == "rank_lost" || e.kind() == "rank_failed") out << "  " << e.message() << "\n";
  }
}

}  // namespace

StatusOr<v1::FixSetting> ParseSetting(const std::string& kv) {
  const size_t eq = kv.find('=');
  // An empty value is a mistake, except where it means "none":
  // checkpoint.resume_from= starts the job from step 0.
  const bool may_be_empty = eq != std::string::npos && kv.substr(0, eq) == "checkpoint.resume_from";
  if (eq == std::string::npos || eq == 0 || (eq + 1 == kv.size() && !may_be_empty)) {
    return InvalidArgument("--set expects KEY=VALUE (e.g. --set data.batch_size=32), got '" + kv + "'");
  }
  v1::FixSetting s;
  s.set_key(kv.substr(0, eq));
  s.set_value(kv.substr(eq + 1));
  return s;
}

StatusOr<v1::Finding> ParseFinding(const std::string& text) {
  v1::Finding f;
  const size_t colon = text.find(':');
  f.set_cause(text.substr(0, colon));
  if (f.cause().empty()) return InvalidArgument("--cause expects CAUSE or CAUSE:RANK[,RANK...], got '" + text + "'");
  if (colon == std::string::npos) return f;
  const std::string ranks = text.substr(colon + 1);
  size_t from = 0;
  while (from <= ranks.size()) {
    const size_t comma = std::min(ranks.find(',', from), ranks.size());
    const std::string r = ranks.substr(from, comma - from);
    int v = -1;
    auto [p, ec] = std::from_chars(r.data(), r.data() + r.size(), v);
    if (r.empty() || ec != std::errc() || p != r.data() + r.size() || v < 0)
      return InvalidArgument("--cause " + text + ": ranks after ':' are numbers separated by ',' (e.g. straggler:2)");
    f.add_culprit_ranks(v);
    from = comma + 1;
  }
  return f;
}

StatusOr<std::vector<v1::Finding>> FindingsFromFlags(const std::vector<std::string>& causes,
                                                     const std::vector<int>& ranks) {
  std::vector<v1::Finding> out;
  for (const auto& c : causes) {
    auto f = ParseFinding(c);
    if (!f.ok()) return f.status();
    out.push_back(*f);
  }
  if (!ranks.empty()) {
    if (out.size() != 1)
      return InvalidArgument("--rank goes with a single --cause; with several causes give each its ranks as "
                             "CAUSE:RANK[,RANK] (e.g. --cause straggler:2 --cause padding-waste)");
    if (out[0].culprit_ranks_size() > 0)
      return InvalidArgument("give the ranks either as --rank or after the cause (CAUSE:RANK), not both");
    std::set<int> seen;
    for (int r : ranks) {
      if (!seen.insert(r).second) return InvalidArgument("--rank " + std::to_string(r) + " is given twice");
      out[0].add_culprit_ranks(r);
    }
  }
  return out;
}

std::string CauseHelp() {
  std::string s = "the cause (repeat for several faults at once, each as CAUSE:RANK[,RANK]); one of:";
  for (const auto& c : faults::CauseTaxonomy()) s += "\n  " + c.cause + ": " + c.meaning;
  return s;
}

StatusOr<v1::SessionStatus> WaitWhile(DrillClient& client, const std::string& id,
                                      const std::vector<std::string>& while_states, const std::string& label,
                                      int timeout_s) {
  Progress bar(label);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (true) {
    auto st = client.GetStatus(id);
    if (!st.ok()) return st.status();
    const std::string& state = st->session().state();
    if (std::find(while_states.begin(), while_states.end(), state) == while_states.end()) return st;
    if (std::chrono::steady_clock::now() > deadline) {
      return DeadlineExceeded("session " + id + " is still '" + state + "' after " + std::to_string(timeout_s) +
                              " s; check `firedrill status`");
    }
    bar.Update(Phase(*st), st->run().steps_done(), state == "created" ? 0 : st->run().steps_total());
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

int CmdStart(CliContext& ctx, DrillClient& client, const std::string& scenario, int64_t seed, bool wait) {
  if (seed < 0) return Fail(ctx, InvalidArgument("--seed must be positive (or 0 for a random one), got " + std::to_string(seed)));
  auto info = client.StartSession(scenario, seed);
  if (!info.ok()) return Fail(ctx, info.status());
  RememberSession(ctx, info->session_id());
  if (!wait) {
    if (ctx.json) *ctx.out << ToJson(*info) << "\n";
    else *ctx.out << "session " << info->session_id() << " started (seed " << info->seed() << ")\n";
    return 0;
  }
  if (!ctx.json) {
    *ctx.out << "session " << info->session_id() << ": " << info->title() << " (" << info->scenario_id() << ", seed "
             << info->seed() << ")\n\n"
             << info->briefing() << "\n";
  }
  auto st = WaitWhile(client, info->session_id(), {"created", "baseline"}, "", 300);
  if (!st.ok()) return Fail(ctx, st.status());
  const std::string& state = st->session().state();
  if (ctx.json) {
    if (state != "running")
      return Fail(ctx, Aborted("session " + info->session_id() + " " + state + ": " + st->session().end_reason()));
    *ctx.out << ToJson(*st) << "\n";
    return 0;
  }
  if (state != "running") {
    *ctx.err << "error: session " << info->session_id() << " " << state
             << (st->session().end_reason().empty() ? "" : ": " + st->session().end_reason()) << "\n";
    PrintFailureEvents(*st, *ctx.err);
    return 1;
  }
  *ctx.out << "healthy baseline measured: " << Num(st->baseline().throughput_samples_per_s())
           << " samples/s, median step " << Num(st->baseline().median_step_ms(), 1) << " ms\n"
           << "the job is running; investigate with `firedrill status`\n";
  return 0;
}

int CmdDiagnose(CliContext& ctx, DrillClient& client, const std::vector<std::string>& causes,
                const std::vector<int>& ranks, const std::string& note) {
  auto findings = FindingsFromFlags(causes, ranks);
  if (!findings.ok()) return Fail(ctx, findings.status());
  auto id = CurrentSession(ctx);
  if (!id.ok()) return Fail(ctx, id.status());
  v1::SubmitDiagnosisRequest req;
  req.set_session_id(*id);
  if (findings->size() == 1) {
    req.set_cause((*findings)[0].cause());
    *req.mutable_culprit_ranks() = (*findings)[0].culprit_ranks();
  } else {
    for (const auto& f : *findings) *req.add_findings() = f;
  }
  req.set_note(note);
  auto resp = client.SubmitDiagnosis(req);
  if (!resp.ok()) return Fail(ctx, resp.status());
  if (ctx.json) {
    *ctx.out << ToJson(*resp) << "\n";
    return 0;
  }
  std::string what;
  for (const auto& f : *findings) {
    std::string rs;
    for (int r : f.culprit_ranks()) rs += (rs.empty() ? "" : ",") + std::to_string(r);
    what += (what.empty() ? "" : " + ") + f.cause() + (rs.empty() ? "" : " on rank " + rs);
  }
  *ctx.out << "diagnosis #" << resp->diagnosis_id() << " recorded: " << what << "\n";
  if (resp->revisions() > 0)
    *ctx.out << "(revision " << resp->revisions() << ": each revision after the first costs " << resp->revision_cost()
             << " points; the diagnosis in force when you apply the fix is the one scored)\n";
  return 0;
}

int CmdFix(CliContext& ctx, DrillClient& client, const std::vector<int>& replace, const std::vector<std::string>& sets,
           bool no_change, bool wait, int64_t resume_from) {
  v1::ApplyFixRequest req;
  for (const auto& kv : sets) {
    auto s = ParseSetting(kv);
    if (!s.ok()) return Fail(ctx, s.status());
    if (resume_from >= 0 && s->key() == "checkpoint.resume_from")
      return Fail(ctx, InvalidArgument("give --resume-from STEP or --set checkpoint.resume_from=..., not both"));
    *req.add_settings() = *s;
  }
  std::set<int> seen;
  for (int r : replace) {
    if (!seen.insert(r).second) return Fail(ctx, InvalidArgument("--replace-host " + std::to_string(r) + " is given twice"));
    req.add_replace_host_ranks(r);
  }
  req.set_no_change(no_change);
  if (sets.empty() && replace.empty() && resume_from < 0 && !no_change) {
    return Fail(ctx, InvalidArgument("a fix needs --set KEY=VALUE, --replace-host RANK or --resume-from STEP, or "
                                     "--no-change if nothing needs changing; a session has one fix, and it ends the "
                                     "attempt"));
  }
  auto id = CurrentSession(ctx);
  if (!id.ok()) return Fail(ctx, id.status());
  req.set_session_id(*id);
  if (resume_from >= 0) {
    // The checkpoint of that step in the job's own checkpoint directory.
    auto st = client.GetStatus(*id);
    if (!st.ok()) return Fail(ctx, st.status());
    const std::string& dir = st->job().checkpoint().dir();
    if (dir.empty()) return Fail(ctx, FailedPrecondition("this job has no checkpoint directory to resume from"));
    v1::FixSetting* r = req.add_settings();
    r->set_key("checkpoint.resume_from");
    r->set_value(dir + "/step-" + std::to_string(resume_from));
  }
  auto resp = client.ApplyFix(req);
  if (!resp.ok()) return Fail(ctx, resp.status());
  if (!wait) {
    if (ctx.json) *ctx.out << ToJson(*resp) << "\n";
    else *ctx.out << "fix #" << resp->fix_id() << " applied; this ends the attempt: verification is running (`firedrill status`)\n";
    return 0;
  }
  if (!ctx.json)
    *ctx.out << "fix #" << resp->fix_id() << " applied; this ends the attempt: the job is re-run and measured, then scored\n";
  auto st = WaitWhile(client, *id, {"running", "fixing", "verifying"}, "", 600);
  if (!st.ok()) return Fail(ctx, st.status());
  if (!st->verification().done()) {
    // Ended or aborted before it was measured: say so, as an error.
    if (ctx.json)
      return Fail(ctx, Aborted("session " + *id + " " + st->session().state() + " before verification: " +
                               st->session().end_reason()));
    *ctx.out << "session is " << st->session().state()
             << (st->session().end_reason().empty() ? "" : ": " + st->session().end_reason()) << "\n";
    PrintFailureEvents(*st, *ctx.out);
    return 1;
  }
  if (ctx.json) {
    *ctx.out << ToJson(st->verification()) << "\n";
  } else {
    PrintVerification(st->verification(), *ctx.out);
    *ctx.out << "see the score with `firedrill score`\n";
  }
  return 0;
}

int CmdHint(CliContext& ctx, DrillClient& client) {
  auto id = CurrentSession(ctx);
  if (!id.ok()) return Fail(ctx, id.status());
  auto h = client.RequestHint(*id);
  if (!h.ok()) return Fail(ctx, h.status());
  if (ctx.json) *ctx.out << ToJson(*h) << "\n";
  else
    *ctx.out << "hint " << h->hints_used() << "/" << h->hints_total() << " (costs " << h->cost()
             << " points): " << h->hint() << "\n";
  return 0;
}

int CmdScore(CliContext& ctx, DrillClient& client, const std::string& id) {
  auto r = client.GetScore(id);
  if (!r.ok()) return Fail(ctx, r.status());
  if (ctx.json) *ctx.out << ToJson(*r) << "\n";
  else PrintScore(*r, *ctx.out);
  return 0;
}

int CmdReport(CliContext& ctx, DrillClient& client, const std::string& id, const std::string& out) {
  auto r = GatherReport(client, id);
  if (!r.ok()) return Fail(ctx, r.status());
  if (ctx.json) {
    *ctx.out << ToJson(r->score) << "\n";  // the score's JSON form (`score --json`)
    return 0;
  }
  if (out.empty()) {
    *ctx.out << ReportMarkdown(*r);
    return 0;
  }
  const bool html = std::filesystem::path(out).extension() == ".html";
  if (const int err = WriteNewFile(out, html ? ReportHtml(*r) : ReportMarkdown(*r), 0644); err != 0)
    return Fail(ctx, FailedPrecondition(out + ": " + std::strerror(err) +
                                        (err == EEXIST ? " (it is not overwritten: pick a new name)" : "")));
  *ctx.out << "wrote " << out << (html ? " (self-contained: its charts are inline SVG)" : "") << "\n";
  return 0;
}

int CmdEnd(CliContext& ctx, DrillClient& client) {
  auto id = CurrentSession(ctx);
  if (!id.ok()) return Fail(ctx, id.status());
  auto info = client.EndSession(*id, std::chrono::seconds(60));
  if (!info.ok()) return Fail(ctx, info.status());
  if (ctx.json) *ctx.out << ToJson(*info) << "\n";
  else
    *ctx.out << "session " << *id << " " << (SessionOver(info->state()) ? info->state() : "ending") << "; its agents are "
             << "stopped" << (info->state() == "ended" || info->state() == "scored" ? "; `firedrill score` has the result" : "")
             << "\n";
  return 0;
}

int CmdScenarioShow(CliContext& ctx, DrillClient& client, const std::string& id) {
  auto d = client.GetScenario(id);
  if (!d.ok()) return Fail(ctx, d.status());
  if (ctx.json) {
    *ctx.out << ToJson(*d) << "\n";
    return 0;
  }
  PrintScenarioDetail(*d, *ctx.out);
  return 0;
}

int CmdCauses(CliContext& ctx, DrillClient& client) {
  auto c = client.ListCauses();
  if (!c.ok()) return Fail(ctx, c.status());
  if (ctx.json) {
    *ctx.out << ToJson(*c) << "\n";
    return 0;
  }
  Table t({"CAUSE", "CLASS", "MEANING"});
  for (const auto& i : c->causes()) t.Add({i.cause(), i.cause_class(), i.meaning()});
  t.Print(*ctx.out);
  return 0;
}

}  // namespace firedrill::cli
