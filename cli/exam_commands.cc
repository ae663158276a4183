#include "cli/exam_commands.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/output.h"
#include "common/paths.h"
#include "common/text.h"
#include "controller/exam/audit_chain.h"
#include "controller/exam/json_read.h"
#include "controller/exam/signing.h"
#include "scenario/exam_file.h"
#include "scenario/loader.h"

namespace firedrill::cli {

using json = nlohmann::json;
using namespace controller::json_read;  // NOLINT: readers that never throw

struct ExamCommands {
  CLI::App* exam = nullptr;
  CLI::App* check = nullptr;
  CLI::App* verify = nullptr;
  CLI::App* verify_audit = nullptr;
  std::vector<std::string> files;
  std::string scenario_dir = DefaultScenarioDir();
  std::vector<std::string> extra_dirs;
  std::string result_file;
  std::string pubkey_file;
  std::string audit_file;
  // The controller's side.
  CLI::App* create = nullptr;
  CLI::App* list = nullptr;
  CLI::App* issue = nullptr;
  CLI::App* start = nullptr;
  CLI::App* status = nullptr;
  CLI::App* open = nullptr;
  CLI::App* finish = nullptr;
  CLI::App* results = nullptr;
  CLI::App* rescore = nullptr;
  CLI::App* retake = nullptr;
  CLI::App* pubkey = nullptr;
  CLI::App* audit = nullptr;
  std::string exam_file;
  std::string exam_id;
  std::string candidate;
  std::string out;
  int sitting = 0;
  int item = 0;
  int points = 0;
  std::string reason;
  bool new_attempt = false;
  bool yes = false;
};

std::shared_ptr<ExamCommands> AddExamCommands(CLI::App& app) {
  auto c = std::make_shared<ExamCommands>();
  c->exam = app.add_subcommand(
      "exam",
      "proctored exams: create and issue (proctor), start/open/finish (candidate), results, rescore, audit, "
      "and offline checks of exam files, signed results and audit trails");
  c->exam->require_subcommand(1);
  c->check = c->exam->add_subcommand(
      "check", "check exam files against the scenario catalogue (no controller needed)");
  c->check->add_option("FILE", c->files, "exam YAML files")->required();
  c->check->add_option("--scenarios", c->scenario_dir, "the shipped scenario folder")->capture_default_str();
  c->check->add_option("--add-scenarios", c->extra_dirs, "a folder of your own scenarios (repeatable)");
  c->verify = c->exam->add_subcommand(
      "verify", "check a signed result file against the controller's public key (no controller needed)");
  c->verify->add_option("RESULT", c->result_file, "a result file (JSON) from `exam results`")->required();
  c->verify->add_option("--pubkey", c->pubkey_file, "the controller's public key (PEM, from `exam pubkey`)")
      ->required();
  c->verify_audit = c->exam->add_subcommand(
      "verify-audit", "check an exported audit trail: any edited, removed or reordered record is named");
  c->verify_audit->add_option("AUDIT", c->audit_file, "an audit trail (JSON lines) from `exam audit`")
      ->required();
  c->verify_audit->add_option("--result", c->result_file,
                              "a signed result: the trail must end where it says (needs --pubkey)");
  c->verify_audit->add_option("--pubkey", c->pubkey_file, "the controller's public key (PEM)");

  // Proctors.
  c->create = c->exam->add_subcommand("create", "create an exam on the controller from its file (proctor)");
  c->create->add_option("FILE", c->exam_file, "the exam YAML (check it first with `exam check`)")->required();
  c->list = c->exam->add_subcommand("list", "exams and every candidate's sitting (proctor)");
  c->issue = c->exam->add_subcommand("issue", "issue a candidate's token for an exam (proctor)");
  c->issue->add_option("EXAM", c->exam_id, "the exam's id")->required();
  c->issue->add_option("NAME", c->candidate, "the candidate, as results name them")->required();
  c->issue->add_option("--out", c->out, "write the token to this new file (mode 0600) instead of showing it");
  c->results = c->exam->add_subcommand(
      "results", "a candidate's signed result, with Markdown and HTML reports (proctor)");
  c->results->add_option("EXAM", c->exam_id, "the exam's id")->required();
  c->results->add_option("CANDIDATE", c->candidate, "the candidate")->required();
  c->results->add_option("--sitting", c->sitting, "which sitting (default: the latest)");
  c->results->add_option("--out", c->out, "a folder to write RESULT.json, .md and .html into");
  c->rescore =
      c->exam->add_subcommand("rescore", "change an item's points, with a reason; re-signs (proctor)");
  c->rescore->add_option("EXAM", c->exam_id, "the exam's id")->required();
  c->rescore->add_option("CANDIDATE", c->candidate, "the candidate")->required();
  c->rescore->add_option("ITEM", c->item, "the item (1-based)")->required();
  c->rescore->add_option("POINTS", c->points, "its new points (0 to its weight)")->required();
  c->rescore->add_option("--reason", c->reason, "why (signed into the result and audited)")->required();
  c->rescore->add_option("--sitting", c->sitting, "which sitting (default: the latest)");
  c->rescore->add_option("--out", c->out, "a folder to write the re-signed result into");
  c->retake =
      c->exam->add_subcommand("retake", "open a retake for a candidate whose sitting failed (proctor)");
  c->retake->add_option("EXAM", c->exam_id, "the exam's id")->required();
  c->retake->add_option("CANDIDATE", c->candidate, "the candidate")->required();
  c->pubkey = c->exam->add_subcommand("pubkey", "the public key results are signed with (PEM)");
  c->pubkey->add_option("--out", c->out, "write it to this new file");
  c->audit = c->exam->add_subcommand("audit", "export a candidate's audit trail (proctor)");
  c->audit->add_option("EXAM", c->exam_id, "the exam's id")->required();
  c->audit->add_option("CANDIDATE", c->candidate, "the candidate (none: the exam's own trail)");
  c->audit->add_option("--out", c->out, "write it to this new file (else standard output)");

  // Candidates (and a proctor's view of a sitting).
  c->start = c->exam->add_subcommand(
      "start", "start your sitting: the exam's clock starts now and runs through disconnects (candidate)");
  c->status =
      c->exam->add_subcommand("status", "your sitting: time left, items, warnings (a proctor names one)");
  c->status->add_option("EXAM", c->exam_id, "a proctor: the exam's id");
  c->status->add_option("CANDIDATE", c->candidate, "a proctor: the candidate");
  c->status->add_option("--sitting", c->sitting, "a proctor: which sitting (default: the latest)");
  c->open = c->exam->add_subcommand(
      "open", "open an item: its drill starts and becomes your current session (candidate)");
  c->open->add_option("ITEM", c->item, "the item (1-based)")->required();
  c->open->add_flag("--new-attempt", c->new_attempt,
                    "start another attempt on a closed item (if the exam allows)");
  c->finish = c->exam->add_subcommand(
      "finish", "end your sitting now: every open item is ended and scored as it stands (candidate)");
  c->finish->add_flag("--yes", c->yes, "really finish (nothing can be changed afterwards)");
  return c;
}

namespace {

StatusOr<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open the " + what);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The result's canonical text, after its signature checked out.
StatusOr<json> VerifiedResult(const std::string& result_file, const std::string& pubkey_file) {
  auto text = ReadFile(result_file, "result file");
  if (!text.ok()) return text.status();
  auto pem = ReadFile(pubkey_file, "public key");
  if (!pem.ok()) return pem.status();
  auto result = controller::VerifySignedResult(*text, *pem, result_file);
  if (!result.ok()) return result.status();
  return json::parse(*result);
}

int Check(ExamCommands& c, CliContext& ctx) {
  std::vector<std::string> dirs{c.scenario_dir};
  dirs.insert(dirs.end(), c.extra_dirs.begin(), c.extra_dirs.end());
  auto catalogue = scenario::LoadScenarioDirs(dirs);
  if (!catalogue.ok()) return Fail(ctx, catalogue.status());
  int bad = 0;
  json all = json::array();
  for (const auto& f : c.files) {
    auto exam = scenario::LoadExamFile(f, *catalogue);
    if (!exam.ok()) {
      ++bad;
      if (ctx.json)
        all.push_back({{"file", f}, {"ok", false}, {"error", exam.status().message()}});
      else
        *ctx.err << "error: " << exam.status().message() << "\n";
      continue;
    }
    if (ctx.json) {
      all.push_back({{"file", f},
                     {"ok", true},
                     {"id", exam->id()},
                     {"items", exam->items_size()},
                     {"points", scenario::ExamPoints(*exam)}});
      continue;
    }
    *ctx.out << f << ": ok: exam '" << exam->id() << "', " << exam->items_size() << " items, "
             << scenario::ExamPoints(*exam) << " points, pass mark " << exam->pass_mark() << "%, "
             << exam->time_limit_min() << " minutes\n";
    for (int i = 0; i < exam->items_size(); ++i) {
      const auto ids = scenario::ItemScenarios(exam->items(i));
      *ctx.out << "  item " << i + 1 << " (" << scenario::ItemPoints(exam->items(i)) << " points): ";
      if (ids.size() == 1)
        *ctx.out << ids[0] << "\n";
      else {
        *ctx.out << "one of " << ids.size() << " drawn per candidate:";
        for (const auto& id : ids) *ctx.out << " " << id;
        *ctx.out << "\n";
      }
    }
  }
  if (ctx.json) *ctx.out << all.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  return bad == 0 ? 0 : 1;
}

int Verify(ExamCommands& c, CliContext& ctx) {
  auto pem = ReadFile(c.pubkey_file, "public key");
  if (!pem.ok()) return Fail(ctx, pem.status());
  auto key = controller::PublicKeyId(*pem);
  if (!key.ok()) return Fail(ctx, key.status());
  auto r = VerifiedResult(c.result_file, c.pubkey_file);
  if (!r.ok()) return Fail(ctx, r.status());
  const json& res = *r;
  const json& audit = Field(res, "audit");
  if (ctx.json) {
    *ctx.out << json{{"valid", true},
                     {"key", *key},
                     {"candidate", Str(res, "candidate")},
                     {"exam", Str(Field(res, "exam"), "id")},
                     {"sitting", Int(res, "sitting")},
                     {"total", Int(res, "total")},
                     {"max", Int(res, "max")},
                     {"passed", Bool(res, "passed")},
                     {"audit_records", Int(audit, "records")},
                     {"audit_head", Str(audit, "head")}}
                    .dump(-1, ' ', false, json::error_handler_t::replace)
             << "\n";
    return 0;
  }
  *ctx.out << c.result_file << ": signature valid (Ed25519, key " << *key << "): candidate "
           << Str(res, "candidate") << ", exam " << Str(Field(res, "exam"), "id") << ", sitting "
           << Int(res, "sitting") << ": " << Int(res, "total") << " of " << Int(res, "max") << " points, "
           << (Bool(res, "passed") ? "passed" : "not passed") << "; audit trail " << Int(audit, "records")
           << " records, head " << Str(audit, "head") << "\n";
  return 0;
}

int VerifyAudit(ExamCommands& c, CliContext& ctx) {
  if (!c.result_file.empty() && c.pubkey_file.empty())
    return Fail(
        ctx, InvalidArgument("--result needs --pubkey: a result counts only once its signature is checked"));
  auto text = ReadFile(c.audit_file, "audit trail");
  if (!text.ok()) return Fail(ctx, text.status());
  std::vector<std::string> hashes;
  auto head = controller::VerifyAuditText(*text, c.audit_file, &hashes);
  if (!head.ok()) return Fail(ctx, head.status());
  int64_t anchored = 0;
  if (!c.result_file.empty()) {
    auto r = VerifiedResult(c.result_file, c.pubkey_file);
    if (!r.ok()) return Fail(ctx, r.status());
    const json& audit = Field(*r, "audit");
    const controller::AuditHead want{Int(audit, "records"), Str(audit, "head")};
    if (Status s = controller::CheckAuditAnchor(hashes, want, c.audit_file); !s.ok()) return Fail(ctx, s);
    anchored = want.count;
  }
  if (ctx.json) {
    *ctx.out << json{{"valid", true}, {"records", head->count}, {"head", head->hash}, {"anchored", anchored}}
                    .dump()
             << "\n";
    return 0;
  }
  *ctx.out << c.audit_file << ": " << head->count << " records, every one chained to the one before (head "
           << head->hash << ")";
  if (c.result_file.empty())
    *ctx.out << "; not anchored: without a signed result (--result, --pubkey) a trail cut short or rewritten "
                "whole would pass too\n";
  else if (anchored == head->count)
    *ctx.out << "; it ends where " << c.result_file << " says it did\n";
  else
    *ctx.out << "; records 1-" << anchored << " are the ones " << c.result_file << " anchors, "
             << head->count - anchored << " more were recorded after it (a rescore, say)\n";
  return 0;
}

// --- the controller's side ---------------------------------------------------

// Writes `text` to a new file (nothing is overwritten).
Status WriteOut(const std::string& path, const std::string& text, unsigned mode) {
  if (const int err = WriteNewFile(path, text, mode); err != 0)
    return FailedPrecondition(path + ": " + std::strerror(err) +
                              (err == EEXIST ? " (it is not overwritten: pick a new name)" : ""));
  return Status::Ok();
}

void PrintSitting(const v1::SittingInfo& s, std::ostream& out) {
  out << "exam " << s.exam_id() << " (" << s.exam_title() << "), candidate " << s.candidate() << ", sitting "
      << s.sitting() << ": " << s.state();
  if (s.state() == "open") {
    const int64_t min = s.remaining_ms() / 60000, sec = (s.remaining_ms() / 1000) % 60;
    out << ", " << min << " min " << sec << " s left (ends " << UtcClockText(s.deadline_unix_ms()) << ")";
  } else if (s.ended_unix_ms() > 0) {
    out << " at " << UtcClockText(s.ended_unix_ms());
  }
  out << "\n";
  Table t({"ITEM", "POINTS", "STATE", "ATTEMPTS", "SESSION", "TITLE"});
  for (const auto& i : s.items())
    t.Add({std::to_string(i.index()), std::to_string(i.points()), i.state(),
           std::to_string(i.attempts_used()) + "/" + std::to_string(i.attempts()),
           i.session_id().empty() ? "-" : i.session_id(), i.title().empty() ? "-" : i.title()});
  t.Print(out);
  for (const auto& w : s.warnings()) out << "warning: " << w << "\n";
  if (s.max_total() > 0)
    out << "result: " << s.total() << " of " << s.max_total() << " points, "
        << (s.passed() ? "passed" : "not passed") << "\n";
  for (const auto& i : s.items())
    for (const auto& f : i.flags()) out << "for review, item " << i.index() << ": " << f << "\n";
}

int Sitting(CliContext& ctx, const StatusOr<v1::SittingInfo>& s) {
  if (!s.ok()) return Fail(ctx, s.status());
  if (ctx.json)
    *ctx.out << ToJson(*s) << "\n";
  else
    PrintSitting(*s, *ctx.out);
  return 0;
}

// The result files of a sitting, under `dir`: EXAM-CANDIDATE-N.json (the
// signed result), .md and .html.
int ResultOut(ExamCommands& c, CliContext& ctx, const StatusOr<v1::ExamResultResponse>& r) {
  if (!r.ok()) return Fail(ctx, r.status());
  const json signed_doc = json::parse(r->signed_json(), nullptr, /*allow_exceptions=*/false);
  const json& res = Field(signed_doc, "result");
  if (!c.out.empty()) {
    const std::string base =
        c.out + "/" + c.exam_id + "-" + c.candidate + "-" + std::to_string(Int(res, "sitting"));
    std::error_code ec;
    std::filesystem::create_directories(c.out, ec);
    for (const auto& [ext, text] : {std::pair<std::string, std::string>{".json", r->signed_json()},
                                    {".md", r->markdown()},
                                    {".html", r->html()}}) {
      // A rescore writes a new set beside the old: -r2, -r3, ...
      std::string path = base + ext;
      for (int n = 2; ::access(path.c_str(), F_OK) == 0; ++n) path = base + "-r" + std::to_string(n) + ext;
      if (Status st = WriteOut(path, text, 0644); !st.ok()) return Fail(ctx, st);
      if (!ctx.json) *ctx.out << "wrote " << path << "\n";
    }
  }
  if (ctx.json) {
    *ctx.out << r->signed_json();
    return 0;
  }
  if (c.out.empty()) *ctx.out << r->markdown();
  *ctx.out << "candidate " << Str(res, "candidate") << ": " << Int(res, "total") << " of " << Int(res, "max")
           << " points, " << (Bool(res, "passed") ? "passed" : "not passed")
           << "; check the signature offline with `firedrill exam verify RESULT.json --pubkey KEY.pem`\n";
  return 0;
}

}  // namespace

std::optional<int> RunExamServerCommand(ExamCommands& c, CliContext& ctx, DrillClient& client) {
  if (c.create->parsed()) {
    auto yaml = ReadFile(c.exam_file, "exam file");
    if (!yaml.ok()) return Fail(ctx, yaml.status());
    auto e = client.CreateExam(*yaml, c.exam_file);
    if (!e.ok()) return Fail(ctx, e.status());
    if (ctx.json) {
      *ctx.out << ToJson(*e) << "\n";
      return 0;
    }
    *ctx.out << "exam '" << e->exam_id() << "' created: " << e->items() << " items, " << e->points()
             << " points, pass mark " << e->pass_mark() << "%, " << e->time_limit_min() << " minutes, "
             << e->retakes() << " retake(s)\nissue each candidate a token: firedrill exam issue "
             << e->exam_id() << " NAME --out NAME.token\n";
    return 0;
  }
  if (c.list->parsed()) {
    auto r = client.ListExams();
    if (!r.ok()) return Fail(ctx, r.status());
    if (ctx.json) {
      *ctx.out << ToJson(*r) << "\n";
      return 0;
    }
    for (const auto& e : r->exams()) {
      *ctx.out << e.exam_id() << ": " << e.title() << " (" << e.items() << " items, " << e.points()
               << " points, pass mark " << e.pass_mark() << "%, " << e.time_limit_min() << " minutes)\n";
      Table t({"CANDIDATE", "SITTING", "STATE", "LEFT", "RESULT", "REVIEW"});
      for (const auto& s : e.sittings()) {
        std::string review;  // the items a result flags for an instructor
        for (const auto& i : s.items())
          if (i.flags_size() > 0) review += (review.empty() ? "item " : ", ") + std::to_string(i.index());
        t.Add({s.candidate(), std::to_string(s.sitting()), s.state(),
               s.state() == "open" ? std::to_string(s.remaining_ms() / 60000) + " min" : "-",
               s.max_total() > 0 ? std::to_string(s.total()) + "/" + std::to_string(s.max_total()) +
                                       (s.passed() ? " passed" : " not passed")
                                 : "-",
               review.empty() ? "-" : review});
      }
      if (e.sittings_size() > 0) t.Print(*ctx.out);
    }
    if (r->exams_size() == 0) *ctx.out << "no exams: `firedrill exam create FILE` makes one\n";
    return 0;
  }
  if (c.issue->parsed()) {
    // The file first: a token that cannot be written down is never issued
    // (only the owner could revoke it).
    int fd = -1;
    if (!c.out.empty()) {
      fd = ::open(c.out.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0)
        return Fail(ctx,
                    FailedPrecondition("--out " + c.out + ": " + std::strerror(errno) +
                                       (errno == EEXIST ? " (it is not overwritten: pick a new file)" : "")));
    }
    auto r = client.IssueCandidate(c.exam_id, c.candidate);
    if (fd >= 0) {
      const std::string line = r.ok() ? r->token() + "\n" : "";
      const bool written =
          ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
      ::close(fd);
      if (!r.ok() || !written) std::remove(c.out.c_str());
      if (r.ok() && !written)
        return Fail(
            ctx, Internal("--out " + c.out + ": the token could not be written; ask the owner to revoke '" +
                          c.candidate + "' and issue another name"));
    }
    if (!r.ok()) return Fail(ctx, r.status());
    if (ctx.json) {
      json j = {{"candidate", c.candidate}, {"exam", c.exam_id}};
      if (c.out.empty())
        j["token"] = r->token();
      else
        j["token_file"] = c.out;
      *ctx.out << j.dump() << "\n";
      return 0;
    }
    *ctx.out << "candidate " << c.candidate << " of exam " << c.exam_id;
    if (c.out.empty())
      *ctx.out << ": token, shown this once:\n" << r->token() << "\n";
    else
      *ctx.out << ": token written to " << c.out << " (mode 0600)\n";
    *ctx.out << "they run: firedrill --controller " << client.address() << " --token-file FILE exam start\n";
    return 0;
  }
  if (c.start->parsed()) return Sitting(ctx, client.StartSitting());
  if (c.status->parsed()) {
    v1::GetSittingRequest req;
    req.set_exam_id(c.exam_id);
    req.set_candidate(c.candidate);
    req.set_sitting(c.sitting);
    return Sitting(ctx, client.GetSitting(req));
  }
  if (c.open->parsed()) {
    auto info = client.OpenItem(c.item, c.new_attempt);
    if (!info.ok()) return Fail(ctx, info.status());
    RememberSession(ctx, info->session_id());
    if (ctx.json) {
      *ctx.out << ToJson(*info) << "\n";
      return 0;
    }
    *ctx.out << "item " << c.item << ": " << info->title() << "\nsession " << info->session_id()
             << " (your current session: status, top, logs, probe, diagnose and fix act on it)\n\n"
             << info->briefing() << "\n";
    return 0;
  }
  if (c.finish->parsed()) {
    if (!c.yes)
      return Fail(ctx, FailedPrecondition("`exam finish` ends every open item now and nothing can be changed "
                                          "afterwards: run it again with --yes"));
    return Sitting(ctx, client.FinishSitting(std::chrono::minutes(10)));
  }
  if (c.results->parsed()) {
    v1::GetExamResultRequest req;
    req.set_exam_id(c.exam_id);
    req.set_candidate(c.candidate);
    req.set_sitting(c.sitting);
    return ResultOut(c, ctx, client.GetExamResult(req));
  }
  if (c.rescore->parsed()) {
    v1::RescoreItemRequest req;
    req.set_exam_id(c.exam_id);
    req.set_candidate(c.candidate);
    req.set_sitting(c.sitting);
    req.set_item(c.item);
    req.set_points(c.points);
    req.set_reason(c.reason);
    return ResultOut(c, ctx, client.RescoreItem(req));
  }
  if (c.retake->parsed()) return Sitting(ctx, client.AllowRetake(c.exam_id, c.candidate));
  if (c.pubkey->parsed()) {
    auto k = client.GetExamPublicKey();
    if (!k.ok()) return Fail(ctx, k.status());
    if (c.out.empty()) {
      *ctx.out << (ctx.json ? ToJson(*k) + "\n" : k->pem());
      return 0;
    }
    if (Status st = WriteOut(c.out, k->pem(), 0644); !st.ok()) return Fail(ctx, st);
    if (!ctx.json) *ctx.out << "wrote " << c.out << " (key " << k->key_id() << ")\n";
    return 0;
  }
  if (c.audit->parsed()) {
    auto a = client.ExportAudit(c.exam_id, c.candidate);
    if (!a.ok()) return Fail(ctx, a.status());
    if (c.out.empty()) {
      *ctx.out << a->text();
      return 0;
    }
    if (Status st = WriteOut(c.out, a->text(), 0644); !st.ok()) return Fail(ctx, st);
    if (!ctx.json) *ctx.out << "wrote " << c.out << " (" << a->records() << " records)\n";
    return 0;
  }
  return std::nullopt;
}

std::optional<int> RunExamCommand(ExamCommands& c, CliContext& ctx) {
  try {
    if (c.check->parsed()) return Check(c, ctx);
    if (c.verify->parsed()) return Verify(c, ctx);
    if (c.verify_audit->parsed()) return VerifyAudit(c, ctx);
  } catch (const json::exception& e) {  // defensive: the readers above do not throw
    return Fail(ctx, Internal(std::string("exam: unexpected JSON: ") + e.what()));
  }
  return std::nullopt;
}

}  // namespace firedrill::cli
