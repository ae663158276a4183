#include "cli/client.h"

#include <arpa/inet.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cli/local_controller.h"
#include "google/rpc/status.pb.h"

namespace firedrill::cli {

namespace {

std::shared_ptr<grpc::ChannelCredentials> Credentials(const std::string& tls_ca, Status* setup) {
  if (tls_ca.empty()) return grpc::InsecureChannelCredentials();
  std::ifstream in(tls_ca, std::ios::binary);
  std::ostringstream pem;
  pem << in.rdbuf();
  if (!in || pem.str().find("-----BEGIN CERTIFICATE") == std::string::npos) {
    *setup = FailedPrecondition("--tls-ca " + tls_ca +
                                ": cannot read a PEM certificate there (`firedrill certs` "
                                "writes ca.pem)");
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  return grpc::SslCredentials(ssl);
}

}  // namespace

DrillClient::DrillClient(std::string address, std::chrono::milliseconds deadline, const std::string& tls_ca)
    : address_(std::move(address)),
      deadline_(deadline),
      tls_(!tls_ca.empty()),
      channel_(grpc::CreateChannel(address_, Credentials(tls_ca, &setup_))),
      stub_(v1::Drill::NewStub(channel_)) {}

bool DrillClient::Reachable(std::chrono::milliseconds wait) {
  return setup_.ok() && channel_->WaitForConnected(std::chrono::system_clock::now() + wait);
}

Status DrillClient::FromGrpc(const grpc::Status& st) const {
  if (st.ok()) return Status::Ok();
  // The controller's own error (see controller ToGrpc: a google.rpc.Status
  // with an ErrorInfo of domain "firedrill"): its message says it.
  google::rpc::Status rich;
  if (!st.error_details().empty() && rich.ParseFromString(st.error_details())) {
    for (const auto& any : rich.details()) {
      google::rpc::ErrorInfo info;
      if (any.UnpackTo(&info) && info.domain() == "firedrill")
        return Status(static_cast<StatusCode>(st.error_code()), st.error_message());
    }
  }
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return Unavailable(
        "no controller answers at " + address_ +
        (tls_ ? " over TLS (is its certificate signed by the --tls-ca given, and for this address?)" : "") +
        "; start one with `firedrill up` or point to one with --controller ADDR");
  }
  if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return DeadlineExceeded("the controller at " + address_ + " did not answer in time; check its log");
  }
  return Status(static_cast<StatusCode>(st.error_code()), st.error_message());
}

Status DrillClient::Prepare(grpc::ClientContext* ctx) const {
  if (!setup_.ok()) return setup_;
  if (!token_.empty() && !tls_ && !IsLoopbackAddress(address_)) {
    // A token is a credential: never readable on a network.
    return FailedPrecondition(
        "refusing to send a token in plaintext to " + address_ +
        ": that controller must speak TLS (--tls-ca names the CA that signed its certificate)");
  }
  if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
  return Status::Ok();
}

template <typename Req, typename Resp>
StatusOr<Resp> DrillClient::Call(grpc::Status (v1::Drill::Stub::*fn)(grpc::ClientContext*, const Req&, Resp*),
                                 const Req& req, std::chrono::milliseconds deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  if (Status st = Prepare(&ctx); !st.ok()) return st;
  Resp resp;
  grpc::Status st = ((*stub_).*fn)(&ctx, req, &resp);
  if (!st.ok()) return FromGrpc(st);
  return resp;
}

StatusOr<v1::ListScenariosResponse> DrillClient::ListScenarios() {
  return Call(&v1::Drill::Stub::ListScenarios, v1::ListScenariosRequest(), deadline_);
}

StatusOr<v1::ScenarioDetail> DrillClient::GetScenario(const std::string& scenario_id) {
  v1::GetScenarioRequest req;
  req.set_scenario_id(scenario_id);
  return Call(&v1::Drill::Stub::GetScenario, req, deadline_);
}

StatusOr<v1::ListCausesResponse> DrillClient::ListCauses() {
  return Call(&v1::Drill::Stub::ListCauses, v1::ListCausesRequest(), deadline_);
}

StatusOr<v1::SessionInfo> DrillClient::StartSession(const std::string& scenario_id, int64_t seed) {
  v1::StartSessionRequest req;
  req.set_scenario_id(scenario_id);
  req.set_seed(seed);
  return Call(&v1::Drill::Stub::StartSession, req, deadline_);
}

StatusOr<v1::ListSessionsResponse> DrillClient::ListSessions() {
  return Call(&v1::Drill::Stub::ListSessions, v1::ListSessionsRequest(), deadline_);
}

StatusOr<v1::SessionStatus> DrillClient::GetStatus(const std::string& session_id) {
  v1::GetStatusRequest req;
  req.set_session_id(session_id);
  return Call(&v1::Drill::Stub::GetStatus, req, deadline_);
}

StatusOr<v1::TraceResponse> DrillClient::GetTrace(const v1::GetTraceRequest& req) {
  return Call(&v1::Drill::Stub::GetTrace, req, deadline_);
}

StatusOr<v1::MetricsResponse> DrillClient::GetMetrics(const v1::GetMetricsRequest& req) {
  return Call(&v1::Drill::Stub::GetMetrics, req, deadline_);
}

StatusOr<v1::ListCheckpointsResponse> DrillClient::ListCheckpoints(const std::string& session_id) {
  v1::ListCheckpointsRequest req;
  req.set_session_id(session_id);
  return Call(&v1::Drill::Stub::ListCheckpoints, req, deadline_);
}

StatusOr<v1::VerifyCheckpointResponse> DrillClient::VerifyCheckpoint(const std::string& session_id, int64_t step) {
  v1::VerifyCheckpointRequest req;
  req.set_session_id(session_id);
  req.set_step(step);
  return Call(&v1::Drill::Stub::VerifyCheckpoint, req, deadline_);
}

StatusOr<v1::LogsResponse> DrillClient::GetLogs(const v1::GetLogsRequest& req) {
  return Call(&v1::Drill::Stub::GetLogs, req, deadline_);
}

StatusOr<v1::FlightRecorderResponse> DrillClient::GetFlightRecorder(const std::string& session_id) {
  v1::GetFlightRecorderRequest req;
  req.set_session_id(session_id);
  return Call(&v1::Drill::Stub::GetFlightRecorder, req, deadline_);
}

StatusOr<v1::RunProbeResponse> DrillClient::RunProbe(const v1::RunProbeRequest& req) {
  return Call(&v1::Drill::Stub::RunProbe, req, std::chrono::milliseconds(std::chrono::minutes(11)));
}

StatusOr<v1::SubmitDiagnosisResponse> DrillClient::SubmitDiagnosis(const v1::SubmitDiagnosisRequest& req) {
  return Call(&v1::Drill::Stub::SubmitDiagnosis, req, deadline_);
}

StatusOr<v1::ApplyFixResponse> DrillClient::ApplyFix(const v1::ApplyFixRequest& req) {
  return Call(&v1::Drill::Stub::ApplyFix, req, deadline_);
}

StatusOr<v1::RequestHintResponse> DrillClient::RequestHint(const std::string& session_id) {
  v1::RequestHintRequest req;
  req.set_session_id(session_id);
  return Call(&v1::Drill::Stub::RequestHint, req, deadline_);
}

StatusOr<v1::ScoreReport> DrillClient::GetScore(const std::string& session_id) {
  v1::GetScoreRequest req;
  req.set_session_id(session_id);
  return Call(&v1::Drill::Stub::GetScore, req, deadline_);
}

StatusOr<v1::SessionInfo> DrillClient::EndSession(const std::string& session_id, std::chrono::milliseconds deadline) {
  v1::EndSessionRequest req;
  req.set_session_id(session_id);
  return Call(&v1::Drill::Stub::EndSession, req, deadline);
}

StatusOr<v1::WhoAmIResponse> DrillClient::WhoAmI() {
  return Call(&v1::Drill::Stub::WhoAmI, v1::WhoAmIRequest(), deadline_);
}

StatusOr<v1::IssueTokenResponse> DrillClient::IssueToken(const v1::IssueTokenRequest& req) {
  return Call(&v1::Drill::Stub::IssueToken, req, deadline_);
}

StatusOr<v1::RevokeTokenResponse> DrillClient::RevokeToken(const std::string& name) {
  v1::RevokeTokenRequest req;
  req.set_name(name);
  return Call(&v1::Drill::Stub::RevokeToken, req, deadline_);
}

StatusOr<v1::ListTokensResponse> DrillClient::ListTokens() {
  return Call(&v1::Drill::Stub::ListTokens, v1::ListTokensRequest(), deadline_);
}

StatusOr<v1::ExamInfo> DrillClient::CreateExam(const std::string& yaml, const std::string& filename) {
  v1::CreateExamRequest req;
  req.set_yaml(yaml);
  req.set_filename(filename);
  return Call(&v1::Drill::Stub::CreateExam, req, deadline_);
}

StatusOr<v1::ListExamsResponse> DrillClient::ListExams() {
  return Call(&v1::Drill::Stub::ListExams, v1::ListExamsRequest(), deadline_);
}

StatusOr<v1::IssueTokenResponse> DrillClient::IssueCandidate(const std::string& exam_id,
                                                             const std::string& name) {
  v1::IssueCandidateRequest req;
  req.set_exam_id(exam_id);
  req.set_name(name);
  return Call(&v1::Drill::Stub::IssueCandidate, req, deadline_);
}

StatusOr<v1::SittingInfo> DrillClient::StartSitting() {
  return Call(&v1::Drill::Stub::StartSitting, v1::StartSittingRequest(), deadline_);
}

StatusOr<v1::SittingInfo> DrillClient::GetSitting(const v1::GetSittingRequest& req) {
  return Call(&v1::Drill::Stub::GetSitting, req, deadline_);
}

StatusOr<v1::SessionInfo> DrillClient::OpenItem(int item, bool new_attempt) {
  v1::OpenItemRequest req;
  req.set_item(item);
  req.set_new_attempt(new_attempt);
  return Call(&v1::Drill::Stub::OpenItem, req, deadline_);
}

StatusOr<v1::SittingInfo> DrillClient::FinishSitting(std::chrono::milliseconds deadline) {
  return Call(&v1::Drill::Stub::FinishSitting, v1::FinishSittingRequest(), deadline);
}

StatusOr<v1::ExamResultResponse> DrillClient::GetExamResult(const v1::GetExamResultRequest& req) {
  return Call(&v1::Drill::Stub::GetExamResult, req, deadline_);
}

StatusOr<v1::ExamResultResponse> DrillClient::RescoreItem(const v1::RescoreItemRequest& req) {
  return Call(&v1::Drill::Stub::RescoreItem, req, deadline_);
}

StatusOr<v1::SittingInfo> DrillClient::AllowRetake(const std::string& exam_id, const std::string& candidate) {
  v1::AllowRetakeRequest req;
  req.set_exam_id(exam_id);
  req.set_candidate(candidate);
  return Call(&v1::Drill::Stub::AllowRetake, req, deadline_);
}

StatusOr<v1::ExamPublicKey> DrillClient::GetExamPublicKey() {
  return Call(&v1::Drill::Stub::GetExamPublicKey, v1::GetExamPublicKeyRequest(), deadline_);
}

StatusOr<v1::ExportAuditResponse> DrillClient::ExportAudit(const std::string& exam_id,
                                                           const std::string& candidate) {
  v1::ExportAuditRequest req;
  req.set_exam_id(exam_id);
  req.set_candidate(candidate);
  return Call(&v1::Drill::Stub::ExportAudit, req, deadline_);
}

template <typename Req, typename Resp>
Status DrillClient::Stream(
    std::unique_ptr<grpc::ClientReader<Resp>> (v1::Drill::Stub::*fn)(grpc::ClientContext*, const Req&),
    const Req& req, const std::function<bool(const Resp&)>& each) {
  grpc::ClientContext ctx;  // no deadline: a stream lasts as long as the session
  if (Status st = Prepare(&ctx); !st.ok()) return st;
  auto reader = ((*stub_).*fn)(&ctx, req);
  Resp msg;
  while (reader->Read(&msg)) {
    if (!each(msg)) {
      ctx.TryCancel();
      break;
    }
  }
  grpc::Status st = reader->Finish();
  if (st.error_code() == grpc::StatusCode::CANCELLED) return Status::Ok();
  return st.ok() ? Status::Ok() : FromGrpc(st);
}

StatusOr<v1::TimelineItem> DrillClient::PostTimeline(const std::string& session_id, const std::string& kind,
                                                     const std::string& text) {
  v1::PostTimelineRequest req;
  req.set_session_id(session_id);
  req.set_kind(kind);
  req.set_text(text);
  return Call(&v1::Drill::Stub::PostTimeline, req, deadline_);
}

Status DrillClient::WatchTimeline(const std::string& session_id, bool follow, int64_t after_seq,
                                  const std::function<bool(const v1::TimelineItem&)>& each) {
  v1::WatchTimelineRequest req;
  req.set_session_id(session_id);
  req.set_follow(follow);
  req.set_after_seq(after_seq);
  return Stream(&v1::Drill::Stub::WatchTimeline, req, each);
}

Status DrillClient::WatchStatus(const std::string& session_id, int interval_ms,
                                const std::function<bool(const v1::SessionStatus&)>& each) {
  v1::WatchStatusRequest req;
  req.set_session_id(session_id);
  req.set_interval_ms(interval_ms);
  return Stream(&v1::Drill::Stub::WatchStatus, req, each);
}

StatusOr<v1::PostmortemResponse> DrillClient::GetPostmortem(const std::string& session_id) {
  v1::GetPostmortemRequest req;
  req.set_session_id(session_id);
  return Call(&v1::Drill::Stub::GetPostmortem, req, deadline_);
}

bool IsLoopbackAddress(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return true;
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  in_addr v4{};
  // 127.0.0.0/8 as an address, not a name that starts "127.".
  return host == "localhost" || host == "::1" ||
         (inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127);
}

std::string OwnerTokenFile(const std::string& state_dir) { return state_dir + "/owner.token"; }

namespace {
std::string FirstLine(const std::string& path, bool* readable) {
  std::ifstream in(path);
  std::string line;
  *readable = static_cast<bool>(in);
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}
}  // namespace

std::string ReadOwnerToken(const std::string& state_dir) {
  bool readable = false;
  return FirstLine(OwnerTokenFile(state_dir), &readable);
}

StatusOr<std::string> ResolveToken(const std::string& token_file, const std::string& state_dir,
                                   const std::string& controller) {
  bool readable = false;
  if (!token_file.empty()) {
    std::string t = FirstLine(token_file, &readable);
    if (!readable || t.empty())
      return InvalidArgument("--token-file " + token_file + ": cannot read a token from its first line");
    return t;
  }
  if (const char* env = std::getenv("FIREDRILL_TOKEN"); env && *env) return std::string(env);
  // Only to the live controller that wrote it: a controller.addr a crash
  // left behind must not send the owner token to whoever binds that port.
  if (FirstLine(state_dir + "/controller.addr", &readable) != controller || !RunningControllerPid(state_dir))
    return std::string();
  return ReadOwnerToken(state_dir);
}

}  // namespace firedrill::cli
