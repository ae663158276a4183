// A thin client for the public Drill service: every call has a deadline, and
// gRPC errors become one-line Status messages that say what to do.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "firedrill/v1/controller.grpc.pb.h"

namespace firedrill::cli {

class DrillClient {
 public:
  // `tls_ca`: a PEM file of the CA that signed the controller's certificate
  // (TLS); "" speaks plaintext. A CA file that cannot be read fails every
  // call with that error.
  explicit DrillClient(std::string address, std::chrono::milliseconds deadline = std::chrono::seconds(10),
                       const std::string& tls_ca = "");
  const std::string& address() const { return address_; }
  // The bearer token every call presents ("" presents none).
  void SetToken(std::string token) { token_ = std::move(token); }

  // True if the controller answers within `wait`.
  bool Reachable(std::chrono::milliseconds wait);

  StatusOr<v1::ListScenariosResponse> ListScenarios();
  StatusOr<v1::ScenarioDetail> GetScenario(const std::string& scenario_id);
  StatusOr<v1::ListCausesResponse> ListCauses();
  StatusOr<v1::SessionInfo> StartSession(const std::string& scenario_id, int64_t seed);
  StatusOr<v1::ListSessionsResponse> ListSessions();
  StatusOr<v1::SessionStatus> GetStatus(const std::string& session_id);
  StatusOr<v1::TraceResponse> GetTrace(const v1::GetTraceRequest& req);
  StatusOr<v1::MetricsResponse> GetMetrics(const v1::GetMetricsRequest& req);
  StatusOr<v1::ListCheckpointsResponse> ListCheckpoints(const std::string& session_id);
  StatusOr<v1::VerifyCheckpointResponse> VerifyCheckpoint(const std::string& session_id, int64_t step);
  StatusOr<v1::LogsResponse> GetLogs(const v1::GetLogsRequest& req);
  StatusOr<v1::FlightRecorderResponse> GetFlightRecorder(const std::string& session_id);
  // Waits for a step boundary (a minute) and the sweep (ten).
  StatusOr<v1::RunProbeResponse> RunProbe(const v1::RunProbeRequest& req);
  StatusOr<v1::SubmitDiagnosisResponse> SubmitDiagnosis(const v1::SubmitDiagnosisRequest& req);
  StatusOr<v1::ApplyFixResponse> ApplyFix(const v1::ApplyFixRequest& req);
  StatusOr<v1::RequestHintResponse> RequestHint(const std::string& session_id);
  StatusOr<v1::ScoreReport> GetScore(const std::string& session_id);
  StatusOr<v1::SessionInfo> EndSession(const std::string& session_id, std::chrono::milliseconds deadline);
  StatusOr<v1::WhoAmIResponse> WhoAmI();
  StatusOr<v1::IssueTokenResponse> IssueToken(const v1::IssueTokenRequest& req);
  StatusOr<v1::RevokeTokenResponse> RevokeToken(const std::string& name);
  StatusOr<v1::ListTokensResponse> ListTokens();
  // Exams.
  StatusOr<v1::ExamInfo> CreateExam(const std::string& yaml, const std::string& filename);
  StatusOr<v1::ListExamsResponse> ListExams();
  StatusOr<v1::IssueTokenResponse> IssueCandidate(const std::string& exam_id, const std::string& name);
  StatusOr<v1::SittingInfo> StartSitting();
  StatusOr<v1::SittingInfo> GetSitting(const v1::GetSittingRequest& req);
  StatusOr<v1::SessionInfo> OpenItem(int item, bool new_attempt);
  // Ends every open item (each is scored): give it minutes.
  StatusOr<v1::SittingInfo> FinishSitting(std::chrono::milliseconds deadline);
  StatusOr<v1::ExamResultResponse> GetExamResult(const v1::GetExamResultRequest& req);
  StatusOr<v1::ExamResultResponse> RescoreItem(const v1::RescoreItemRequest& req);
  StatusOr<v1::SittingInfo> AllowRetake(const std::string& exam_id, const std::string& candidate);
  StatusOr<v1::ExamPublicKey> GetExamPublicKey();
  StatusOr<v1::ExportAuditResponse> ExportAudit(const std::string& exam_id, const std::string& candidate);
  // Team drills.
  StatusOr<v1::TimelineItem> PostTimeline(const std::string& session_id, const std::string& kind,
                                          const std::string& text);
  // Streams: `each` is called per message until the stream ends or it
  // returns false (then the stream is cancelled).
  Status WatchTimeline(const std::string& session_id, bool follow, int64_t after_seq,
                       const std::function<bool(const v1::TimelineItem&)>& each);
  Status WatchStatus(const std::string& session_id, int interval_ms,
                     const std::function<bool(const v1::SessionStatus&)>& each);
  StatusOr<v1::PostmortemResponse> GetPostmortem(const std::string& session_id);

 private:
  template <typename Req, typename Resp>
  StatusOr<Resp> Call(grpc::Status (v1::Drill::Stub::*fn)(grpc::ClientContext*, const Req&, Resp*), const Req& req,
                      std::chrono::milliseconds deadline);
  Status FromGrpc(const grpc::Status& st) const;
  // Refuses a token in plaintext off loopback; sets the token on `ctx`.
  Status Prepare(grpc::ClientContext* ctx) const;
  template <typename Req, typename Resp>
  Status Stream(std::unique_ptr<grpc::ClientReader<Resp>> (v1::Drill::Stub::*fn)(grpc::ClientContext*,
                                                                                 const Req&),
                const Req& req, const std::function<bool(const Resp&)>& each);

  std::string address_;
  std::chrono::milliseconds deadline_;
  std::string token_;
  Status setup_;  // a TLS CA that could not be read
  bool tls_ = false;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Drill::Stub> stub_;
};

// True for a unix: address and a host of 127.x, ::1 or localhost: where a
// token may travel without TLS (a client refuses to send one elsewhere).
bool IsLoopbackAddress(const std::string& address);
// <state_dir>/owner.token: the owner token a controller of that state dir
// wrote for the local CLI.
std::string OwnerTokenFile(const std::string& state_dir);
// Its first line ("" if it cannot be read).
std::string ReadOwnerToken(const std::string& state_dir);
// The token a command presents: the first line of `token_file` if one is
// given (an error if it cannot be read), else $FIREDRILL_TOKEN, else the
// owner token of `state_dir` if this user can read it and the live
// controller of that state dir (controller.pid) serves `controller` (its
// controller.addr says so: the owner token is never sent to another
// address), else "".
StatusOr<std::string> ResolveToken(const std::string& token_file, const std::string& state_dir,
                                   const std::string& controller);

}  // namespace firedrill::cli
