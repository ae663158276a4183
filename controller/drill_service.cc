#include "controller/drill_service.h"

#include "faults/registry.h"
#include "google/rpc/status.pb.h"

namespace firedrill::controller {

grpc::Status ToGrpc(const Status& st) {
  if (st.ok()) return grpc::Status::OK;
  // The ErrorInfo marks the error as the controller's own, so that a client
  // can tell "probe ... did not reach a step boundary" (DEADLINE_EXCEEDED)
  // or "rank 2's agent is not connected" (UNAVAILABLE) from gRPC's own
  // transport errors with the same codes.
  google::rpc::Status rich;
  rich.set_code(static_cast<int>(st.code()));
  rich.set_message(st.message());
  google::rpc::ErrorInfo info;
  info.set_domain(kErrorDomain);
  info.set_reason(StatusCodeName(st.code()));
  rich.add_details()->PackFrom(info);
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), st.message(), rich.SerializeAsString());
}

namespace {
template <typename T, typename Out>
grpc::Status Reply(StatusOr<T> r, Out* out) {
  if (!r.ok()) return ToGrpc(r.status());
  *out = std::move(r).value();
  return grpc::Status::OK;
}
}  // namespace

grpc::Status DrillService::ListScenarios(grpc::ServerContext*, const v1::ListScenariosRequest*,
                                         v1::ListScenariosResponse* out) {
  for (auto& s : sessions_->ListScenarios()) *out->add_scenarios() = std::move(s);
  return grpc::Status::OK;
}

grpc::Status DrillService::GetScenario(grpc::ServerContext*, const v1::GetScenarioRequest* req,
                                       v1::ScenarioDetail* out) {
  return Reply(sessions_->GetScenario(req->scenario_id()), out);
}

grpc::Status DrillService::ListCauses(grpc::ServerContext*, const v1::ListCausesRequest*,
                                      v1::ListCausesResponse* out) {
  for (const auto& c : faults::CauseTaxonomy()) {
    v1::CauseInfo* i = out->add_causes();
    i->set_cause(c.cause);
    i->set_meaning(c.meaning);
    i->set_cause_class(c.cause_class);
  }
  return grpc::Status::OK;
}

grpc::Status DrillService::StartSession(grpc::ServerContext*, const v1::StartSessionRequest* req,
                                        v1::SessionInfo* out) {
  return Reply(sessions_->Start(*req), out);
}

grpc::Status DrillService::ListSessions(grpc::ServerContext*, const v1::ListSessionsRequest*,
                                        v1::ListSessionsResponse* out) {
  for (auto& s : sessions_->List()) *out->add_sessions() = std::move(s);
  return grpc::Status::OK;
}

grpc::Status DrillService::GetStatus(grpc::ServerContext*, const v1::GetStatusRequest* req, v1::SessionStatus* out) {
  return Reply(sessions_->GetStatus(req->session_id()), out);
}

grpc::Status DrillService::GetTrace(grpc::ServerContext*, const v1::GetTraceRequest* req, v1::TraceResponse* out) {
  return Reply(sessions_->GetTrace(*req), out);
}

grpc::Status DrillService::GetMetrics(grpc::ServerContext*, const v1::GetMetricsRequest* req,
                                      v1::MetricsResponse* out) {
  return Reply(sessions_->GetMetrics(*req), out);
}

grpc::Status DrillService::ListCheckpoints(grpc::ServerContext*, const v1::ListCheckpointsRequest* req,
                                           v1::ListCheckpointsResponse* out) {
  return Reply(sessions_->ListCheckpoints(*req), out);
}

grpc::Status DrillService::VerifyCheckpoint(grpc::ServerContext*, const v1::VerifyCheckpointRequest* req,
                                            v1::VerifyCheckpointResponse* out) {
  return Reply(sessions_->VerifyCheckpoint(*req), out);
}

grpc::Status DrillService::GetLogs(grpc::ServerContext*, const v1::GetLogsRequest* req, v1::LogsResponse* out) {
  return Reply(sessions_->GetLogs(*req), out);
}

grpc::Status DrillService::GetFlightRecorder(grpc::ServerContext*, const v1::GetFlightRecorderRequest* req,
                                             v1::FlightRecorderResponse* out) {
  return Reply(sessions_->GetFlightRecorder(*req), out);
}

grpc::Status DrillService::RunProbe(grpc::ServerContext*, const v1::RunProbeRequest* req, v1::RunProbeResponse* out) {
  return Reply(sessions_->RunProbe(*req), out);
}

grpc::Status DrillService::SubmitDiagnosis(grpc::ServerContext*, const v1::SubmitDiagnosisRequest* req,
                                           v1::SubmitDiagnosisResponse* out) {
  return Reply(sessions_->Diagnose(*req), out);
}

grpc::Status DrillService::ApplyFix(grpc::ServerContext*, const v1::ApplyFixRequest* req,
                                    v1::ApplyFixResponse* out) {
  return Reply(sessions_->Fix(*req), out);
}

grpc::Status DrillService::RequestHint(grpc::ServerContext*, const v1::RequestHintRequest* req,
                                       v1::RequestHintResponse* out) {
  return Reply(sessions_->Hint(req->session_id()), out);
}

grpc::Status DrillService::GetScore(grpc::ServerContext*, const v1::GetScoreRequest* req, v1::ScoreReport* out) {
  return Reply(sessions_->GetScore(req->session_id()), out);
}

grpc::Status DrillService::EndSession(grpc::ServerContext*, const v1::EndSessionRequest* req, v1::SessionInfo* out) {
  return Reply(sessions_->End(req->session_id()), out);
}

}  // namespace firedrill::controller
