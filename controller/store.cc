#include "controller/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/log.h"
#include "common/paths.h"
#include "controller/store_internal.h"

namespace firedrill::controller {
using namespace store_internal;  // NOLINT: the store's own helpers
namespace {

// 2: diagnoses and fixes are numbered per session; diagnoses keep their
// findings (several causes at once).
constexpr int kSchemaVersion = 2;

// Foreign keys make a row for an unknown session fail loudly instead of
// leaving orphans that no session will ever show. session_id is indexed on
// every child table because every read filters on it.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY,
  scenario_id TEXT NOT NULL,
  seed INTEGER,
  state TEXT NOT NULL,
  created_unix_ms INTEGER,
  updated_unix_ms INTEGER,
  world_size INTEGER,
  total_score INTEGER,
  record BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL REFERENCES sessions(id),
  unix_ms INTEGER,
  kind TEXT,
  rank INTEGER,
  message TEXT
);
CREATE INDEX IF NOT EXISTS events_session ON events(session_id);
CREATE TABLE IF NOT EXISTS diagnoses (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL REFERENCES sessions(id),
  unix_ms INTEGER,
  cause TEXT,
  culprit_ranks TEXT,
  note TEXT,
  number INTEGER,
  findings TEXT
);
CREATE INDEX IF NOT EXISTS diagnoses_session ON diagnoses(session_id);
CREATE TABLE IF NOT EXISTS fixes (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL REFERENCES sessions(id),
  unix_ms INTEGER,
  replace_host_ranks TEXT,
  settings TEXT,
  request BLOB,
  number INTEGER
);
CREATE INDEX IF NOT EXISTS fixes_session ON fixes(session_id);
CREATE TABLE IF NOT EXISTS scores (
  session_id TEXT PRIMARY KEY REFERENCES sessions(id),
  unix_ms INTEGER,
  total INTEGER,
  max_total INTEGER,
  report BLOB
);
)sql";

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Version 1 databases lack the per-session numbers and the findings.
constexpr const char* kMigrate1To2 = R"sql(
ALTER TABLE diagnoses ADD COLUMN number INTEGER;
ALTER TABLE diagnoses ADD COLUMN findings TEXT;
ALTER TABLE fixes ADD COLUMN number INTEGER;
UPDATE diagnoses SET number = (SELECT COUNT(*) FROM diagnoses d2
  WHERE d2.session_id = diagnoses.session_id AND d2.id <= diagnoses.id);
UPDATE fixes SET number = (SELECT COUNT(*) FROM fixes f2
  WHERE f2.session_id = fixes.session_id AND f2.id <= fixes.id);
)sql";

std::string RanksJson(const google::protobuf::RepeatedField<int32_t>& ranks) {
  nlohmann::json j = nlohmann::json::array();
  for (int32_t r : ranks) j.push_back(r);
  return j.dump();
}

// Parses a JSON array of integers written by RanksJson.
bool ParseRanksJson(const std::string& text, google::protobuf::RepeatedField<int32_t>* out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) return false;
  for (const auto& v : j) {
    if (!v.is_number_integer()) return false;
    out->Add(v.get<int32_t>());
  }
  return true;
}

// A failed foreign key on a child row means the caller named a session that
// was never saved; say so instead of SQLite's generic constraint text.
Status InsertError(const Ctx& c, const std::string& what, const std::string& session_id, int rc) {
  if (sqlite3_extended_errcode(c.db) == SQLITE_CONSTRAINT_FOREIGNKEY) {
    return NotFound("store " + c.path + ": " + what + ": no session '" + session_id +
                    "' in the store (save the session first)");
  }
  return c.Err(what, rc);
}

// Steps an INSERT into a child table, mapping a missing parent session.
Status RunInsert(const Ctx& c, Stmt* s, const std::string& what, const std::string& session_id) {
  if (s->bind_rc() != SQLITE_OK) return c.BindErr(what, s->bind_rc());
  int rc = sqlite3_step(s->get());
  return rc == SQLITE_DONE ? Status::Ok() : InsertError(c, what, session_id, rc);
}

}  // namespace

StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  if (path.empty()) return InvalidArgument("store: empty database path");
  std::string parent = std::filesystem::path(path).parent_path().string();
  if (!parent.empty()) {
    std::string err;
    if (!MakeDirs(parent, &err)) {
      return FailedPrecondition("store " + path + ": " + err +
                                " (choose a writable --state-dir or fix its permissions)");
    }
  }

  // The file holds every session's answer key: owner only, from the start
  // (SQLite gives its -wal and -shm files the database file's mode).
  {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
      (void)::fchmod(fd, 0600);
      ::close(fd);
    }
    for (const char* suffix : {"-wal", "-shm"}) (void)::chmod((path + suffix).c_str(), 0600);
  }
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    return Status(CodeFor(rc), "store " + path + ": open: " + msg);
  }
  // From here the Store owns db and closes it on any error return.
  std::unique_ptr<Store> store(new Store(db, path));
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);

  Ctx c{db, store->path_};
  // The first statement that reads the file is where a file that is not a
  // database shows up ("open: file is not a database").
  {
    Stmt s;
    FD_RETURN_IF_ERROR(c.Prepare(&s, "PRAGMA journal_mode=WAL", "open"));
    auto row = c.Next(&s, "open");
    if (!row.ok()) return row.status();
    std::string mode = *row ? s.Text(0) : "";
    // Some filesystems (network mounts) cannot do WAL; SQLite then keeps a
    // rollback journal, which with synchronous=FULL is still durable, only
    // slower and with readers blocking the writer.
    if (mode != "wal") {
      spdlog::warn("store {}: journal_mode is '{}', not 'wal' (filesystem without shared-memory support?)",
                   path, mode);
    }
  }
  // FULL syncs the WAL on every commit: an acknowledged call survives an OS
  // crash or power loss, not only a controller crash.
  FD_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=FULL"));
  FD_RETURN_IF_ERROR(store->Exec("PRAGMA foreign_keys=ON"));

  int version = 0;
  {
    Stmt s;
    FD_RETURN_IF_ERROR(c.Prepare(&s, "PRAGMA user_version", "read schema version"));
    auto row = c.Next(&s, "read schema version");
    if (!row.ok()) return row.status();
    if (*row) version = static_cast<int>(s.Int(0));
  }
  if (version > kSchemaVersion) {
    return FailedPrecondition("store " + path + ": schema version " + std::to_string(version) +
                              " was written by a newer firedrill (this build knows version " +
                              std::to_string(kSchemaVersion) +
                              "); upgrade firedrill or use another --state-dir");
  }
  {
    Txn txn(c, /*write=*/true);
    FD_RETURN_IF_ERROR(txn.Begin());
    if (version == 1) FD_RETURN_IF_ERROR(c.Exec(kMigrate1To2, "upgrade schema 1 -> 2"));
    FD_RETURN_IF_ERROR(c.Exec(kSchema, "create schema"));
    FD_RETURN_IF_ERROR(c.Exec(kExamSchema, "create the exam tables"));
    // PRAGMA takes no bound parameters; the value is our own constant.
    const std::string set_version = "PRAGMA user_version = " + std::to_string(kSchemaVersion);
    FD_RETURN_IF_ERROR(c.Exec(set_version.c_str(), "set schema version"));
    FD_RETURN_IF_ERROR(txn.Commit());
  }
  return store;
}

Store::~Store() {
  // close_v2 also checkpoints the WAL into the main file when this is the
  // last connection, so a clean shutdown leaves one self-contained file.
  sqlite3_close_v2(db_);
}

Status Store::Exec(const std::string& sql) { return Ctx{db_, path_}.Exec(sql.c_str(), sql); }

Status Store::SaveSession(const v1::SessionRecord& record) {
  const v1::SessionInfo& info = record.info();
  if (info.session_id().empty()) {
    return InvalidArgument("store " + path_ + ": save session: empty session id");
  }
  std::string blob;
  if (!record.SerializeToString(&blob)) {
    return Internal("store " + path_ + ": save session " + info.session_id() + ": cannot serialize record");
  }
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, true);
  FD_RETURN_IF_ERROR(txn.Begin());
  // An upsert, not INSERT OR REPLACE: REPLACE deletes the old row first,
  // which the foreign keys of the session's events and fixes would reject.
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(&s,
                               "INSERT INTO sessions (id, scenario_id, seed, state, created_unix_ms, "
                               "updated_unix_ms, world_size, total_score, record) "
                               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) "
                               "ON CONFLICT(id) DO UPDATE SET scenario_id = excluded.scenario_id, "
                               "seed = excluded.seed, state = excluded.state, "
                               "created_unix_ms = excluded.created_unix_ms, "
                               "updated_unix_ms = excluded.updated_unix_ms, "
                               "world_size = excluded.world_size, total_score = excluded.total_score, "
                               "record = excluded.record",
                               "save session"));
  s.BindText(1, info.session_id());
  s.BindText(2, info.scenario_id());
  s.BindInt(3, info.seed());
  s.BindText(4, info.state());
  s.BindInt(5, info.created_unix_ms());
  s.BindInt(6, NowUnixMs());
  s.BindInt(7, info.world_size());
  s.BindInt(8, info.total_score());
  s.BindBlob(9, blob);
  FD_RETURN_IF_ERROR(c.Run(&s, "save session " + info.session_id()));
  return txn.Commit();
}

StatusOr<std::vector<v1::SessionRecord>> Store::LoadSessions(std::vector<std::string>* problems) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, false);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  FD_RETURN_IF_ERROR(
      c.Prepare(&s, "SELECT id, record FROM sessions ORDER BY created_unix_ms, id", "load sessions"));
  std::vector<v1::SessionRecord> out;
  for (;;) {
    auto row = c.Next(&s, "load sessions");
    if (!row.ok()) return row.status();
    if (!*row) break;
    std::string id = s.Text(0);
    std::string blob = s.Blob(1);
    v1::SessionRecord rec;
    // A record whose own id disagrees with its row is as unusable as one that
    // does not parse: the session it would resurrect is not the one stored.
    if (!rec.ParseFromString(blob) || rec.info().session_id() != id) {
      if (problems != nullptr) {
        problems->push_back("store " + path_ + ": session '" + id + "': record blob (" +
                            std::to_string(blob.size()) +
                            " bytes) is unreadable; skipped. Restore the database from a backup or delete "
                            "that row with the sqlite3 shell");
      }
      continue;
    }
    out.push_back(std::move(rec));
  }
  FD_RETURN_IF_ERROR(txn.Commit());
  return out;
}

StatusOr<bool> Store::HasSession(const std::string& session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(&s, "SELECT 1 FROM sessions WHERE id = ?1", "look up session"));
  s.BindText(1, session_id);
  return c.Next(&s, "look up session " + session_id);
}

Status Store::AppendEvent(const std::string& session_id, const v1::SessionEvent& event) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, true);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(
      &s, "INSERT INTO events (session_id, unix_ms, kind, rank, message) VALUES (?1, ?2, ?3, ?4, ?5)",
      "insert event"));
  s.BindText(1, session_id);
  s.BindInt(2, event.unix_ms());
  s.BindText(3, event.kind());
  s.BindInt(4, event.rank());
  s.BindText(5, event.message());
  FD_RETURN_IF_ERROR(RunInsert(c, &s, "insert event", session_id));
  return txn.Commit();
}

StatusOr<std::vector<v1::SessionEvent>> Store::LoadEvents(const std::string& session_id, int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, false);
  FD_RETURN_IF_ERROR(txn.Begin());
  // Insertion order (id), not unix_ms: the timeline is what the controller
  // recorded, in that order, even if the wall clock stepped back. A negative
  // limit means all events (SQLite's LIMIT -1).
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(&s,
                               "SELECT unix_ms, kind, rank, message FROM ("
                               "SELECT id, unix_ms, kind, rank, message FROM events WHERE session_id = ?1 "
                               "ORDER BY id DESC LIMIT ?2) ORDER BY id ASC",
                               "load events"));
  s.BindText(1, session_id);
  s.BindInt(2, limit);
  std::vector<v1::SessionEvent> out;
  for (;;) {
    auto row = c.Next(&s, "load events of " + session_id);
    if (!row.ok()) return row.status();
    if (!*row) break;
    v1::SessionEvent& e = out.emplace_back();
    e.set_unix_ms(s.Int(0));
    e.set_kind(s.Text(1));
    e.set_rank(static_cast<int32_t>(s.Int(2)));
    e.set_message(s.Text(3));
  }
  FD_RETURN_IF_ERROR(txn.Commit());
  return out;
}

namespace {
// The next per-session number in `table` (diagnoses or fixes), inside the
// caller's write transaction.
StatusOr<int> NextNumber(const Ctx& c, const char* sql, const std::string& session_id, const std::string& what) {
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(&s, sql, what));
  s.BindText(1, session_id);
  auto row = c.Next(&s, what);
  if (!row.ok()) return row.status();
  return static_cast<int>(s.Int(0)) + 1;
}

std::string FindingsJson(const std::vector<v1::Finding>& findings) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& f : findings) {
    nlohmann::json ranks = nlohmann::json::array();
    for (int32_t r : f.culprit_ranks()) ranks.push_back(r);
    j.push_back({{"cause", f.cause()}, {"culprit_ranks", ranks}});
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool ParseFindingsJson(const std::string& text, google::protobuf::RepeatedPtrField<v1::Finding>* out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) return false;
  for (const auto& f : j) {
    if (!f.is_object() || !f.contains("cause") || !f["cause"].is_string()) return false;
    v1::Finding* x = out->Add();
    x->set_cause(f["cause"].get<std::string>());
    if (f.contains("culprit_ranks")) {
      if (!f["culprit_ranks"].is_array()) return false;
      for (const auto& r : f["culprit_ranks"]) {
        if (!r.is_number_integer()) return false;
        x->add_culprit_ranks(r.get<int32_t>());
      }
    }
  }
  return true;
}
}  // namespace

StatusOr<int> Store::AddDiagnosis(const std::string& session_id, const std::vector<v1::Finding>& findings,
                                  const std::string& note, int64_t unix_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, true);
  FD_RETURN_IF_ERROR(txn.Begin());
  auto number = NextNumber(c, "SELECT COALESCE(MAX(number), 0) FROM diagnoses WHERE session_id = ?1", session_id,
                           "number diagnosis");
  if (!number.ok()) return number.status();
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(&s,
                               "INSERT INTO diagnoses (session_id, unix_ms, cause, culprit_ranks, note, number, "
                               "findings) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                               "insert diagnosis"));
  // cause and culprit_ranks: the first finding, for people reading the table.
  s.BindText(1, session_id);
  s.BindInt(2, unix_ms);
  s.BindText(3, findings.empty() ? "" : findings[0].cause());
  s.BindText(4, findings.empty() ? "[]" : RanksJson(findings[0].culprit_ranks()));
  s.BindText(5, note);
  s.BindInt(6, *number);
  s.BindText(7, FindingsJson(findings));
  FD_RETURN_IF_ERROR(RunInsert(c, &s, "insert diagnosis", session_id));
  FD_RETURN_IF_ERROR(txn.Commit());
  return *number;
}

StatusOr<std::vector<v1::DiagnosisRecord>> Store::LoadDiagnoses(const std::string& session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, false);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(&s,
                               "SELECT id, number, unix_ms, cause, culprit_ranks, note, findings FROM diagnoses "
                               "WHERE session_id = ?1 ORDER BY id ASC",
                               "load diagnoses"));
  s.BindText(1, session_id);
  std::vector<v1::DiagnosisRecord> out;
  for (;;) {
    auto row = c.Next(&s, "load diagnoses of " + session_id);
    if (!row.ok()) return row.status();
    if (!*row) break;
    v1::DiagnosisRecord& d = out.emplace_back();
    d.set_number(static_cast<int32_t>(s.Int(1)));
    d.set_unix_ms(s.Int(2));
    d.set_note(s.Text(5));
    const std::string findings = s.Text(6);
    bool ok = true;
    if (findings.empty()) {  // written before schema 2: one finding in the columns
      v1::Finding* f = d.add_findings();
      f->set_cause(s.Text(3));
      ok = ParseRanksJson(s.Text(4), f->mutable_culprit_ranks());
    } else {
      ok = ParseFindingsJson(findings, d.mutable_findings());
    }
    if (!ok) {
      return DataLoss("store " + path_ + ": session '" + session_id + "': diagnosis " +
                      std::to_string(s.Int(0)) + " has unreadable findings; fix or delete that row");
    }
  }
  FD_RETURN_IF_ERROR(txn.Commit());
  return out;
}

StatusOr<int> Store::AddFix(const v1::ApplyFixRequest& f, int64_t unix_ms) {
  std::string blob;
  if (!f.SerializeToString(&blob)) {
    return Internal("store " + path_ + ": insert fix for " + f.session_id() + ": cannot serialize request");
  }
  // The columns are for people reading the database; the request blob is
  // what LoadFixes returns, so repeated setting keys (which a JSON object
  // would collapse) are never lost.
  nlohmann::json settings = nlohmann::json::object();
  for (const auto& kv : f.settings()) settings[kv.key()] = kv.value();
  // replace: a setting that is not valid UTF-8 must not throw out of here.
  std::string settings_json = settings.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);

  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, true);
  FD_RETURN_IF_ERROR(txn.Begin());
  auto number = NextNumber(c, "SELECT COALESCE(MAX(number), 0) FROM fixes WHERE session_id = ?1", f.session_id(),
                           "number fix");
  if (!number.ok()) return number.status();
  Stmt s;
  FD_RETURN_IF_ERROR(
      c.Prepare(&s,
                "INSERT INTO fixes (session_id, unix_ms, replace_host_ranks, settings, request, number) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                "insert fix"));
  s.BindText(1, f.session_id());
  s.BindInt(2, unix_ms);
  s.BindText(3, RanksJson(f.replace_host_ranks()));
  s.BindText(4, settings_json);
  s.BindBlob(5, blob);
  s.BindInt(6, *number);
  FD_RETURN_IF_ERROR(RunInsert(c, &s, "insert fix", f.session_id()));
  FD_RETURN_IF_ERROR(txn.Commit());
  return *number;
}

StatusOr<std::vector<v1::ApplyFixRequest>> Store::LoadFixes(const std::string& session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, false);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  FD_RETURN_IF_ERROR(
      c.Prepare(&s, "SELECT id, request FROM fixes WHERE session_id = ?1 ORDER BY id ASC", "load fixes"));
  s.BindText(1, session_id);
  std::vector<v1::ApplyFixRequest> out;
  for (;;) {
    auto row = c.Next(&s, "load fixes of " + session_id);
    if (!row.ok()) return row.status();
    if (!*row) break;
    v1::ApplyFixRequest f;
    if (!f.ParseFromString(s.Blob(1)) || f.session_id() != session_id) {
      return DataLoss("store " + path_ + ": session '" + session_id + "': fix " + std::to_string(s.Int(0)) +
                      " has an unreadable request blob");
    }
    out.push_back(std::move(f));
  }
  FD_RETURN_IF_ERROR(txn.Commit());
  return out;
}

Status Store::SaveScore(const v1::ScoreReport& report, int64_t unix_ms) {
  std::string blob;
  if (!report.SerializeToString(&blob)) {
    return Internal("store " + path_ + ": save score of " + report.session_id() +
                    ": cannot serialize report");
  }
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, true);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(&s,
                               "INSERT INTO scores (session_id, unix_ms, total, max_total, report) "
                               "VALUES (?1, ?2, ?3, ?4, ?5) "
                               "ON CONFLICT(session_id) DO UPDATE SET unix_ms = excluded.unix_ms, "
                               "total = excluded.total, max_total = excluded.max_total, "
                               "report = excluded.report",
                               "save score"));
  s.BindText(1, report.session_id());
  s.BindInt(2, unix_ms);
  s.BindInt(3, report.total());
  s.BindInt(4, report.max_total());
  s.BindBlob(5, blob);
  FD_RETURN_IF_ERROR(RunInsert(c, &s, "save score", report.session_id()));
  return txn.Commit();
}

StatusOr<std::optional<v1::ScoreReport>> Store::LoadScore(const std::string& session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Ctx c{db_, path_};
  Txn txn(c, false);
  FD_RETURN_IF_ERROR(txn.Begin());
  Stmt s;
  FD_RETURN_IF_ERROR(c.Prepare(&s, "SELECT report FROM scores WHERE session_id = ?1", "load score"));
  s.BindText(1, session_id);
  auto row = c.Next(&s, "load score of " + session_id);
  if (!row.ok()) return row.status();
  std::optional<v1::ScoreReport> out;
  if (*row) {
    v1::ScoreReport& r = out.emplace();
    if (!r.ParseFromString(s.Blob(0)) || r.session_id() != session_id) {
      return DataLoss("store " + path_ + ": session '" + session_id +
                      "': score report blob is unreadable; delete the scores row to re-score");
    }
  }
  FD_RETURN_IF_ERROR(txn.Commit());
  return out;
}

}  // namespace firedrill::controller
