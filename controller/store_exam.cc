// The exam tables of the store: grants (token digests and their roles),
// exams (the spec and its variant secret) and audit trails.
#include <sqlite3.h>

#include "controller/store.h"
#include "controller/store_internal.h"

namespace firedrill::controller {

using namespace store_internal;  // NOLINT: the store's own helpers

namespace store_internal {

const char* const kExamSchema = R"sql(
CREATE TABLE IF NOT EXISTS grants (
  digest TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  roles INTEGER NOT NULL,
  exam_id TEXT,
  session TEXT,
  issued_unix_ms INTEGER,
  revoked INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS exams (
  id TEXT PRIMARY KEY,
  spec BLOB NOT NULL,
  secret BLOB NOT NULL,
  created_unix_ms INTEGER
);
CREATE TABLE IF NOT EXISTS audit (
  scope TEXT NOT NULL,
  seq INTEGER NOT NULL,
  unix_ms INTEGER,
  actor TEXT,
  action TEXT,
  args TEXT,
  prev TEXT,
  hash TEXT,
  PRIMARY KEY (scope, seq)
);
CREATE TABLE IF NOT EXISTS timeline (
  session_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  unix_ms INTEGER,
  who TEXT,
  role TEXT,
  kind TEXT,
  text TEXT,
  PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS sittings (
  exam_id TEXT NOT NULL,
  candidate TEXT NOT NULL,
  sitting INTEGER NOT NULL,
  doc TEXT NOT NULL,
  PRIMARY KEY (exam_id, candidate, sitting)
);
)sql";

}  // namespace store_internal

Status Store::SaveGrant(const std::string& digest, const Grant& grant) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, true);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(&s,
                               "INSERT OR REPLACE INTO grants (digest, name, roles, exam_id, session, "
                               "issued_unix_ms, revoked) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                               "save grant"));
  s.BindText(1, digest);
  s.BindText(2, grant.name);
  s.BindInt(3, grant.roles);
  s.BindText(4, grant.exam_id);
  s.BindText(5, grant.session);
  s.BindInt(6, grant.issued_ms);
  s.BindInt(7, grant.revoked ? 1 : 0);
  FD_RETURN_IF_ERROR(c.Run(&s, "save grant of " + grant.name));
  return txn.Commit();
}

StatusOr<std::vector<std::pair<std::string, Grant>>> Store::LoadGrants() {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, false);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(
      &s, "SELECT digest, name, roles, exam_id, session, issued_unix_ms, revoked FROM grants ORDER BY rowid",
      "load grants"));
  std::vector<std::pair<std::string, Grant>> out;
  for (;;) {
    auto row = c.Next(&s, "load grants");
    if (!row.ok()) return row.status();
    if (!*row) break;
    Grant g;
    g.name = s.Text(1);
    g.roles = static_cast<uint32_t>(s.Int(2));
    g.exam_id = s.Text(3);
    g.session = s.Text(4);
    g.issued_ms = s.Int(5);
    g.revoked = s.Int(6) != 0;
    out.emplace_back(s.Text(0), std::move(g));
  }
  FD_RETURN_IF_ERROR(txn.Commit());
  return out;
}

Status Store::AddExam(const v1::ExamSpec& spec, const std::string& secret, int64_t unix_ms) {
  if (secret.size() < 32)
    return InvalidArgument("exam '" + spec.id() + "': its variant secret must be 32 random bytes or more");
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, true);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(
      &s, "INSERT INTO exams (id, spec, secret, created_unix_ms) VALUES (?1, ?2, ?3, ?4)", "add exam"));
  s.BindText(1, spec.id());
  s.BindBlob(2, spec.SerializeAsString());
  s.BindBlob(3, secret);
  s.BindInt(4, unix_ms);
  if (s.bind_rc() != SQLITE_OK) return c.BindErr("add exam", s.bind_rc());
  const int rc = sqlite3_step(s.get());
  if (rc != SQLITE_DONE) {
    if (sqlite3_extended_errcode(db_) == SQLITE_CONSTRAINT_PRIMARYKEY)
      return AlreadyExists("an exam '" + spec.id() + "' exists already: give the new one another id");
    return c.Err("add exam " + spec.id(), rc);
  }
  return txn.Commit();
}

StatusOr<std::vector<Store::StoredExam>> Store::LoadExams() {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, false);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(
      &s, "SELECT id, spec, secret, created_unix_ms FROM exams ORDER BY created_unix_ms, id", "load exams"));
  std::vector<StoredExam> out;
  for (;;) {
    auto row = c.Next(&s, "load exams");
    if (!row.ok()) return row.status();
    if (!*row) break;
    StoredExam e;
    if (!e.spec.ParseFromString(s.Blob(1)))
      return DataLoss("store " + path_ + ": exam '" + s.Text(0) + "': its stored spec cannot be read");
    e.secret = s.Blob(2);
    e.created_unix_ms = s.Int(3);
    out.push_back(std::move(e));
  }
  FD_RETURN_IF_ERROR(txn.Commit());
  return out;
}

namespace {

constexpr const char* kAuditColumns = "seq, unix_ms, actor, action, args, prev, hash";

AuditRecord AuditRow(const Stmt& s) {
  AuditRecord r;
  r.seq = s.Int(0);
  r.unix_ms = s.Int(1);
  r.actor = s.Text(2);
  r.action = s.Text(3);
  r.args = s.Text(4);
  r.prev = s.Text(5);
  r.hash = s.Text(6);
  return r;
}

}  // namespace

StatusOr<AuditRecord> Store::AppendAudit(const std::string& scope, int64_t unix_ms, const std::string& actor,
                                         const std::string& action, const std::string& args_json) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, true);  // the head read and the insert in one write transaction
  FD_RETURN_IF_ERROR(txn.Begin());
  AuditHead head;
  {
    Stmt s;
    const std::string sql =
        std::string("SELECT ") + kAuditColumns + " FROM audit WHERE scope = ?1 ORDER BY seq DESC LIMIT 1";
    FD_RETURN_IF_ERROR(c.Prepare(&s, sql.c_str(), "read the audit head"));
    s.BindText(1, scope);
    auto row = c.Next(&s, "read the audit head of " + scope);
    if (!row.ok()) return row.status();
    if (*row) head = HeadAfter(AuditRow(s));
  }
  auto r = NextAuditRecord(head, unix_ms, actor, action, args_json);
  if (!r.ok()) return r.status();
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(&s,
                               "INSERT INTO audit (scope, seq, unix_ms, actor, action, args, prev, hash) "
                               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                               "append audit record"));
  s.BindText(1, scope);
  s.BindInt(2, r->seq);
  s.BindInt(3, r->unix_ms);
  s.BindText(4, r->actor);
  s.BindText(5, r->action);
  s.BindText(6, r->args);
  s.BindText(7, r->prev);
  s.BindText(8, r->hash);
  FD_RETURN_IF_ERROR(c.Run(&s, "append audit record to " + scope));
  FD_RETURN_IF_ERROR(txn.Commit());
  return r;
}

StatusOr<std::vector<AuditRecord>> Store::LoadAudit(const std::string& scope) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, false);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  const std::string sql =
      std::string("SELECT ") + kAuditColumns + " FROM audit WHERE scope = ?1 ORDER BY seq";
  FD_RETURN_IF_ERROR(c.Prepare(&s, sql.c_str(), "load audit"));
  s.BindText(1, scope);
  std::vector<AuditRecord> out;
  for (;;) {
    auto row = c.Next(&s, "load the audit trail of " + scope);
    if (!row.ok()) return row.status();
    if (!*row) break;
    out.push_back(AuditRow(s));
  }
  FD_RETURN_IF_ERROR(txn.Commit());
  return out;
}

Status Store::SaveSitting(const std::string& exam_id, const std::string& candidate, int sitting,
                          const std::string& doc) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, true);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(
      &s, "INSERT OR REPLACE INTO sittings (exam_id, candidate, sitting, doc) VALUES (?1, ?2, ?3, ?4)",
      "save sitting"));
  s.BindText(1, exam_id);
  s.BindText(2, candidate);
  s.BindInt(3, sitting);
  s.BindText(4, doc);
  FD_RETURN_IF_ERROR(
      c.Run(&s, "save sitting " + std::to_string(sitting) + " of " + candidate + " in " + exam_id));
  return txn.Commit();
}

StatusOr<v1::TimelineItem> Store::AppendTimeline(const std::string& session_id, v1::TimelineItem item) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, true);  // the next number and the insert in one write transaction
  FD_RETURN_IF_ERROR(txn.Begin());
  {
    Stmt s;
    FD_RETURN_IF_ERROR(c.Prepare(&s, "SELECT COALESCE(MAX(seq), 0) FROM timeline WHERE session_id = ?1",
                                 "read the timeline"));
    s.BindText(1, session_id);
    auto row = c.Next(&s, "read the timeline of " + session_id);
    if (!row.ok()) return row.status();
    item.set_seq(*row ? s.Int(0) + 1 : 1);
  }
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(&s,
                               "INSERT INTO timeline (session_id, seq, unix_ms, who, role, kind, text) "
                               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                               "append to the timeline"));
  s.BindText(1, session_id);
  s.BindInt(2, item.seq());
  s.BindInt(3, item.unix_ms());
  s.BindText(4, item.who());
  s.BindText(5, item.role());
  s.BindText(6, item.kind());
  s.BindText(7, item.text());
  FD_RETURN_IF_ERROR(c.Run(&s, "append to the timeline of " + session_id));
  FD_RETURN_IF_ERROR(txn.Commit());
  return item;
}

StatusOr<std::vector<v1::TimelineItem>> Store::LoadTimeline(const std::string& session_id,
                                                            int64_t after_seq) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, false);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(&s,
                               "SELECT seq, unix_ms, who, role, kind, text FROM timeline "
                               "WHERE session_id = ?1 AND seq > ?2 ORDER BY seq",
                               "load the timeline"));
  s.BindText(1, session_id);
  s.BindInt(2, after_seq);
  std::vector<v1::TimelineItem> out;
  for (;;) {
    auto row = c.Next(&s, "load the timeline of " + session_id);
    if (!row.ok()) return row.status();
    if (!*row) break;
    v1::TimelineItem t;
    t.set_seq(s.Int(0));
    t.set_unix_ms(s.Int(1));
    t.set_who(s.Text(2));
    t.set_role(s.Text(3));
    t.set_kind(s.Text(4));
    t.set_text(s.Text(5));
    out.push_back(std::move(t));
  }
  FD_RETURN_IF_ERROR(txn.Commit());
  return out;
}

StatusOr<std::vector<std::string>> Store::LoadSittings() {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, false);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  FD_RETURN_IF_ERROR(
      c.Prepare(&s, "SELECT doc FROM sittings ORDER BY exam_id, candidate, sitting", "load sittings"));
  std::vector<std::string> out;
  for (;;) {
    auto row = c.Next(&s, "load sittings");
    if (!row.ok()) return row.status();
    if (!*row) break;
    out.push_back(s.Text(0));
  }
  FD_RETURN_IF_ERROR(txn.Commit());
  return out;
}

}  // namespace firedrill::controller
