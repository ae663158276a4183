#include "controller/web_service.h"

#include <google/protobuf/util/json_util.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/log.h"
#include "controller/session_state.h"
#include "controller/web/assets.h"

#ifndef FIREDRILL_VERSION
#define FIREDRILL_VERSION "dev"
#endif

namespace firedrill::controller {

namespace {

using web::HttpRequest;
using web::HttpResponse;

// As the CLI's --json prints a message (cli/output.cc): proto field names,
// every primitive field, one line.
std::string ProtoJson(const google::protobuf::Message& msg) {
  google::protobuf::util::JsonPrintOptions opt;
  opt.always_print_primitive_fields = true;
  opt.preserve_proto_field_names = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(msg, &out, opt).ok()) out = "{}";
  return out;
}

HttpResponse Json(std::string body, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

HttpResponse Text(std::string body, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

// A look at something (a session's status, a list) as events: one named
// `event` each time the look's JSON changes; a look that fails ends the
// stream with a `refused` event, and so does one `last` calls the last.
class LookEvents final : public web::EventSource {
 public:
  struct Look {
    std::string json;
    bool last = false;  // the thing is over: this look is the final one
  };
  LookEvents(std::string event, std::function<StatusOr<Look>()> look)
      : event_(std::move(event)), look_(std::move(look)) {}
  bool Poll(std::string* out) override {
    auto look = look_();
    if (!look.ok()) {
      *out =
          "event: refused\ndata: " +
          nlohmann::json{{"code", StatusCodeName(look.status().code())}, {"message", look.status().message()}}
              .dump() +
          "\n\n";
      return false;
    }
    if (look->json != last_) {
      *out = "event: " + event_ + "\ndata: " + look->json + "\n\n";
      last_ = std::move(look->json);
    }
    return !look->last;
  }

 private:
  std::string event_;
  std::function<StatusOr<Look>()> look_;
  std::string last_;
};

HttpResponse EventStream(std::shared_ptr<web::EventSource> source, std::chrono::milliseconds poll) {
  HttpResponse r;
  r.content_type = "text/event-stream";
  std::string first;
  const bool more = source->Poll(&first);
  // The first event goes out with the header; the rest as they change.
  // EventSource reconnects after `retry` ms when a stream ends.
  r.body = "retry: 2000\n\n" + first;
  if (more) r.stream = std::move(source);
  r.poll = poll;
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

// Headers of every page and asset: nothing from elsewhere, no framing.
void PageHeaders(HttpResponse* r) {
  r->headers.emplace_back("Content-Security-Policy",
                          "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                          "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'");
  r->headers.emplace_back("X-Content-Type-Options", "nosniff");
  r->headers.emplace_back("Referrer-Policy", "no-referrer");
  r->headers.emplace_back("Cache-Control", "no-cache");
}

// A path on this server ("/", "/#/s/ID"); anything else becomes "/" (no
// redirect to another site through a login).
std::string LocalPath(const std::string& next) {
  return next.rfind('/', 0) == 0 && next.rfind("//", 0) != 0 && next.find('\\') == std::string::npos &&
                 next.find_first_of("\r\n") == std::string::npos
             ? next
             : "/";
}

// The login cookie: HttpOnly (no script reads it), SameSite=Strict (no
// other site's page sends it). Not Secure: the HTTP side is plaintext, on
// loopback or behind a TLS proxy, which would add it.
std::string CookieHeader(const std::string& value, int max_age) {
  return std::string(kTokenCookie) + "=" + value + "; Path=/; HttpOnly; SameSite=Strict" +
         (max_age >= 0 ? "; Max-Age=" + std::to_string(max_age) : "");
}

}  // namespace

int HttpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kAborted:
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

HttpResponse ErrorResponse(const Status& st, bool json) {
  const int code = HttpStatusOf(st.code());
  HttpResponse r =
      json ? Json(nlohmann::json{{"error", {{"code", StatusCodeName(st.code())}, {"message", st.message()}}}}
                          .dump() +
                      "\n",
                  code)
           : Text(st.message() + "\n", code);
  if (code == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"firedrill\"");
  return r;
}

StatusOr<Grant> WebService::Authenticate(const HttpRequest& req) const {
  const std::string header = req.Header("authorization");
  if (!header.empty()) return drill_->AuthenticateHeader(header);
  const std::string cookie = web::CookieValue(req.Header("cookie"), kTokenCookie);
  if (!cookie.empty()) return drill_->AuthenticateHeader("Bearer " + cookie);
  return drill_->AuthenticateHeader("");  // says what to present
}

HttpResponse WebService::Handle(const HttpRequest& req) {
  const bool api = req.path.rfind("/api/", 0) == 0;
  if (req.path == "/healthz") return req.method == "GET" ? Text("ok\n") : Text("GET only\n", 405);
  // The dashboard's files hold no data: they load without a token, and the
  // page asks the API (which wants one) for everything it shows.
  if (const web::Asset* a = web::FindAsset(req.path == "/" ? "/index.html" : req.path);
      a != nullptr && req.method == "GET") {
    HttpResponse r;
    r.content_type = std::string(a->content_type);
    r.body = std::string(a->body);
    PageHeaders(&r);
    return r;
  }
  if (req.path == "/login" && req.method == "GET" && !req.Query("ticket").empty()) return UseLoginLink(req);
  if (req.path == "/api/login-link") return NewLoginLink(req);
  if (req.path == "/login" || req.path == "/logout") {
    if (req.method != "POST") {
      HttpResponse r = Text(req.path + " takes POST\n", 405);
      r.headers.emplace_back("Allow", "POST");
      return r;
    }
    if (req.path == "/login") return Login(req);
    HttpResponse r = Text("logged out\n");
    r.headers.emplace_back("Set-Cookie", CookieHeader("", 0));
    return r;
  }
  auto who = Authenticate(req);
  if (!who.ok()) return ErrorResponse(who.status(), api);
  if (req.method != "GET") {
    HttpResponse r =
        ErrorResponse(InvalidArgument(req.method + " " + req.path + ": this route takes GET"), api);
    r.status = 405;
    r.headers.emplace_back("Allow", "GET");
    return r;
  }
  if (req.path == "/metrics") return Metrics(*who);
  if (req.path == "/api/whoami") {
    auto admitted = drill_->AdmitGrant(*who, Access::kAnyToken, "http GET /api/whoami", v1::WhoAmIRequest());
    if (!admitted.ok()) return ErrorResponse(admitted.status(), true);
    return Json(nlohmann::json{{"name", who->name},
                               {"roles", RoleNames(who->roles)},
                               {"exam_id", who->exam_id},
                               {"session_id", who->session}}
                    .dump() +
                "\n");
  }
  if (req.path == "/api/sessions" || req.path.rfind("/api/sessions/", 0) == 0) return SessionRoute(*who, req);
  if (req.path == "/api/exams" || req.path == "/api/exams/events" || req.path == "/api/sitting" ||
      req.path == "/api/sitting/events")
    return ExamRoute(*who, req);
  return ErrorResponse(NotFound("no route " + req.path + " (see /api/sessions, /metrics)"), api);
}

HttpResponse WebService::SessionRoute(const Grant& who, const HttpRequest& req) {
  if (req.path == "/api/sessions/events") {
    auto admitted = drill_->AdmitGrant(who, Access::kListSessions, "http GET /api/sessions/events",
                                       v1::ListSessionsRequest());
    if (!admitted.ok()) return ErrorResponse(admitted.status(), true);
    return EventStream(std::make_shared<LookEvents>("sessions",
                                                    [d = drill_, who]() -> StatusOr<LookEvents::Look> {
                                                      v1::ListSessionsResponse list;
                                                      for (auto& s : d->SessionsFor(who))
                                                        *list.add_sessions() = std::move(s);
                                                      return LookEvents::Look{ProtoJson(list), false};
                                                    }),
                       std::chrono::milliseconds(2000));
  }
  if (req.path == "/api/sessions") {
    auto admitted =
        drill_->AdmitGrant(who, Access::kListSessions, "http GET /api/sessions", v1::ListSessionsRequest());
    if (!admitted.ok()) return ErrorResponse(admitted.status(), true);
    v1::ListSessionsResponse list;
    for (auto& s : drill_->SessionsFor(who)) *list.add_sessions() = std::move(s);
    return Json(ProtoJson(list) + "\n");
  }
  // /api/sessions/ID/WHAT
  const std::string rest = req.path.substr(std::string("/api/sessions/").size());
  const size_t slash = rest.find('/');
  const std::string id = rest.substr(0, slash);
  const std::string what = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (id.empty() || (what != "status" && what != "events" && what != "metrics" && what != "timeline"))
    return ErrorResponse(
        NotFound("no route " + req.path + " (a session has /status, /events, /metrics and /timeline)"), true);
  v1::GetStatusRequest asked;  // what a candidate's audit trail records
  asked.set_session_id(id);
  auto admitted = drill_->AdmitGrantToSession(who, id, SessionUse::kWatch,
                                              ("http GET /api/sessions/ID/" + what).c_str(), asked);
  if (!admitted.ok()) return ErrorResponse(admitted.status(), true);
  if (what == "status") {
    auto st = drill_->StatusFor(who, id, std::chrono::milliseconds(500));
    if (!st.ok()) return ErrorResponse(st.status(), true);
    return Json(ProtoJson(*st) + "\n");
  }
  if (what == "timeline") {
    int64_t after = 0;
    try {
      after = req.Query("after").empty() ? 0 : std::stoll(req.Query("after"));
    } catch (const std::exception&) {
      return ErrorResponse(
          InvalidArgument("?after= wants a sequence number, got '" + req.Query("after") + "'"), true);
    }
    auto items = drill_->TimelineFor(who, id, after);
    if (!items.ok()) return ErrorResponse(items.status(), true);
    nlohmann::json list = nlohmann::json::array();
    for (const auto& t : *items) list.push_back(nlohmann::json::parse(ProtoJson(t)));
    return Json(nlohmann::json{{"items", list}}.dump() + "\n");
  }
  if (what == "metrics") {
    v1::GetMetricsRequest mr;
    mr.set_session_id(id);
    mr.set_run(req.Query("run"));
    auto m = sessions_->GetMetrics(mr);
    if (!m.ok()) return ErrorResponse(m.status(), true);
    return Json(ProtoJson(*m) + "\n");
  }
  return EventStream(std::make_shared<LookEvents>(
                         "status",
                         [d = drill_, who, id]() -> StatusOr<LookEvents::Look> {
                           auto st = d->StatusFor(who, id, std::chrono::milliseconds(500));
                           if (!st.ok()) return st.status();
                           return LookEvents::Look{ProtoJson(*st), TerminalState(st->session().state())};
                         }),
                     std::chrono::milliseconds(1000));
}

// The proctor's view (every sitting of the exams the token may proctor)
// and a candidate's own sitting, as ListExams and GetSitting answer them.
HttpResponse WebService::ExamRoute(const Grant& who, const HttpRequest& req) {
  if (exams_ == nullptr) return ErrorResponse(Unavailable("this controller runs no exams"), true);
  const bool events = req.path.size() > 7 && req.path.compare(req.path.size() - 7, 7, "/events") == 0;
  std::function<StatusOr<LookEvents::Look>()> look;
  std::string event;
  if (req.path.rfind("/api/exams", 0) == 0) {
    auto admitted = drill_->AdmitGrant(who, Access::kProctor, "http GET /api/exams", v1::ListExamsRequest());
    if (!admitted.ok()) return ErrorResponse(admitted.status(), true);
    event = "exams";
    look = [e = exams_, who]() -> StatusOr<LookEvents::Look> {
      auto exams = e->List(who);
      if (!exams.ok()) return exams.status();
      v1::ListExamsResponse list;
      for (auto& x : *exams) *list.add_exams() = std::move(x);
      return LookEvents::Look{ProtoJson(list), false};
    };
  } else {
    v1::GetSittingRequest asked;  // a candidate's own: no exam, no name
    auto admitted = drill_->AdmitGrant(who, Access::kExamView, "http GET /api/sitting", asked);
    if (!admitted.ok()) return ErrorResponse(admitted.status(), true);
    event = "sitting";
    look = [e = exams_, who, asked]() -> StatusOr<LookEvents::Look> {
      auto sitting = e->GetSitting(who, asked);
      if (!sitting.ok()) return sitting.status();
      return LookEvents::Look{ProtoJson(*sitting), sitting->state() != "open"};
    };
  }
  if (events)
    return EventStream(std::make_shared<LookEvents>(event, std::move(look)), std::chrono::milliseconds(2000));
  auto now = look();
  if (!now.ok()) return ErrorResponse(now.status(), true);
  return Json(now->json + "\n");
}

HttpResponse WebService::Login(const HttpRequest& req) {
  std::string path, why;
  std::map<std::string, std::string> form;
  if (!web::ParseTarget("/?" + req.body, &path, &form, &why))
    return ErrorResponse(InvalidArgument("the login form: " + why), false);
  const std::string token = form.count("token") ? form["token"] : "";
  if (token.empty()) return ErrorResponse(InvalidArgument("the login form needs a field `token`"), false);
  auto who = drill_->AuthenticateHeader("Bearer " + token);
  if (!who.ok()) {
    // A browser's form goes back to the page, which says why; a script gets the 401.
    if (req.Header("accept").find("text/html") == std::string::npos)
      return ErrorResponse(who.status(), false);
    HttpResponse r = Text("not logged in\n", 303);
    r.headers.emplace_back("Location", "/?why=that+token+is+not+valid+here");
    return r;
  }
  HttpResponse r = Text("logged in as " + who->name + "\n", 303);
  r.headers.emplace_back("Location", LocalPath(form.count("next") ? form["next"] : "/"));
  r.headers.emplace_back("Set-Cookie", CookieHeader(token, -1));
  return r;
}

HttpResponse WebService::NewLoginLink(const HttpRequest& req) {
  if (req.method != "POST") {
    HttpResponse r = ErrorResponse(InvalidArgument("/api/login-link takes POST"), true);
    r.status = 405;
    r.headers.emplace_back("Allow", "POST");
    return r;
  }
  // The bearer header only: a page cannot make a browser add it, so no
  // other site can mint a link from a logged-in browser's cookie.
  const std::string header = req.Header("authorization");
  auto who = drill_->AuthenticateHeader(header);
  if (!who.ok()) return ErrorResponse(who.status(), true);
  const std::string token = BearerToken(header);
  const std::string ticket = NewToken().substr(4);  // 64 random hex digits
  const auto now = std::chrono::steady_clock::now();
  // ?ttl_s= up to kTicketLifeMax (the demo's link waits for its reader).
  std::chrono::seconds life = kTicketLife;
  if (const std::string ttl = req.Query("ttl_s"); !ttl.empty()) {
    int s = 0;
    try {
      s = std::stoi(ttl);
    } catch (const std::exception&) {
    }
    if (s < 1 || s > kTicketLifeMax.count())
      return ErrorResponse(InvalidArgument("ttl_s must be 1 to " + std::to_string(kTicketLifeMax.count()) +
                                           " seconds, got '" + ttl + "'"),
                           true);
    life = std::chrono::seconds(s);
  }
  {
    std::lock_guard<std::mutex> lock(tickets_mu_);
    for (auto it = tickets_.begin(); it != tickets_.end();)
      it = it->second.expires < now ? tickets_.erase(it) : ++it;
    tickets_[ticket] = Ticket{token, LocalPath(req.Query("next")), now + life};
  }
  return Json(
      nlohmann::json{{"path", "/login?ticket=" + ticket}, {"expires_in_s", life.count()}, {"name", who->name}}
          .dump() +
      "\n");
}

HttpResponse WebService::UseLoginLink(const HttpRequest& req) {
  std::optional<Ticket> t;
  {
    std::lock_guard<std::mutex> lock(tickets_mu_);
    auto it = tickets_.find(req.Query("ticket"));
    if (it != tickets_.end()) {
      if (it->second.expires >= std::chrono::steady_clock::now()) t = it->second;
      tickets_.erase(it);  // once, used or expired
    }
  }
  HttpResponse r = Text("", 303);
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  // A token revoked since the link was made is refused here too.
  if (!t || !drill_->AuthenticateHeader("Bearer " + t->token).ok()) {
    r.headers.emplace_back("Location", "/?why=that+link+was+used+or+has+expired%3A+ask+for+another");
    return r;
  }
  r.headers.emplace_back("Location", t->next);
  r.headers.emplace_back("Set-Cookie", CookieHeader(t->token, -1));
  return r;
}

ControllerSnapshot WebService::Snapshot() const {
  ControllerSnapshot c;
  for (const auto& s : sessions_->List()) ++c.sessions_by_state[s.state()];
  if (pool_) {
    c.agents_accepted = pool_->registrations(true);
    c.agents_refused = pool_->registrations(false);
    c.agents_connected = static_cast<int>(pool_->Connected().size());
  }
  if (counters_) {
    c.rpcs = counters_->Rpcs();
    c.verifications = counters_->Verifications();
  }
  if (server_) {
    c.http_requests = server_->requests();
    c.http_connections = server_->connections();
  }
  c.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  c.version = FIREDRILL_VERSION;
  return c;
}

HttpResponse WebService::Metrics(const Grant& who) {
  auto admitted =
      drill_->AdmitGrant(who, Access::kListSessions, "http GET /metrics", v1::ListSessionsRequest());
  if (!admitted.ok()) return ErrorResponse(admitted.status(), false);
  web::Exposition e;
  DeclareSessionFamilies(&e);
  for (const v1::SessionInfo& info : drill_->SessionsFor(who)) {
    // Live sessions only: an ended one's series would stay for ever.
    if (TerminalState(info.state())) continue;
    auto st = drill_->StatusFor(who, info.session_id(), std::chrono::milliseconds(500));
    if (st.ok()) AddSessionSamples(*st, &e);  // one that ended since the list: left out
  }
  // The controller's own families: its owner's (a learner's scrape would
  // otherwise count other people's sessions and verifications).
  if (who.roles & kRoleOwner) AddControllerSamples(Snapshot(), &e);
  HttpResponse r = Text(e.Text());
  r.content_type = web::Exposition::kContentType;
  return r;
}

}  // namespace firedrill::controller
