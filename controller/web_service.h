// The controller's HTTP side (beside the gRPC API, on its own address):
//   GET  /healthz                      no token; "ok"
//   GET  /, /app.js, /app.css          the dashboard (no token: it holds no data and asks
//                                      the routes below for everything it shows)
//   GET  /metrics                      Prometheus text: the sessions the token may see
//                                      (their live jobs), and the controller's own
//                                      families for the owner's token
//   GET  /api/whoami                   the token's name and roles
//   GET  /api/sessions                 what `firedrill sessions --json` lists
//   GET  /api/sessions/events          the same list as Server-Sent Events, on change
//   GET  /api/sessions/ID/status       what `firedrill status ID --json` prints
//   GET  /api/sessions/ID/events       the same status as Server-Sent Events, on change
//   GET  /api/sessions/ID/metrics      what `firedrill metrics ID --json` prints (?run=)
//   GET  /api/sessions/ID/timeline     the shared timeline (`firedrill timeline`): who did what (?after=SEQ)
//   GET  /api/exams[/events]           a proctor's exams and every sitting (`exam list`)
//   GET  /api/sitting[/events]         a candidate's own sitting (`exam status`)
//   POST /login                        a token (form field `token`) into an HttpOnly cookie
//   POST /logout                       clears it
//   POST /api/login-link               a one-time link for the presented bearer token (60 s; ?ttl_s= to 900)
//   GET  /login?ticket=T               that link: sets the cookie once, then redirects
// Every route but /healthz authenticates as the gRPC API does, through
// DrillService (controller/authz.h): a bearer token in the Authorization
// header, or the fd_token cookie /login sets. A session the token may not
// see is answered as one that does not exist.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "controller/agent_pool.h"
#include "controller/drill_service.h"
#include "controller/exam_manager.h"
#include "controller/session_manager.h"
#include "controller/web/http_server.h"
#include "controller/web_metrics.h"

namespace firedrill::controller {

// The cookie /login sets.
inline constexpr const char* kTokenCookie = "fd_token";
inline constexpr std::chrono::seconds kTicketLife{60};
inline constexpr std::chrono::seconds kTicketLifeMax{900};

class WebService {
 public:
  // `pool`, `counters` and `exams` may be null (no agent or RPC counts, no
  // exam routes then).
  WebService(DrillService* drill, SessionManager* sessions, AgentPool* pool,
             const ControllerCounters* counters, ExamManager* exams = nullptr)
      : drill_(drill),
        sessions_(sessions),
        pool_(pool),
        counters_(counters),
        exams_(exams),
        started_(std::chrono::steady_clock::now()) {}
  // The server that serves it: its own counts go into /metrics.
  void SetServer(const web::HttpServer* server) { server_ = server; }
  web::HttpResponse Handle(const web::HttpRequest& req);

 private:
  StatusOr<Grant> Authenticate(const web::HttpRequest& req) const;
  web::HttpResponse Metrics(const Grant& who);
  web::HttpResponse SessionRoute(const Grant& who, const web::HttpRequest& req);
  web::HttpResponse ExamRoute(const Grant& who, const web::HttpRequest& req);
  web::HttpResponse Login(const web::HttpRequest& req);
  ControllerSnapshot Snapshot() const;
  // One-time login links (`firedrill dashboard`): a ticket stands for the
  // token that asked for it, once, for kTicketLife.
  web::HttpResponse NewLoginLink(const web::HttpRequest& req);
  web::HttpResponse UseLoginLink(const web::HttpRequest& req);
  struct Ticket {
    std::string token;
    std::string next;
    std::chrono::steady_clock::time_point expires;
  };
  std::mutex tickets_mu_;
  std::map<std::string, Ticket> tickets_;

  DrillService* drill_;
  SessionManager* sessions_;
  AgentPool* pool_;
  const ControllerCounters* counters_;
  ExamManager* exams_;
  const web::HttpServer* server_ = nullptr;
  std::chrono::steady_clock::time_point started_;
};

// A failed Status as an HTTP response: its code's HTTP status (401 with a
// Bearer challenge, 403, 404, ...), the message as JSON under /api and as
// text elsewhere.
web::HttpResponse ErrorResponse(const Status& st, bool json);
int HttpStatusOf(StatusCode code);

}  // namespace firedrill::controller
