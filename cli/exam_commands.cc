#include "cli/exam_commands.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/paths.h"
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
};

std::shared_ptr<ExamCommands> AddExamCommands(CLI::App& app) {
  auto c = std::make_shared<ExamCommands>();
  c->exam = app.add_subcommand("exam",
                               "proctored exams: check an exam file, verify signed results and audit trails");
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

}  // namespace

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
