// The session manager as the exam manager's sessions (exam_manager.h).
#include "controller/exam_manager.h"
#include "controller/session_manager.h"
#include "controller/store.h"

namespace firedrill::controller {

namespace {

class SessionManagerExams final : public ExamSessions {
 public:
  SessionManagerExams(SessionManager* sessions, Store* store, std::vector<v1::Scenario> catalogue)
      : sessions_(sessions), store_(store), catalogue_(std::move(catalogue)) {}

  std::vector<v1::Scenario> Catalogue() const override { return catalogue_; }
  StatusOr<v1::SessionInfo> StartItem(const std::string& scenario, int64_t seed, const std::string& owner,
                                      bool hints_allowed, int hint_cost) override {
    v1::StartSessionRequest req;
    req.set_scenario_id(scenario);
    req.set_seed(seed);
    auto info = sessions_->Start(req, owner);
    if (!info.ok()) return info;
    // Before the candidate learns the session's id: no hint is taken first.
    if (Status st = sessions_->SetExamHints(info->session_id(), hints_allowed, hint_cost); !st.ok()) {
      (void)sessions_->End(info->session_id(), "the exam could not set this item's hints");
      return st;
    }
    return info;
  }
  StatusOr<v1::SessionInfo> Info(const std::string& id) override { return sessions_->Info(id); }
  StatusOr<v1::SessionInfo> EndItem(const std::string& id, const std::string& reason) override {
    return sessions_->End(id, reason);
  }
  void Announce(const std::string& id, const std::string& kind, const std::string& message) override {
    sessions_->Announce(id, kind, message);
  }
  StatusOr<std::optional<v1::ScoreReport>> FinalScore(const std::string& id) override {
    return store_->LoadScore(id);
  }
  std::vector<v1::SessionEvent> Events(const std::string& id) override {
    auto events = store_->LoadEvents(id, 500);
    return events.ok() ? *events : std::vector<v1::SessionEvent>{};
  }

 private:
  SessionManager* sessions_;
  Store* store_;
  std::vector<v1::Scenario> catalogue_;
};

}  // namespace

std::unique_ptr<ExamSessions> SessionsForExams(SessionManager* sessions, Store* store,
                                               std::vector<v1::Scenario> catalogue) {
  return std::make_unique<SessionManagerExams>(sessions, store, std::move(catalogue));
}

}  // namespace firedrill::controller
