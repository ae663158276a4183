#include "controller/drill_service.h"

#include <algorithm>

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

void FillTokenInfo(const Grant& g, v1::TokenInfo* out) {
  out->set_name(g.name);
  for (uint32_t bit = 1; bit != 0 && bit <= g.roles; bit <<= 1)
    if (g.roles & bit) out->add_roles(RoleName(static_cast<Role>(bit)));
  out->set_exam_id(g.exam_id);
  out->set_session_id(g.session);
  out->set_issued_unix_ms(g.issued_ms);
  out->set_revoked(g.revoked);
}
}  // namespace

// Each call is admitted first; a refused one returns before anything is
// read or changed.
#define FD_ADMIT(expr)                                                            \
  do {                                                                            \
    if (auto admitted = (expr); !admitted.ok()) return ToGrpc(admitted.status()); \
  } while (0)

StatusOr<Grant> DrillService::Admit(grpc::ServerContext* ctx, Access what) const {
  std::string_view header;
  const auto& md = ctx->client_metadata();
  if (auto it = md.find("authorization"); it != md.end())
    header = std::string_view(it->second.data(), it->second.size());
  auto who = gate_->Authenticate(header);
  if (!who.ok()) return who.status();
  FD_RETURN_IF_ERROR(CheckAccess(*who, what));
  return who;
}

StatusOr<Grant> DrillService::AdmitToSession(grpc::ServerContext* ctx, const std::string& id,
                                             SessionUse use) const {
  auto who = Admit(ctx, Access::kAnyToken);
  if (!who.ok()) return who.status();
  auto owner = sessions_->OwnerOf(id);
  if (!owner.ok()) return owner.status();
  if (!MaySeeSession(*who, id, *owner)) return NotFound(NoSessionMessage(id));
  if (!MayUseSession(*who, id, *owner, use)) {
    return PermissionDenied("a " + RoleNames(who->roles) + " token " +
                            (use == SessionUse::kCommand ? "cannot fix or end this session"
                                                         : "cannot run tools or diagnose in this session") +
                            (who->roles & kRoleProctor ? " (a proctor watches)" : ""));
  }
  return who;
}

grpc::Status DrillService::ListScenarios(grpc::ServerContext* ctx, const v1::ListScenariosRequest*,
                                         v1::ListScenariosResponse* out) {
  FD_ADMIT(Admit(ctx, Access::kCatalogue));
  for (auto& s : sessions_->ListScenarios()) *out->add_scenarios() = std::move(s);
  return grpc::Status::OK;
}

grpc::Status DrillService::GetScenario(grpc::ServerContext* ctx, const v1::GetScenarioRequest* req,
                                       v1::ScenarioDetail* out) {
  FD_ADMIT(Admit(ctx, Access::kCatalogue));
  return Reply(sessions_->GetScenario(req->scenario_id()), out);
}

grpc::Status DrillService::ListCauses(grpc::ServerContext* ctx, const v1::ListCausesRequest*,
                                      v1::ListCausesResponse* out) {
  FD_ADMIT(Admit(ctx, Access::kAnyToken));
  for (const auto& c : faults::CauseTaxonomy()) {
    v1::CauseInfo* i = out->add_causes();
    i->set_cause(c.cause);
    i->set_meaning(c.meaning);
    i->set_cause_class(c.cause_class);
  }
  return grpc::Status::OK;
}

grpc::Status DrillService::StartSession(grpc::ServerContext* ctx, const v1::StartSessionRequest* req,
                                        v1::SessionInfo* out) {
  auto who = Admit(ctx, Access::kStartSession);
  if (!who.ok()) return ToGrpc(who.status());
  return Reply(sessions_->Start(*req, who->name), out);
}

grpc::Status DrillService::ListSessions(grpc::ServerContext* ctx, const v1::ListSessionsRequest*,
                                        v1::ListSessionsResponse* out) {
  auto who = Admit(ctx, Access::kListSessions);
  if (!who.ok()) return ToGrpc(who.status());
  for (auto& s : sessions_->List())
    if (MaySeeSession(*who, s.session_id(), s.owner())) *out->add_sessions() = std::move(s);
  return grpc::Status::OK;
}

grpc::Status DrillService::GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest* req,
                                     v1::SessionStatus* out) {
  FD_ADMIT(AdmitToSession(ctx, req->session_id(), SessionUse::kWatch));
  return Reply(sessions_->GetStatus(req->session_id()), out);
}

grpc::Status DrillService::GetTrace(grpc::ServerContext* ctx, const v1::GetTraceRequest* req,
                                    v1::TraceResponse* out) {
  FD_ADMIT(AdmitToSession(ctx, req->session_id(), SessionUse::kWatch));
  return Reply(sessions_->GetTrace(*req), out);
}

grpc::Status DrillService::GetMetrics(grpc::ServerContext* ctx, const v1::GetMetricsRequest* req,
                                      v1::MetricsResponse* out) {
  FD_ADMIT(AdmitToSession(ctx, req->session_id(), SessionUse::kWatch));
  return Reply(sessions_->GetMetrics(*req), out);
}

grpc::Status DrillService::ListCheckpoints(grpc::ServerContext* ctx, const v1::ListCheckpointsRequest* req,
                                           v1::ListCheckpointsResponse* out) {
  FD_ADMIT(AdmitToSession(ctx, req->session_id(), SessionUse::kWatch));
  return Reply(sessions_->ListCheckpoints(*req), out);
}

grpc::Status DrillService::VerifyCheckpoint(grpc::ServerContext* ctx, const v1::VerifyCheckpointRequest* req,
                                            v1::VerifyCheckpointResponse* out) {
  FD_ADMIT(AdmitToSession(ctx, req->session_id(), SessionUse::kInvestigate));
  return Reply(sessions_->VerifyCheckpoint(*req), out);
}

grpc::Status DrillService::GetLogs(grpc::ServerContext* ctx, const v1::GetLogsRequest* req,
                                   v1::LogsResponse* out) {
  FD_ADMIT(AdmitToSession(ctx, req->session_id(), SessionUse::kWatch));
  return Reply(sessions_->GetLogs(*req), out);
}

grpc::Status DrillService::GetFlightRecorder(grpc::ServerContext* ctx,
                                             const v1::GetFlightRecorderRequest* req,
                                             v1::FlightRecorderResponse* out) {
  FD_ADMIT(AdmitToSession(ctx, req->session_id(), SessionUse::kWatch));
  return Reply(sessions_->GetFlightRecorder(*req), out);
}

grpc::Status DrillService::RunProbe(grpc::ServerContext* ctx, const v1::RunProbeRequest* req,
                                    v1::RunProbeResponse* out) {
  FD_ADMIT(AdmitToSession(ctx, req->session_id(), SessionUse::kInvestigate));
  return Reply(sessions_->RunProbe(*req), out);
}

grpc::Status DrillService::SubmitDiagnosis(grpc::ServerContext* ctx, const v1::SubmitDiagnosisRequest* req,
                                           v1::SubmitDiagnosisResponse* out) {
  FD_ADMIT(AdmitToSession(ctx, req->session_id(), SessionUse::kInvestigate));
  return Reply(sessions_->Diagnose(*req), out);
}

grpc::Status DrillService::ApplyFix(grpc::ServerContext* ctx, const v1::ApplyFixRequest* req,
                                    v1::ApplyFixResponse* out) {
  FD_ADMIT(AdmitToSession(ctx, req->session_id(), SessionUse::kCommand));
  return Reply(sessions_->Fix(*req), out);
}

grpc::Status DrillService::RequestHint(grpc::ServerContext* ctx, const v1::RequestHintRequest* req,
                                       v1::RequestHintResponse* out) {
  FD_ADMIT(AdmitToSession(ctx, req->session_id(), SessionUse::kInvestigate));
  return Reply(sessions_->Hint(req->session_id()), out);
}

grpc::Status DrillService::GetScore(grpc::ServerContext* ctx, const v1::GetScoreRequest* req,
                                    v1::ScoreReport* out) {
  FD_ADMIT(AdmitToSession(ctx, req->session_id(), SessionUse::kWatch));
  return Reply(sessions_->GetScore(req->session_id()), out);
}

grpc::Status DrillService::EndSession(grpc::ServerContext* ctx, const v1::EndSessionRequest* req,
                                      v1::SessionInfo* out) {
  FD_ADMIT(AdmitToSession(ctx, req->session_id(), SessionUse::kCommand));
  return Reply(sessions_->End(req->session_id()), out);
}

grpc::Status DrillService::WhoAmI(grpc::ServerContext* ctx, const v1::WhoAmIRequest*,
                                  v1::WhoAmIResponse* out) {
  auto who = Admit(ctx, Access::kAnyToken);
  if (!who.ok()) return ToGrpc(who.status());
  FillTokenInfo(*who, out->mutable_token());
  return grpc::Status::OK;
}

grpc::Status DrillService::IssueToken(grpc::ServerContext* ctx, const v1::IssueTokenRequest* req,
                                      v1::IssueTokenResponse* out) {
  FD_ADMIT(Admit(ctx, Access::kAdmin));
  Grant g;
  g.name = req->name();
  for (const auto& r : req->roles()) {
    auto mask = ParseRoles(r);
    if (!mask.ok()) return ToGrpc(mask.status());
    g.roles |= *mask;
  }
  g.exam_id = req->exam_id();
  g.session = req->session_id();
  if (!g.session.empty()) {
    auto owner = sessions_->OwnerOf(g.session);
    if (!owner.ok()) return ToGrpc(owner.status());
  }
  auto token = gate_->Issue(&g);
  if (!token.ok()) return ToGrpc(token.status());
  out->set_token(*token);
  FillTokenInfo(g, out->mutable_info());
  return grpc::Status::OK;
}

grpc::Status DrillService::RevokeToken(grpc::ServerContext* ctx, const v1::RevokeTokenRequest* req,
                                       v1::RevokeTokenResponse* out) {
  FD_ADMIT(Admit(ctx, Access::kAdmin));
  auto n = gate_->Revoke(req->name());
  if (!n.ok()) return ToGrpc(n.status());
  out->set_revoked(*n);
  return grpc::Status::OK;
}

grpc::Status DrillService::ListTokens(grpc::ServerContext* ctx, const v1::ListTokensRequest*,
                                      v1::ListTokensResponse* out) {
  FD_ADMIT(Admit(ctx, Access::kAdmin));
  auto all = gate_->List();
  std::sort(all.begin(), all.end(), [](const Grant& a, const Grant& b) { return a.issued_ms < b.issued_ms; });
  for (const Grant& g : all) FillTokenInfo(g, out->add_tokens());
  return grpc::Status::OK;
}

#undef FD_ADMIT

}  // namespace firedrill::controller
