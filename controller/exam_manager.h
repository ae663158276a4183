// Exams on the controller: exams created from their files, one sitting per
// candidate (and one more per retake), each item a session of the
// candidate's own variant, the controller's clock (warnings at 30, 15 and 5
// minutes; at the limit every open item is ended and scored as it stands),
// one audit trail per candidate that records every call they make, and
// results signed with the controller's Ed25519 key.
//
// The sessions themselves are the session manager's; ExamSessions is what
// an exam needs of it, so that the clock and the bookkeeping are tested
// with a test clock and no training job.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "controller/authz.h"
#include "controller/exam/exam_clock.h"
#include "controller/exam/exam_result.h"
#include "controller/exam/signing.h"
#include "firedrill/v1/controller.pb.h"
#include "firedrill/v1/exam.pb.h"

namespace firedrill::controller {

class Store;

class SessionManager;

class ExamSessions {
 public:
  virtual ~ExamSessions() = default;
  virtual std::vector<v1::Scenario> Catalogue() const = 0;
  // Starts the drill of an item (scenario, seed) for the candidate `owner`,
  // with the exam's hint policy (off, or `hint_cost` a hint; 0: the
  // scenario's price).
  virtual StatusOr<v1::SessionInfo> StartItem(const std::string& scenario, int64_t seed,
                                              const std::string& owner, bool hints_allowed,
                                              int hint_cost) = 0;
  virtual StatusOr<v1::SessionInfo> Info(const std::string& id) = 0;
  // Ends a live session (it is scored as it stands) and waits for that.
  virtual StatusOr<v1::SessionInfo> EndItem(const std::string& id, const std::string& reason) = 0;
  // Posts an event on a session's timeline (the CLI shows it in status).
  virtual void Announce(const std::string& id, const std::string& kind, const std::string& message) = 0;
  // The final score report, once there is one.
  virtual StatusOr<std::optional<v1::ScoreReport>> FinalScore(const std::string& id) = 0;
  virtual std::vector<v1::SessionEvent> Events(const std::string& id) = 0;
};

// The session manager as an exam's sessions; `catalogue` is what exam files
// draw from.
std::unique_ptr<ExamSessions> SessionsForExams(SessionManager* sessions, Store* store,
                                               std::vector<v1::Scenario> catalogue);

struct ExamManagerOptions {
  std::string key_file;       // the signing key (PEM), made on first use
  int64_t minute_ms = 60000;  // how long an exam minute lasts (tests shorten it)
  std::chrono::milliseconds tick{1000};
  std::function<int64_t()> now_ms;  // the clock; unset: the system's
};

class ExamManager {
 public:
  ExamManager(ExamManagerOptions opts, Store* store, Gatekeeper* gate, ExamSessions* sessions);
  ~ExamManager();
  // Loads exams and sittings, the signing key, and starts the clock thread
  // (unless `clock_thread` is false: tests call Tick()).
  Status Init(bool clock_thread = true);
  void Shutdown();

  // --- proctors (or the owner); a proctor token scoped to an exam
  //     (exam_id set) reaches that exam only ---
  StatusOr<v1::ExamInfo> Create(const Grant& by, const std::string& yaml, const std::string& filename);
  StatusOr<std::vector<v1::ExamInfo>> List(const Grant& by);
  // A candidate token for `name` on the exam (shown once); `issued` is its
  // grant.
  StatusOr<std::string> IssueCandidate(const Grant& by, const std::string& exam_id, const std::string& name,
                                       Grant* issued);
  StatusOr<v1::ExamResultResponse> Result(const Grant& by, const v1::GetExamResultRequest& req);
  StatusOr<v1::ExamResultResponse> Rescore(const Grant& by, const v1::RescoreItemRequest& req);
  StatusOr<v1::ExportAuditResponse> ExportAudit(const Grant& by, const v1::ExportAuditRequest& req);
  // Opens a retake for a candidate whose latest sitting failed, within the
  // exam's `retakes:`.
  StatusOr<v1::SittingInfo> AllowRetake(const Grant& by, const v1::AllowRetakeRequest& req);
  v1::ExamPublicKey PublicKey() const;

  // --- candidates (a proctor reads a sitting too) ---
  StatusOr<v1::SittingInfo> StartSitting(const Grant& who);
  StatusOr<v1::SittingInfo> GetSitting(const Grant& who, const v1::GetSittingRequest& req);
  StatusOr<v1::SessionInfo> OpenItem(const Grant& who, const v1::OpenItemRequest& req);
  StatusOr<v1::SittingInfo> Finish(const Grant& who);

  // Whether a candidate may still act (tools, diagnoses, fixes) on session
  // `session_id`: one of the items of their open sitting, before its time
  // is up. OK for every other token.
  Status MayAct(const Grant& who, const std::string& session_id);
  // Whether session `session_id` is an item of exam `exam_id` (a scoped
  // proctor watches only those).
  bool SessionInExam(const std::string& session_id, const std::string& exam_id);

  // Records a call a candidate made (admitted or refused) in their trail:
  // the method, its request as JSON, and the refusal if it was refused.
  // Not OK when the record could not be stored: the call is then refused
  // (an exam keeps no unrecorded action).
  Status RecordCall(const Grant& who, const std::string& method, const std::string& request_json,
                    const Status& admitted);

  // One pass of the clock: warnings that came due, sittings whose time ran
  // out (their open items ended and scored, the result signed).
  void Tick();

  // The audit trail of a candidate of an exam.
  static std::string AuditScope(const std::string& exam_id, const std::string& candidate);

 private:
  struct Item {
    std::string scenario;
    int64_t seed = 0;
    std::vector<std::string> sessions;  // attempts, oldest first
  };
  struct Sitting {
    std::string exam_id, candidate;
    int number = 1;
    int64_t started_ms = 0, ended_ms = 0;
    std::string ended_by;  // "" while open: candidate | time-up | proctor
    std::set<int> warned;  // minutes
    std::vector<std::string> warnings;
    std::vector<Item> items;
    std::vector<controller::Rescore> rescores;
    std::string signed_result;
    int total = 0, max_total = 0;
    bool passed = false;
    bool retake_allowed = false;  // a proctor opened the next sitting
    bool open() const { return ended_by.empty(); }
  };
  struct Exam {
    v1::ExamSpec spec;
    std::string secret;
    int64_t created_ms = 0;
  };
  using Lock = std::unique_lock<std::mutex>;

  int64_t Now() const;
  // The exam a proctor may reach; NotFound (never "exists but not yours").
  StatusOr<const Exam*> ProctorExam(const Grant& by, const std::string& exam_id) const;
  StatusOr<Sitting*> FindSitting(const std::string& exam_id, const std::string& candidate, int number);
  Sitting* Latest(const std::string& exam_id, const std::string& candidate);
  // A sitting's clock: its start and its exam's limit (loaded sittings all
  // have their exam).
  ExamClock ClockOf(const Sitting& s) const;
  v1::SittingInfo Describe(const Sitting& s, bool for_proctor) const;
  Status Save(const Sitting& s);
  StatusOr<AuditHead> Audit(const Sitting& s, const std::string& actor, const std::string& action,
                            const nlohmann::json& args);
  StatusOr<AuditHead> Audit(const std::string& exam_id, const std::string& candidate,
                            const std::string& actor, const std::string& action, const nlohmann::json& args);
  // Ends the open items of `s` (outside the lock: ending waits for the
  // scorer), closes it and signs its result.
  Status Close(Lock& lock, Sitting& s, const std::string& ended_by, const std::string& actor);
  Status SignResult(Lock& lock, Sitting& s);
  ItemOutcome Outcome(const Sitting& s, int index);
  void ClockLoop();

  ExamManagerOptions opts_;
  Store* store_;
  Gatekeeper* gate_;
  ExamSessions* sessions_;
  std::unique_ptr<ResultSigner> signer_;

  mutable std::mutex mu_;
  std::map<std::string, Exam> exams_;
  // (exam, candidate) -> sittings, oldest first. Held by pointer: a sitting
  // being closed outside the lock stays where it is.
  std::map<std::pair<std::string, std::string>, std::vector<std::unique_ptr<Sitting>>> sittings_;
  std::set<const Sitting*> closing_;

  std::thread clock_;
  std::mutex clock_mu_;
  std::condition_variable clock_cv_;
  bool stop_ = false;
};

}  // namespace firedrill::controller
