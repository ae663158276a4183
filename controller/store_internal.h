// Private to the store's files (store.cc, store_exam.cc): SQLite statements,
// transactions and error mapping. Include store.h, not this.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace firedrill::controller::store_internal {

// The exams' tables (store_exam.cc), created beside the sessions' on open.
extern const char* const kExamSchema;

// Maps a SQLite result code to the Status code a caller can act on: a busy
// database is worth retrying, a corrupt one is data loss, a file that cannot
// be opened or written is an environment problem the operator must fix.
inline StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return StatusCode::kUnavailable;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return StatusCode::kDataLoss;
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
    case SQLITE_CONSTRAINT:
      return StatusCode::kFailedPrecondition;
    default:
      return StatusCode::kInternal;
  }
}

// Owns one prepared statement; finalized on every path out of a call.
class Stmt {
 public:
  Stmt() = default;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() { sqlite3_finalize(stmt_); }
  sqlite3_stmt** out() { return &stmt_; }
  sqlite3_stmt* get() const { return stmt_; }

  // A failed bind leaves the parameter NULL; the first failure is kept and
  // reported when the statement runs, so no row is written half-bound.
  void BindText(int i, const std::string& s) {
    Keep(sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT));
  }
  // std::string::data() is never null, so an empty value binds as an empty
  // blob rather than NULL (which the NOT NULL columns would reject).
  void BindBlob(int i, const std::string& s) {
    Keep(sqlite3_bind_blob(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT));
  }
  void BindInt(int i, int64_t v) { Keep(sqlite3_bind_int64(stmt_, i, v)); }
  int bind_rc() const { return bind_rc_; }

  std::string Text(int col) const {
    const auto* p = sqlite3_column_text(stmt_, col);
    return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, col)) : "";
  }
  std::string Blob(int col) const {
    const void* p = sqlite3_column_blob(stmt_, col);
    return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(stmt_, col)) : "";
  }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }

 private:
  void Keep(int rc) {
    if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  }
  sqlite3_stmt* stmt_ = nullptr;
  int bind_rc_ = SQLITE_OK;
};

// Per-call context: the database and its path, so that every error names
// the file, the step that failed ("insert event") and SQLite's reason.
struct Ctx {
  sqlite3* db;
  const std::string& path;

  Status Err(const std::string& what, int rc) const {
    return Status(CodeFor(rc), "store " + path + ": " + what + ": " + sqlite3_errmsg(db));
  }
  // After a failed bind, sqlite3_errmsg may already have been reset by a
  // later successful bind, so the code's own text is used.
  Status BindErr(const std::string& what, int rc) const {
    return Status(CodeFor(rc), "store " + path + ": " + what + ": bind: " + sqlite3_errstr(rc));
  }
  Status Prepare(Stmt* s, const char* sql, const std::string& what) const {
    int rc = sqlite3_prepare_v2(db, sql, -1, s->out(), nullptr);
    return rc == SQLITE_OK ? Status::Ok() : Err(what, rc);
  }
  // Steps a statement that returns no rows.
  Status Run(Stmt* s, const std::string& what) const {
    if (s->bind_rc() != SQLITE_OK) return BindErr(what, s->bind_rc());
    int rc = sqlite3_step(s->get());
    return rc == SQLITE_DONE ? Status::Ok() : Err(what, rc);
  }
  // Steps a statement that returns rows: true with a row, false when done.
  StatusOr<bool> Next(Stmt* s, const std::string& what) const {
    if (s->bind_rc() != SQLITE_OK) return BindErr(what, s->bind_rc());
    int rc = sqlite3_step(s->get());
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return Err(what, rc);
  }
  Status Exec(const char* sql, const std::string& what) const {
    char* msg = nullptr;
    int rc = sqlite3_exec(db, sql, nullptr, nullptr, &msg);
    std::string text = msg ? msg : sqlite3_errstr(rc);
    sqlite3_free(msg);
    if (rc == SQLITE_OK) return Status::Ok();
    return Status(CodeFor(rc), "store " + path + ": " + what + ": " + text);
  }
};

// One transaction per public call. Writes take the write lock up front
// (IMMEDIATE) so that busy_timeout applies at BEGIN: a deferred transaction
// that upgrades to a writer mid-way can fail at once with SQLITE_BUSY in WAL
// mode. Anything not committed is rolled back on scope exit.
class Txn {
 public:
  Txn(const Ctx& c, bool write) : c_(c), write_(write) {}
  ~Txn() {
    if (open_) sqlite3_exec(c_.db, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Status Begin() {
    FD_RETURN_IF_ERROR(c_.Exec(write_ ? "BEGIN IMMEDIATE" : "BEGIN", "begin transaction"));
    open_ = true;
    return Status::Ok();
  }
  // The call's data is durable (synchronous=FULL) once this returns OK.
  Status Commit() {
    FD_RETURN_IF_ERROR(c_.Exec("COMMIT", "commit"));
    open_ = false;
    return Status::Ok();
  }

 private:
  const Ctx& c_;
  bool write_;
  bool open_ = false;
};

}  // namespace firedrill::controller::store_internal
