// The public Drill service: authenticates and authorises each call
// (controller/authz.h), then maps it onto the session manager and Status
// onto gRPC status codes. No drill logic of its own.
#pragma once

#include "controller/authz.h"
#include "controller/session_manager.h"
#include "firedrill/v1/controller.grpc.pb.h"

namespace firedrill::controller {

// A failed Status as a gRPC status whose details (grpc-status-details-bin)
// are a google.rpc.Status carrying an ErrorInfo of domain "firedrill": the
// mark that the controller itself said it (not gRPC's transport).
grpc::Status ToGrpc(const Status& st);
inline constexpr const char* kErrorDomain = "firedrill";

class DrillService final : public v1::Drill::Service {
 public:
  DrillService(SessionManager* sessions, Gatekeeper* gate) : sessions_(sessions), gate_(gate) {}

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

 private:
  // The caller's grant, if its token is live and may make a call of `what`.
  StatusOr<Grant> Admit(grpc::ServerContext* ctx, Access what) const;
  // The same for a call on session `id`: a session the caller may not see
  // is answered as one that does not exist.
  StatusOr<Grant> AdmitToSession(grpc::ServerContext* ctx, const std::string& id, SessionUse use) const;

  SessionManager* sessions_;
  Gatekeeper* gate_;
};

}  // namespace firedrill::controller
