// The controller's SQLite store (WAL). Each call is one committed transaction
// before it returns, so whatever the controller acknowledged to a client
// survives a crash of the controller (synchronous=FULL).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/exam/audit_chain.h"
#include "controller/exam/tokens.h"
#include "firedrill/v1/controller.pb.h"
#include "firedrill/v1/exam.pb.h"
#include "firedrill/v1/store.pb.h"

struct sqlite3;

namespace firedrill::controller {

class Store {
 public:
  // Creates the file (mode 0600: it holds every answer key) and the schema
  // if missing; an existing file is made 0600 too.
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();

  // Insert or replace the session row (columns mirrored from record.info).
  Status SaveSession(const v1::SessionRecord& record);
  // Every readable session. A row whose record cannot be read is skipped
  // and described in `problems` (file, session, what to do), so that one
  // damaged row does not keep the controller from starting.
  StatusOr<std::vector<v1::SessionRecord>> LoadSessions(std::vector<std::string>* problems = nullptr);
  // True if a session row with this id exists.
  StatusOr<bool> HasSession(const std::string& session_id);

  Status AppendEvent(const std::string& session_id, const v1::SessionEvent& event);
  // The last `limit` events of a session, oldest first.
  StatusOr<std::vector<v1::SessionEvent>> LoadEvents(const std::string& session_id, int limit);

  // Stores a diagnosis with its findings; returns its per-session number
  // (1 for the session's first).
  StatusOr<int> AddDiagnosis(const std::string& session_id, const std::vector<v1::Finding>& findings,
                             const std::string& note, int64_t unix_ms);
  // Every diagnosis of a session, oldest first.
  StatusOr<std::vector<v1::DiagnosisRecord>> LoadDiagnoses(const std::string& session_id);

  // Returns the fix's per-session number.
  StatusOr<int> AddFix(const v1::ApplyFixRequest& f, int64_t unix_ms);
  StatusOr<std::vector<v1::ApplyFixRequest>> LoadFixes(const std::string& session_id);

  Status SaveScore(const v1::ScoreReport& report, int64_t unix_ms);
  StatusOr<std::optional<v1::ScoreReport>> LoadScore(const std::string& session_id);

  // --- exams, tokens and the audit trail (store_exam.cc) ---

  // Insert or replace the grant of a token's digest (the token itself is
  // never stored).
  Status SaveGrant(const std::string& digest, const Grant& grant);
  StatusOr<std::vector<std::pair<std::string, Grant>>> LoadGrants();

  struct StoredExam {
    v1::ExamSpec spec;
    // The key of its candidates' variants (32 random bytes or more). Stored
    // as is: the controller needs it, and whoever reads the database reads
    // the answer keys too (README: who can learn what).
    std::string secret;
    int64_t created_unix_ms = 0;
  };
  // AlreadyExists when an exam of that id is stored.
  Status AddExam(const v1::ExamSpec& spec, const std::string& secret, int64_t unix_ms);
  StatusOr<std::vector<StoredExam>> LoadExams();

  // Appends a record to the audit trail `scope` (an exam's id), chained on
  // that trail's last record, in one transaction: concurrent appends cannot
  // fork the chain.
  StatusOr<AuditRecord> AppendAudit(const std::string& scope, int64_t unix_ms, const std::string& actor,
                                    const std::string& action, const std::string& args_json);
  // The trail `scope`, oldest first.
  StatusOr<std::vector<AuditRecord>> LoadAudit(const std::string& scope);

  // A candidate's sitting of an exam, as the exam manager's document (JSON):
  // which variant each item drew, its sessions, the clock, the result.
  Status SaveSitting(const std::string& exam_id, const std::string& candidate, int sitting,
                     const std::string& doc);
  StatusOr<std::vector<std::string>> LoadSittings();

  // A session's shared timeline (team drills): `item` numbered next (its
  // seq) and stored; the entries after `after_seq`, in order.
  StatusOr<v1::TimelineItem> AppendTimeline(const std::string& session_id, v1::TimelineItem item);
  StatusOr<std::vector<v1::TimelineItem>> LoadTimeline(const std::string& session_id, int64_t after_seq);

  const std::string& path() const { return path_; }

 private:
  Store(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  Status Exec(const std::string& sql);
  sqlite3* db_;
  std::string path_;
  std::mutex mu_;
};

}  // namespace firedrill::controller
