#include "controller/drill_service.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "controller/scorer.h"
#include "controller/session_state.h"
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
bool IsCandidate(const Grant& g) { return (g.roles & kRoleCandidate) != 0; }

// A tool run as the timeline shows it: the call and what it asked for.
// A request as JSON with its proto field names ("{}" if it cannot be
// written): the audit trail's arguments and the timeline's tool runs.
std::string RequestJson(const google::protobuf::Message& req) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(req, &text, opts).ok()) text = "{}";
  return text;
}

std::string ToolText(const char* method, const google::protobuf::Message& req) {
  std::string text = RequestJson(req);
  // The session is the timeline's own: leave it out.
  const std::string id_field = "\"session_id\":";
  if (auto at = text.find(id_field); at != std::string::npos) {
    auto end = text.find('"', text.find('"', at + id_field.size()) + 1);
    if (end != std::string::npos) {
      const bool comma = end + 1 < text.size() && text[end + 1] == ',';
      text.erase(at, end + 1 - at + (comma ? 1 : 0));
    }
  }
  return std::string(method) + (text == "{}" ? "" : " " + text);
}

std::string FindingsText(const std::vector<v1::Finding>& findings) {
  std::string out;
  for (const auto& f : findings) {
    out += (out.empty() ? "" : "; ") + f.cause();
    for (int i = 0; i < f.culprit_ranks_size(); ++i)
      out += (i == 0 ? " rank " : ",") + std::to_string(f.culprit_ranks(i));
  }
  return out;
}

std::string FixText(const v1::ApplyFixRequest& f) {
  std::string out;
  for (int r : f.replace_host_ranks())
    out += (out.empty() ? "" : "; ") + std::string("replace the host of rank ") + std::to_string(r);
  for (const auto& kv : f.settings()) out += (out.empty() ? "" : "; ") + kv.key() + "=" + kv.value();
  if (f.no_change()) out += (out.empty() ? "" : "; ") + std::string("no change");
  return out;
}

// What a candidate sees of an exam item: not its seed (the draw behind the
// variant) and never its score, which the exam's result holds for the
// proctor: a score would tell a candidate, and whoever they told, whether a
// cause was right.
void SealForCandidate(v1::SessionInfo* info) {
  info->set_seed(0);
  info->set_total_score(0);
  info->clear_scenario_id();  // an id can name its cause; the title and brief are the item
}
// An event's text as a candidate reads it; `why` is the session's end reason.
std::string SealedEventText(const std::string& kind, const std::string& text, const std::string& why) {
  if (kind == "created") return "session created";  // its text names the scenario and the seed
  if (kind == "scored" || kind == "ended")
    return why.empty() ? "the item is closed" : "the item is closed: " + why;
  // Whether the fix held is part of the result, not of the item.
  if (kind.rfind("verification", 0) == 0)
    return "the fix is being measured; how it did is part of the result";
  return text;
}
void SealForCandidate(v1::SessionStatus* st) {
  SealForCandidate(st->mutable_session());
  st->clear_verification();
  const std::string& why = st->session().end_reason();
  for (auto& e : *st->mutable_events()) {
    e.set_message(SealedEventText(e.kind(), e.message(), why));
    if (e.kind().rfind("verification", 0) == 0) e.set_kind("verification");
  }
}
}  // namespace

// Each call is admitted first; a refused one returns before anything is
// read or changed.
#define FD_ADMIT(expr)                                                            \
  do {                                                                            \
    if (auto admitted = (expr); !admitted.ok()) return ToGrpc(admitted.status()); \
  } while (0)

StatusOr<Grant> DrillService::Recorded(const Grant& who, const char* method,
                                       const google::protobuf::Message& req, const Status& admitted) const {
  if (exams_ && (who.roles & kRoleCandidate)) {
    if (Status st = exams_->RecordCall(who, method, RequestJson(req), admitted); !st.ok())
      return Internal("this call was not made: it could not be recorded in the exam's audit trail (" +
                      st.message() + "); tell the proctor");
  }
  if (!admitted.ok()) return admitted;
  return who;
}

StatusOr<Grant> DrillService::Authenticate(grpc::ServerContext* ctx) const {
  std::string_view header;
  const auto& md = ctx->client_metadata();
  if (auto it = md.find("authorization"); it != md.end())
    header = std::string_view(it->second.data(), it->second.size());
  return gate_->Authenticate(header);
}

StatusOr<Grant> DrillService::Admit(grpc::ServerContext* ctx, Access what, const char* method,
                                    const google::protobuf::Message& req) const {
  auto who = Authenticate(ctx);
  if (!who.ok()) return who.status();
  return AdmitGrant(*who, what, method, req);
}

StatusOr<Grant> DrillService::AdmitGrant(const Grant& who, Access what, const char* method,
                                         const google::protobuf::Message& req) const {
  return Recorded(who, method, req, CheckAccess(who, what));
}

StatusOr<Grant> DrillService::AdmitToSession(grpc::ServerContext* ctx, const std::string& id, SessionUse use,
                                             const char* method, const google::protobuf::Message& req) const {
  auto who = Authenticate(ctx);
  if (!who.ok()) return who.status();
  return AdmitGrantToSession(*who, id, use, method, req);
}

StatusOr<Grant> DrillService::AdmitGrantToSession(const Grant& who, const std::string& id, SessionUse use,
                                                  const char* method,
                                                  const google::protobuf::Message& req) const {
  auto owner = sessions_->OwnerOf(id);
  Status admitted = owner.status();
  if (owner.ok() && (!MaySeeSession(who, id, *owner) || ScopedOut(who, id, *owner))) {
    admitted = NotFound(NoSessionMessage(id));
  } else if (owner.ok() && !MayUseSession(who, id, *owner, use)) {
    admitted =
        PermissionDenied(ARoles(who.roles) + " token " +
                         (use == SessionUse::kCommand ? "cannot fix or end this session"
                                                      : "cannot run tools or diagnose in this session") +
                         (who.roles & kRoleProctor ? " (a proctor watches)" : ""));
  } else if (owner.ok() && use != SessionUse::kWatch && exams_) {
    admitted = exams_->MayAct(who, id);  // a candidate acts within their open sitting only
  }
  return Recorded(who, method, req, admitted);
}

std::vector<v1::SessionInfo> DrillService::SessionsFor(const Grant& who) {
  std::vector<v1::SessionInfo> out;
  for (auto& s : sessions_->List()) {
    if (!MaySeeSession(who, s.session_id(), s.owner()) || ScopedOut(who, s.session_id(), s.owner())) continue;
    if (IsCandidate(who)) SealForCandidate(&s);
    out.push_back(std::move(s));
  }
  return out;
}

StatusOr<v1::SessionStatus> DrillService::StatusFor(const Grant& who, const std::string& id,
                                                    std::chrono::milliseconds fresh) {
  auto st = SharedStatus(id, fresh);
  if (!st.ok()) return st.status();
  v1::SessionStatus copy = *st;
  if (IsCandidate(who)) SealForCandidate(&copy);
  return copy;
}

void DrillService::OnTimeline(const Grant& who, const std::string& id, const std::string& kind,
                              const std::string& text) {
  if (!timeline_) return;
  auto item = timeline_->Append(id, UnixNowMs(), who.name, ActingRole(who, id, kind), kind, text);
  if (!item.ok())
    spdlog::error("session {}: the timeline did not take a {}: {}", id, kind, item.status().message());
}

bool DrillService::ScopedOut(const Grant& who, const std::string& id,
                             const std::string& session_owner) const {
  if (!(who.roles & kRoleProctor) || who.exam_id.empty() || (who.roles & kRoleOwner)) return false;
  // What the token sees in its other roles stays seen.
  Grant other = who;
  other.roles &= ~static_cast<uint32_t>(kRoleProctor);
  if (other.roles != 0 && MaySeeSession(other, id, session_owner)) return false;
  return !exams_ || !exams_->SessionInExam(id, who.exam_id);
}

Status DrillService::ExamsOn() const {
  return exams_ ? Status::Ok() : Unavailable("this controller runs no exams");
}

grpc::Status DrillService::ListScenarios(grpc::ServerContext* ctx, const v1::ListScenariosRequest* req,
                                         v1::ListScenariosResponse* out) {
  FD_ADMIT(Admit(ctx, Access::kCatalogue, __func__, *req));
  for (auto& s : sessions_->ListScenarios()) *out->add_scenarios() = std::move(s);
  return grpc::Status::OK;
}

grpc::Status DrillService::GetScenario(grpc::ServerContext* ctx, const v1::GetScenarioRequest* req,
                                       v1::ScenarioDetail* out) {
  FD_ADMIT(Admit(ctx, Access::kCatalogue, __func__, *req));
  return Reply(sessions_->GetScenario(req->scenario_id()), out);
}

grpc::Status DrillService::ListCauses(grpc::ServerContext* ctx, const v1::ListCausesRequest* req,
                                      v1::ListCausesResponse* out) {
  FD_ADMIT(Admit(ctx, Access::kAnyToken, __func__, *req));
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
  auto who = Admit(ctx, Access::kStartSession, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  return Reply(sessions_->Start(*req, who->name), out);
}

grpc::Status DrillService::ListSessions(grpc::ServerContext* ctx, const v1::ListSessionsRequest* req,
                                        v1::ListSessionsResponse* out) {
  auto who = Admit(ctx, Access::kListSessions, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  for (auto& s : SessionsFor(*who)) *out->add_sessions() = std::move(s);
  return grpc::Status::OK;
}

grpc::Status DrillService::GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest* req,
                                     v1::SessionStatus* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kWatch, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  auto st = sessions_->GetStatus(req->session_id());
  if (st.ok() && IsCandidate(*who)) SealForCandidate(&*st);
  return Reply(std::move(st), out);
}

grpc::Status DrillService::GetTrace(grpc::ServerContext* ctx, const v1::GetTraceRequest* req,
                                    v1::TraceResponse* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kWatch, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  auto r = sessions_->GetTrace(*req);
  if (r.ok()) OnTimeline(*who, req->session_id(), "tool", ToolText(__func__, *req));
  return Reply(std::move(r), out);
}

grpc::Status DrillService::GetMetrics(grpc::ServerContext* ctx, const v1::GetMetricsRequest* req,
                                      v1::MetricsResponse* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kWatch, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  auto r = sessions_->GetMetrics(*req);
  if (r.ok()) OnTimeline(*who, req->session_id(), "tool", ToolText(__func__, *req));
  return Reply(std::move(r), out);
}

grpc::Status DrillService::ListCheckpoints(grpc::ServerContext* ctx, const v1::ListCheckpointsRequest* req,
                                           v1::ListCheckpointsResponse* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kWatch, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  auto r = sessions_->ListCheckpoints(*req);
  if (r.ok()) OnTimeline(*who, req->session_id(), "tool", ToolText(__func__, *req));
  return Reply(std::move(r), out);
}

grpc::Status DrillService::VerifyCheckpoint(grpc::ServerContext* ctx, const v1::VerifyCheckpointRequest* req,
                                            v1::VerifyCheckpointResponse* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kInvestigate, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  auto r = sessions_->VerifyCheckpoint(*req);
  if (r.ok()) OnTimeline(*who, req->session_id(), "tool", ToolText(__func__, *req));
  return Reply(std::move(r), out);
}

grpc::Status DrillService::GetLogs(grpc::ServerContext* ctx, const v1::GetLogsRequest* req,
                                   v1::LogsResponse* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kWatch, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  auto r = sessions_->GetLogs(*req);
  // A fresh look, not each poll of `logs -f` (which asks from an offset).
  if (r.ok() && req->offset() < 0) OnTimeline(*who, req->session_id(), "tool", ToolText(__func__, *req));
  return Reply(std::move(r), out);
}

grpc::Status DrillService::GetFlightRecorder(grpc::ServerContext* ctx,
                                             const v1::GetFlightRecorderRequest* req,
                                             v1::FlightRecorderResponse* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kWatch, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  auto r = sessions_->GetFlightRecorder(*req);
  if (r.ok()) OnTimeline(*who, req->session_id(), "tool", ToolText(__func__, *req));
  return Reply(std::move(r), out);
}

grpc::Status DrillService::RunProbe(grpc::ServerContext* ctx, const v1::RunProbeRequest* req,
                                    v1::RunProbeResponse* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kInvestigate, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  auto r = sessions_->RunProbe(*req);
  if (r.ok()) OnTimeline(*who, req->session_id(), "tool", ToolText(__func__, *req));
  return Reply(std::move(r), out);
}

grpc::Status DrillService::SubmitDiagnosis(grpc::ServerContext* ctx, const v1::SubmitDiagnosisRequest* req,
                                           v1::SubmitDiagnosisResponse* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kInvestigate, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  auto r = sessions_->Diagnose(*req);
  if (r.ok())
    OnTimeline(*who, req->session_id(), "diagnosis",
               "diagnosis " + std::to_string(r->diagnosis_id()) + ": " + FindingsText(FindingsOf(*req)) +
                   (req->note().empty() ? "" : " (" + req->note() + ")"));
  return Reply(std::move(r), out);
}

grpc::Status DrillService::ApplyFix(grpc::ServerContext* ctx, const v1::ApplyFixRequest* req,
                                    v1::ApplyFixResponse* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kCommand, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  auto r = sessions_->Fix(*req);
  if (r.ok()) OnTimeline(*who, req->session_id(), "fix", "fix applied: " + FixText(*req));
  return Reply(std::move(r), out);
}

grpc::Status DrillService::RequestHint(grpc::ServerContext* ctx, const v1::RequestHintRequest* req,
                                       v1::RequestHintResponse* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kInvestigate, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  auto r = sessions_->Hint(req->session_id());
  if (r.ok())
    OnTimeline(*who, req->session_id(), "hint", "hint " + std::to_string(r->hints_used()) + ": " + r->hint());
  return Reply(std::move(r), out);
}

grpc::Status DrillService::GetScore(grpc::ServerContext* ctx, const v1::GetScoreRequest* req,
                                    v1::ScoreReport* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kWatch, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  auto score = sessions_->GetScore(req->session_id(), /*sealed=*/IsCandidate(*who));
  if (score.ok() && IsCandidate(*who)) score->clear_scenario_id();
  return Reply(std::move(score), out);
}

grpc::Status DrillService::EndSession(grpc::ServerContext* ctx, const v1::EndSessionRequest* req,
                                      v1::SessionInfo* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kCommand, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  auto info = sessions_->End(req->session_id());
  if (info.ok() && IsCandidate(*who)) SealForCandidate(&*info);
  return Reply(std::move(info), out);
}

grpc::Status DrillService::WhoAmI(grpc::ServerContext* ctx, const v1::WhoAmIRequest* req,
                                  v1::WhoAmIResponse* out) {
  auto who = Admit(ctx, Access::kAnyToken, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  FillTokenInfo(*who, out->mutable_token());
  return grpc::Status::OK;
}

grpc::Status DrillService::IssueToken(grpc::ServerContext* ctx, const v1::IssueTokenRequest* req,
                                      v1::IssueTokenResponse* out) {
  FD_ADMIT(Admit(ctx, Access::kAdmin, __func__, *req));
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
  FD_ADMIT(Admit(ctx, Access::kAdmin, __func__, *req));
  auto n = gate_->Revoke(req->name());
  if (!n.ok()) return ToGrpc(n.status());
  out->set_revoked(*n);
  return grpc::Status::OK;
}

grpc::Status DrillService::ListTokens(grpc::ServerContext* ctx, const v1::ListTokensRequest* req,
                                      v1::ListTokensResponse* out) {
  FD_ADMIT(Admit(ctx, Access::kAdmin, __func__, *req));
  auto all = gate_->List();
  std::sort(all.begin(), all.end(), [](const Grant& a, const Grant& b) { return a.issued_ms < b.issued_ms; });
  for (const Grant& g : all) FillTokenInfo(g, out->add_tokens());
  return grpc::Status::OK;
}

// ----------------------------------------------------------------- exams

grpc::Status DrillService::CreateExam(grpc::ServerContext* ctx, const v1::CreateExamRequest* req,
                                      v1::ExamInfo* out) {
  auto who = Admit(ctx, Access::kProctor, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (Status on = ExamsOn(); !on.ok()) return ToGrpc(on);
  return Reply(exams_->Create(*who, req->yaml(), req->filename()), out);
}

grpc::Status DrillService::ListExams(grpc::ServerContext* ctx, const v1::ListExamsRequest* req,
                                     v1::ListExamsResponse* out) {
  auto who = Admit(ctx, Access::kProctor, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (Status on = ExamsOn(); !on.ok()) return ToGrpc(on);
  auto exams = exams_->List(*who);
  if (!exams.ok()) return ToGrpc(exams.status());
  for (auto& e : *exams) *out->add_exams() = std::move(e);
  return grpc::Status::OK;
}

grpc::Status DrillService::IssueCandidate(grpc::ServerContext* ctx, const v1::IssueCandidateRequest* req,
                                          v1::IssueTokenResponse* out) {
  auto who = Admit(ctx, Access::kProctor, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (Status on = ExamsOn(); !on.ok()) return ToGrpc(on);
  Grant g;
  auto token = exams_->IssueCandidate(*who, req->exam_id(), req->name(), &g);
  if (!token.ok()) return ToGrpc(token.status());
  out->set_token(*token);
  FillTokenInfo(g, out->mutable_info());
  return grpc::Status::OK;
}

grpc::Status DrillService::StartSitting(grpc::ServerContext* ctx, const v1::StartSittingRequest* req,
                                        v1::SittingInfo* out) {
  auto who = Admit(ctx, Access::kSitting, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (Status on = ExamsOn(); !on.ok()) return ToGrpc(on);
  return Reply(exams_->StartSitting(*who), out);
}

grpc::Status DrillService::GetSitting(grpc::ServerContext* ctx, const v1::GetSittingRequest* req,
                                      v1::SittingInfo* out) {
  auto who = Admit(ctx, Access::kExamView, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (Status on = ExamsOn(); !on.ok()) return ToGrpc(on);
  return Reply(exams_->GetSitting(*who, *req), out);
}

grpc::Status DrillService::OpenItem(grpc::ServerContext* ctx, const v1::OpenItemRequest* req,
                                    v1::SessionInfo* out) {
  auto who = Admit(ctx, Access::kSitting, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (Status on = ExamsOn(); !on.ok()) return ToGrpc(on);
  auto info = exams_->OpenItem(*who, *req);
  if (info.ok()) SealForCandidate(&*info);
  return Reply(std::move(info), out);
}

grpc::Status DrillService::FinishSitting(grpc::ServerContext* ctx, const v1::FinishSittingRequest* req,
                                         v1::SittingInfo* out) {
  auto who = Admit(ctx, Access::kSitting, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (Status on = ExamsOn(); !on.ok()) return ToGrpc(on);
  return Reply(exams_->Finish(*who), out);
}

grpc::Status DrillService::GetExamResult(grpc::ServerContext* ctx, const v1::GetExamResultRequest* req,
                                         v1::ExamResultResponse* out) {
  auto who = Admit(ctx, Access::kProctor, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (Status on = ExamsOn(); !on.ok()) return ToGrpc(on);
  return Reply(exams_->Result(*who, *req), out);
}

grpc::Status DrillService::RescoreItem(grpc::ServerContext* ctx, const v1::RescoreItemRequest* req,
                                       v1::ExamResultResponse* out) {
  auto who = Admit(ctx, Access::kProctor, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (Status on = ExamsOn(); !on.ok()) return ToGrpc(on);
  return Reply(exams_->Rescore(*who, *req), out);
}

grpc::Status DrillService::AllowRetake(grpc::ServerContext* ctx, const v1::AllowRetakeRequest* req,
                                       v1::SittingInfo* out) {
  auto who = Admit(ctx, Access::kProctor, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (Status on = ExamsOn(); !on.ok()) return ToGrpc(on);
  return Reply(exams_->AllowRetake(*who, *req), out);
}

grpc::Status DrillService::GetExamPublicKey(grpc::ServerContext* ctx, const v1::GetExamPublicKeyRequest* req,
                                            v1::ExamPublicKey* out) {
  FD_ADMIT(Admit(ctx, Access::kAnyToken, __func__, *req));
  if (Status on = ExamsOn(); !on.ok()) return ToGrpc(on);
  *out = exams_->PublicKey();
  return grpc::Status::OK;
}

grpc::Status DrillService::ExportAudit(grpc::ServerContext* ctx, const v1::ExportAuditRequest* req,
                                       v1::ExportAuditResponse* out) {
  auto who = Admit(ctx, Access::kProctor, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (Status on = ExamsOn(); !on.ok()) return ToGrpc(on);
  return Reply(exams_->ExportAudit(*who, *req), out);
}

// ------------------------------------------------------------ team drills

grpc::Status DrillService::PostTimeline(grpc::ServerContext* ctx, const v1::PostTimelineRequest* req,
                                        v1::TimelineItem* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kWatch, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (!timeline_) return ToGrpc(Unavailable("this controller keeps no timeline"));
  auto owner = sessions_->OwnerOf(req->session_id());
  if (!owner.ok()) return ToGrpc(owner.status());
  if (Status may = MayPost(*who, req->session_id(), *owner, req->kind()); !may.ok()) return ToGrpc(may);
  if (req->text().find_first_not_of(" \t\n") == std::string::npos)
    return ToGrpc(InvalidArgument("a " + req->kind() + " needs some text"));
  if (req->text().size() > 4000)
    return ToGrpc(InvalidArgument("a timeline entry is at most 4000 characters"));
  for (unsigned char ch : req->text())
    if ((ch < 0x20 && ch != '\t') || ch == 0x7f)  // no escape sequences on everyone's terminal
      return ToGrpc(InvalidArgument("a timeline entry is one line of text, without control characters"));
  auto info = sessions_->Info(req->session_id());
  if (info.ok() && TerminalState(info->state()))
    return ToGrpc(FailedPrecondition("the session is " + info->state() + ": its timeline is closed"));
  return Reply(timeline_->Append(req->session_id(), UnixNowMs(), who->name,
                                 ActingRole(*who, req->session_id(), req->kind()), req->kind(), req->text()),
               out);
}

namespace {
// What a candidate reads of the controller's entries on an exam item's
// timeline ("KIND: message"): what status shows them.
void SealForCandidate(v1::TimelineItem* t) {
  if (t->kind() != "event") return;
  const auto colon = t->text().find(':');
  const std::string kind = t->text().substr(0, colon);
  const std::string sealed = SealedEventText(kind, t->text(), "");
  if (sealed != t->text())
    t->set_text((kind.rfind("verification", 0) == 0 ? "verification" : kind) + ": " + sealed);
}
}  // namespace

grpc::Status DrillService::WatchTimeline(grpc::ServerContext* ctx, const v1::WatchTimelineRequest* req,
                                         grpc::ServerWriter<v1::TimelineItem>* writer) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kWatch, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (!timeline_) return ToGrpc(Unavailable("this controller keeps no timeline"));
  int64_t after = std::max<int64_t>(0, req->after_seq());
  for (;;) {
    auto items = timeline_->After(req->session_id(), after);
    if (!items.ok()) return ToGrpc(items.status());
    for (auto& t : *items) {
      after = t.seq();
      if (IsCandidate(*who)) SealForCandidate(&t);
      if (!writer->Write(t)) return grpc::Status::OK;  // the viewer left
    }
    if (!req->follow() || ctx->IsCancelled()) return grpc::Status::OK;
    auto info = sessions_->Info(req->session_id());
    if (!info.ok()) return ToGrpc(info.status());
    if (TerminalState(info->state()) && items->empty()) return grpc::Status::OK;  // over, and all sent
    timeline_->WaitAfter(req->session_id(), after, std::chrono::milliseconds(1000));
  }
}

StatusOr<std::vector<v1::TimelineItem>> DrillService::TimelineFor(const Grant& who, const std::string& id,
                                                                  int64_t after_seq) {
  if (!timeline_) return Unavailable("this controller keeps no timeline");
  auto items = timeline_->After(id, std::max<int64_t>(0, after_seq));
  if (!items.ok()) return items.status();
  if (IsCandidate(who))
    for (auto& t : *items) SealForCandidate(&t);
  return items;
}

StatusOr<v1::SessionStatus> DrillService::SharedStatus(const std::string& id,
                                                       std::chrono::milliseconds fresh) {
  std::shared_ptr<Snapshot> snap;
  {
    std::lock_guard<std::mutex> lock(snapshots_mu_);
    auto& slot = snapshots_[id];
    if (!slot) slot = std::make_shared<Snapshot>();
    snap = slot;
  }
  // One viewer computes; the others wait for it and share the result.
  std::lock_guard<std::mutex> lock(snap->mu);
  const auto now = std::chrono::steady_clock::now();
  if (snap->at.time_since_epoch().count() == 0 || now - snap->at >= fresh) {
    snap->status = sessions_->GetStatus(id);
    snap->at = now;
  }
  return snap->status;
}

grpc::Status DrillService::WatchStatus(grpc::ServerContext* ctx, const v1::WatchStatusRequest* req,
                                       grpc::ServerWriter<v1::SessionStatus>* writer) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kWatch, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  const auto interval =
      std::chrono::milliseconds(req->interval_ms() == 0 ? 2000 : std::max(200, req->interval_ms()));
  for (;;) {
    auto st = SharedStatus(req->session_id(), interval / 2);
    if (!st.ok()) return ToGrpc(st.status());
    v1::SessionStatus copy = *st;
    if (IsCandidate(*who)) SealForCandidate(&copy);
    if (!writer->Write(copy)) return grpc::Status::OK;
    if (TerminalState(copy.session().state())) return grpc::Status::OK;  // the last look
    const auto until = std::chrono::steady_clock::now() + interval;
    while (std::chrono::steady_clock::now() < until) {
      if (ctx->IsCancelled()) return grpc::Status::OK;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

grpc::Status DrillService::GetPostmortem(grpc::ServerContext* ctx, const v1::GetPostmortemRequest* req,
                                         v1::PostmortemResponse* out) {
  auto who = AdmitToSession(ctx, req->session_id(), SessionUse::kWatch, __func__, *req);
  if (!who.ok()) return ToGrpc(who.status());
  if (IsCandidate(*who))  // it names the root cause: an exam's answer
    return ToGrpc(
        PermissionDenied("an exam item has no postmortem for its candidate: the proctor reads the result"));
  if (!timeline_) return ToGrpc(Unavailable("this controller keeps no timeline"));
  auto items = timeline_->After(req->session_id(), 0);
  if (!items.ok()) return ToGrpc(items.status());
  return Reply(sessions_->Postmortem(req->session_id(), *items), out);
}

#undef FD_ADMIT

}  // namespace firedrill::controller
