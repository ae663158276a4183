// The public Drill service: authenticates and authorises each call
// (controller/authz.h), then maps it onto the session manager and Status
// onto gRPC status codes. No drill logic of its own.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "controller/authz.h"
#include "controller/exam_manager.h"
#include "controller/session_manager.h"
#include "controller/timeline.h"
#include "firedrill/v1/controller.grpc.pb.h"

namespace firedrill::controller {

// A failed Status as a gRPC status whose details (grpc-status-details-bin)
// are a google.rpc.Status carrying an ErrorInfo of domain "firedrill": the
// mark that the controller itself said it (not gRPC's transport).
grpc::Status ToGrpc(const Status& st);
inline constexpr const char* kErrorDomain = "firedrill";

class DrillService final : public v1::Drill::Service {
 public:
  // `exams` may be null (no exam calls; nothing recorded), `timeline` too
  // (no team calls).
  DrillService(SessionManager* sessions, Gatekeeper* gate, ExamManager* exams = nullptr,
               Timeline* timeline = nullptr)
      : sessions_(sessions), gate_(gate), exams_(exams), timeline_(timeline) {}

  grpc::Status ListScenarios(grpc::ServerContext*, const v1::ListScenariosRequest*,
                             v1::ListScenariosResponse*) override;
  grpc::Status GetScenario(grpc::ServerContext*, const v1::GetScenarioRequest*, v1::ScenarioDetail*) override;
  grpc::Status ListCauses(grpc::ServerContext*, const v1::ListCausesRequest*, v1::ListCausesResponse*) override;
  grpc::Status StartSession(grpc::ServerContext*, const v1::StartSessionRequest*, v1::SessionInfo*) override;
  grpc::Status ListSessions(grpc::ServerContext*, const v1::ListSessionsRequest*,
                            v1::ListSessionsResponse*) override;
  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*, v1::SessionStatus*) override;
  grpc::Status GetTrace(grpc::ServerContext*, const v1::GetTraceRequest*, v1::TraceResponse*) override;
  grpc::Status GetMetrics(grpc::ServerContext*, const v1::GetMetricsRequest*, v1::MetricsResponse*) override;
  grpc::Status ListCheckpoints(grpc::ServerContext*, const v1::ListCheckpointsRequest*,
                               v1::ListCheckpointsResponse*) override;
  grpc::Status VerifyCheckpoint(grpc::ServerContext*, const v1::VerifyCheckpointRequest*,
                                v1::VerifyCheckpointResponse*) override;
  grpc::Status GetLogs(grpc::ServerContext*, const v1::GetLogsRequest*, v1::LogsResponse*) override;
  grpc::Status GetFlightRecorder(grpc::ServerContext*, const v1::GetFlightRecorderRequest*,
                                 v1::FlightRecorderResponse*) override;
  grpc::Status RunProbe(grpc::ServerContext*, const v1::RunProbeRequest*, v1::RunProbeResponse*) override;
  grpc::Status SubmitDiagnosis(grpc::ServerContext*, const v1::SubmitDiagnosisRequest*,
                               v1::SubmitDiagnosisResponse*) override;
  grpc::Status ApplyFix(grpc::ServerContext*, const v1::ApplyFixRequest*, v1::ApplyFixResponse*) override;
  grpc::Status RequestHint(grpc::ServerContext*, const v1::RequestHintRequest*, v1::RequestHintResponse*) override;
  grpc::Status GetScore(grpc::ServerContext*, const v1::GetScoreRequest*, v1::ScoreReport*) override;
  grpc::Status EndSession(grpc::ServerContext*, const v1::EndSessionRequest*, v1::SessionInfo*) override;
  grpc::Status WhoAmI(grpc::ServerContext*, const v1::WhoAmIRequest*, v1::WhoAmIResponse*) override;
  grpc::Status IssueToken(grpc::ServerContext*, const v1::IssueTokenRequest*,
                          v1::IssueTokenResponse*) override;
  grpc::Status RevokeToken(grpc::ServerContext*, const v1::RevokeTokenRequest*,
                           v1::RevokeTokenResponse*) override;
  grpc::Status ListTokens(grpc::ServerContext*, const v1::ListTokensRequest*,
                          v1::ListTokensResponse*) override;
  grpc::Status CreateExam(grpc::ServerContext*, const v1::CreateExamRequest*, v1::ExamInfo*) override;
  grpc::Status ListExams(grpc::ServerContext*, const v1::ListExamsRequest*, v1::ListExamsResponse*) override;
  grpc::Status IssueCandidate(grpc::ServerContext*, const v1::IssueCandidateRequest*,
                              v1::IssueTokenResponse*) override;
  grpc::Status StartSitting(grpc::ServerContext*, const v1::StartSittingRequest*, v1::SittingInfo*) override;
  grpc::Status GetSitting(grpc::ServerContext*, const v1::GetSittingRequest*, v1::SittingInfo*) override;
  grpc::Status OpenItem(grpc::ServerContext*, const v1::OpenItemRequest*, v1::SessionInfo*) override;
  grpc::Status FinishSitting(grpc::ServerContext*, const v1::FinishSittingRequest*,
                             v1::SittingInfo*) override;
  grpc::Status GetExamResult(grpc::ServerContext*, const v1::GetExamResultRequest*,
                             v1::ExamResultResponse*) override;
  grpc::Status RescoreItem(grpc::ServerContext*, const v1::RescoreItemRequest*,
                           v1::ExamResultResponse*) override;
  grpc::Status AllowRetake(grpc::ServerContext*, const v1::AllowRetakeRequest*, v1::SittingInfo*) override;
  grpc::Status GetExamPublicKey(grpc::ServerContext*, const v1::GetExamPublicKeyRequest*,
                                v1::ExamPublicKey*) override;
  grpc::Status ExportAudit(grpc::ServerContext*, const v1::ExportAuditRequest*,
                           v1::ExportAuditResponse*) override;
  grpc::Status PostTimeline(grpc::ServerContext*, const v1::PostTimelineRequest*, v1::TimelineItem*) override;
  grpc::Status WatchTimeline(grpc::ServerContext*, const v1::WatchTimelineRequest*,
                             grpc::ServerWriter<v1::TimelineItem>*) override;
  grpc::Status WatchStatus(grpc::ServerContext*, const v1::WatchStatusRequest*,
                           grpc::ServerWriter<v1::SessionStatus>*) override;
  grpc::Status GetPostmortem(grpc::ServerContext*, const v1::GetPostmortemRequest*,
                             v1::PostmortemResponse*) override;

  // The same admission for a caller that is not a gRPC call (the HTTP side,
  // controller/web_service.h): the grant of an "authorization" value, then
  // the checks Admit and AdmitToSession make after theirs (a candidate's
  // request is recorded in the audit trail as `method`).
  StatusOr<Grant> AuthenticateHeader(std::string_view authorization) const {
    return gate_->Authenticate(authorization);
  }
  StatusOr<Grant> AdmitGrant(const Grant& who, Access what, const char* method,
                             const google::protobuf::Message& req) const;
  StatusOr<Grant> AdmitGrantToSession(const Grant& who, const std::string& id, SessionUse use,
                                      const char* method, const google::protobuf::Message& req) const;
  // What ListSessions answers `who` (admitted to list): the sessions it may
  // see, sealed for a candidate.
  std::vector<v1::SessionInfo> SessionsFor(const Grant& who);
  // What GetStatus answers `who` (admitted to the session): a snapshot at
  // most `fresh` old, shared by every viewer, sealed for a candidate.
  StatusOr<v1::SessionStatus> StatusFor(const Grant& who, const std::string& id,
                                        std::chrono::milliseconds fresh);
  // What WatchTimeline sends `who` (admitted to the session): the shared
  // timeline's items after `after_seq`, sealed for a candidate.
  StatusOr<std::vector<v1::TimelineItem>> TimelineFor(const Grant& who, const std::string& id,
                                                      int64_t after_seq);

 private:
  // The grant of the token the call presents (Unauthenticated if none).
  StatusOr<Grant> Authenticate(grpc::ServerContext* ctx) const;
  // The caller's grant, if its token is live and may make a call of `what`.
  // A candidate's call (`method` with `req`) is recorded in their exam's
  // audit trail, refused or not, before it is made.
  StatusOr<Grant> Admit(grpc::ServerContext* ctx, Access what, const char* method,
                        const google::protobuf::Message& req) const;
  // The same for a call on session `id`: a session the caller may not see
  // is answered as one that does not exist.
  StatusOr<Grant> AdmitToSession(grpc::ServerContext* ctx, const std::string& id, SessionUse use,
                                 const char* method, const google::protobuf::Message& req) const;
  StatusOr<Grant> Recorded(const Grant& who, const char* method, const google::protobuf::Message& req,
                           const Status& admitted) const;
  // The exam calls, when this controller runs exams.
  Status ExamsOn() const;
  // Puts what `who` did on session `id` on its shared timeline.
  void OnTimeline(const Grant& who, const std::string& id, const std::string& kind, const std::string& text);
  // A session's status, computed at most once per `fresh` for every viewer
  // of WatchStatus.
  StatusOr<v1::SessionStatus> SharedStatus(const std::string& id, std::chrono::milliseconds fresh);

  SessionManager* sessions_;
  Gatekeeper* gate_;
  ExamManager* exams_;
  Timeline* timeline_;
  // A proctor scoped to one exam (its token's exam id) watches that exam's
  // items only: any other session is, to it, no session.
  bool ScopedOut(const Grant& who, const std::string& id, const std::string& session_owner) const;
  struct Snapshot {
    std::mutex mu;  // one viewer computes, the others wait for it
    std::chrono::steady_clock::time_point at;
    StatusOr<v1::SessionStatus> status = v1::SessionStatus();
  };
  std::mutex snapshots_mu_;
  std::map<std::string, std::shared_ptr<Snapshot>> snapshots_;
};

}  // namespace firedrill::controller
