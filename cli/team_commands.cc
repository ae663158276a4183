#include "cli/team_commands.h"

#include <cstring>
#include <ctime>
#include <filesystem>

#include "cli/output.h"
#include "common/paths.h"

namespace firedrill::cli {

struct TeamCommands {
  CLI::App* note = nullptr;
  CLI::App* update = nullptr;
  CLI::App* propose = nullptr;
  CLI::App* timeline = nullptr;
  CLI::App* postmortem = nullptr;
  std::vector<std::string> words;
  bool follow = false;
  int64_t after = 0;
  std::string out;
};

std::shared_ptr<TeamCommands> AddTeamCommands(CLI::App& app) {
  auto c = std::make_shared<TeamCommands>();
  c->note = app.add_subcommand("note", "add a note to the session's shared timeline (anyone on the team)");
  c->note->add_option("TEXT", c->words, "what you saw or did")->required();
  c->update = app.add_subcommand("update", "post a status update to the timeline (comms, commander)");
  c->update->add_option("TEXT", c->words, "the update, as stakeholders would read it")->required();
  c->propose = app.add_subcommand(
      "propose",
      "propose a diagnosis on the timeline for the commander (investigators); `diagnose` submits one");
  c->propose->add_option("TEXT", c->words, "the cause and culprits you propose, and why")->required();
  c->timeline = app.add_subcommand("timeline", "the session's shared timeline: who did what, and when");
  c->timeline->add_flag("-f,--follow", c->follow, "keep watching: each new entry as it happens");
  c->timeline->add_option("--after", c->after, "start after this entry number");
  c->postmortem = app.add_subcommand(
      "postmortem",
      "the drill's postmortem (SRE template; once it is scored): Markdown, or HTML with -o FILE.html");
  c->postmortem->add_option("-o,--out", c->out,
                            "write it to this new file (.html: the HTML page; else Markdown)");
  return c;
}

std::string TimelineLine(const v1::TimelineItem& t) {
  const std::time_t secs = static_cast<std::time_t>(t.unix_ms() / 1000);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char clock[16];
  std::strftime(clock, sizeof clock, "%H:%M:%S", &tm);
  const std::string who = t.role().empty() ? t.who() : t.who() + " (" + t.role() + ")";
  return std::to_string(t.seq()) + "  " + clock + "  " + who + "  " + t.kind() + "  " + t.text();
}

namespace {

std::string Joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

}  // namespace

std::optional<int> RunTeamCommand(TeamCommands& c, CliContext& ctx, DrillClient& client) {
  CLI::App* post = c.note->parsed()      ? c.note
                   : c.update->parsed()  ? c.update
                   : c.propose->parsed() ? c.propose
                                         : nullptr;
  if (!post && !c.timeline->parsed() && !c.postmortem->parsed()) return std::nullopt;
  auto id = CurrentSession(ctx);
  if (!id.ok()) return Fail(ctx, id.status());
  if (post) {
    const std::string kind = post == c.note ? "note" : post == c.update ? "update" : "proposal";
    auto item = client.PostTimeline(*id, kind, Joined(c.words));
    if (!item.ok()) return Fail(ctx, item.status());
    *ctx.out << (ctx.json ? ToJsonLine(*item) : TimelineLine(*item)) << "\n";
    return 0;
  }
  if (c.timeline->parsed()) {
    Status st = client.WatchTimeline(*id, c.follow, c.after, [&](const v1::TimelineItem& t) {
      *ctx.out << (ctx.json ? ToJsonLine(t) : TimelineLine(t)) << "\n";
      ctx.out->flush();
      return true;
    });
    return st.ok() ? 0 : Fail(ctx, st);
  }
  auto pm = client.GetPostmortem(*id);
  if (!pm.ok()) return Fail(ctx, pm.status());
  if (c.out.empty()) {
    *ctx.out << (ctx.json ? ToJson(*pm) + "\n" : pm->markdown());
    return 0;
  }
  const bool html = std::filesystem::path(c.out).extension() == ".html";
  if (const int err = WriteNewFile(c.out, html ? pm->html() : pm->markdown(), 0644); err != 0)
    return Fail(ctx, FailedPrecondition(c.out + ": " + std::strerror(err) +
                                        (err == EEXIST ? " (it is not overwritten: pick a new name)" : "")));
  *ctx.out << "wrote " << c.out << "\n";
  return 0;
}

}  // namespace firedrill::cli
