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
#include "firedrill/v1/controller.pb.h"
#include "firedrill/v1/store.pb.h"

struct sqlite3;

namespace firedrill::controller {

class Store {
 public:
  // Creates the file and schema if missing.
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();

  // Insert or replace the session row (columns mirrored from record.info).
  Status SaveSession(const v1::SessionRecord& record);
  StatusOr<std::vector<v1::SessionRecord>> LoadSessions();

  Status AppendEvent(const std::string& session_id, const v1::SessionEvent& event);
  // The last `limit` events of a session, oldest first.
  StatusOr<std::vector<v1::SessionEvent>> LoadEvents(const std::string& session_id, int limit);

  StatusOr<int> AddDiagnosis(const v1::SubmitDiagnosisRequest& d, int64_t unix_ms);
  // Latest diagnosis of a session, if any.
  StatusOr<std::optional<v1::SubmitDiagnosisRequest>> LatestDiagnosis(const std::string& session_id);

  StatusOr<int> AddFix(const v1::ApplyFixRequest& f, int64_t unix_ms);
  StatusOr<std::vector<v1::ApplyFixRequest>> LoadFixes(const std::string& session_id);

  Status SaveScore(const v1::ScoreReport& report, int64_t unix_ms);
  StatusOr<std::optional<v1::ScoreReport>> LoadScore(const std::string& session_id);

  const std::string& path() const { return path_; }

 private:
  Store(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  Status Exec(const std::string& sql);
  sqlite3* db_;
  std::string path_;
  std::mutex mu_;
};

}  // namespace firedrill::controller
