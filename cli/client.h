// A thin client for the public Drill service: every call has a deadline, and
// gRPC errors become one-line Status messages that say what to do.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"
#include "firedrill/v1/controller.grpc.pb.h"

namespace firedrill::cli {

class DrillClient {
 public:
  explicit DrillClient(std::string address, std::chrono::milliseconds deadline = std::chrono::seconds(10));
  const std::string& address() const { return address_; }

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

 private:
  template <typename Req, typename Resp>
  StatusOr<Resp> Call(grpc::Status (v1::Drill::Stub::*fn)(grpc::ClientContext*, const Req&, Resp*), const Req& req,
                      std::chrono::milliseconds deadline);
  Status FromGrpc(const grpc::Status& st) const;

  std::string address_;
  std::chrono::milliseconds deadline_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Drill::Stub> stub_;
};

}  // namespace firedrill::cli
