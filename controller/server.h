// Wires the controller together: store, scenario catalogue, agent pool,
// session manager, and two gRPC servers:
//   - the learner's listener (--listen): the public Drill service only, with
//     server reflection for it;
//   - the agents' listener: a Unix socket in the private state directory
//     for agents this controller launches, plus a TCP port (--agent-listen)
//     for remote agents when the operator gives a pool token. Every agent
//     presents a join token (controller/agent_pool.h).
// and, when --http-listen is given, an HTTP server beside them
// (controller/web_service.h): /metrics and the dashboard's API.
// One controller per state directory: it holds a lock on
// <state>/controller.lock and says who holds it when a second one starts.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/agent_pool.h"
#include "controller/drill_service.h"
#include "controller/netns_fabric.h"
#include "controller/session_manager.h"
#include "controller/store.h"
#include "controller/web/http_server.h"
#include "controller/web_metrics.h"
#include "controller/web_service.h"

namespace firedrill::controller {

struct ServerOptions {
  std::string listen = "127.0.0.1:50071";  // port 0 picks a free port
  std::string state_dir;
  // Scenario folders, the first one the shipped catalogue; ids must be
  // unique across all of them.
  std::vector<std::string> scenario_dirs;
  std::string agent_bin;
  bool local_launcher = true;
  std::string agent_listen;     // host:port for remote agents; empty: none
  std::string pool_token_file;  // the token remote agents must present
  // Simulated hosts: "netns" (a network namespace each, real TCP between
  // them; refuse to start without), "loopback" (all in this namespace), or
  // "auto" (netns where the machine allows it). Local launcher only.
  std::string hosts = "auto";
  // TLS on the public listener: a PEM certificate chain and its key (both
  // or neither; `firedrill certs` makes a pair). Unset: plaintext, for a
  // listener on loopback.
  std::string tls_cert;
  std::string tls_key;
  // How long an exam minute lasts on this controller's clock: 60000 except
  // in tests of the clock, which would otherwise wait half an hour.
  int64_t exam_minute_ms = 60000;
  // The HTTP side (controller/web_service.h: /metrics, the dashboard's
  // API): host:port, port 0 for a free one; empty: off. The address bound
  // is written to <state>/http.addr.
  std::string http_listen;
};

class Server {
 public:
  explicit Server(ServerOptions opts) : opts_(std::move(opts)) {}
  ~Server();
  // Locks the state dir, opens the store, loads scenarios, starts serving.
  // Writes <state>/controller.addr with the learner address actually bound.
  Status Start();
  const std::string& address() const { return bound_; }
  const std::string& agent_address() const { return agent_bound_; }
  // host:port of the HTTP side; empty when it is off.
  const std::string& http_address() const { return http_bound_; }
  // Aborts live sessions, kills agents, stops serving. Idempotent.
  void Shutdown();

 private:
  Status LockStateDir();
  // TLS when --tls-cert/--tls-key are given, else plaintext.
  StatusOr<std::shared_ptr<grpc::ServerCredentials>> PublicCredentials() const;
  ServerOptions opts_;
  std::string bound_, agent_bound_, http_bound_;
  int lock_fd_ = -1;
  std::unique_ptr<Store> store_;
  Status StartFabric();
  // The HTTP side on opts_.http_listen (after the public service it serves).
  Status StartHttp();
  std::unique_ptr<AgentPool> pool_;
  std::unique_ptr<NetnsFabric> fabric_;  // outlives the sessions on it
  std::unique_ptr<Timeline> timeline_;   // outlives the sessions that post to it
  std::unique_ptr<SessionManager> sessions_;
  std::unique_ptr<Gatekeeper> gate_;  // the public service's tokens
  std::unique_ptr<ExamSessions> exam_sessions_;
  std::unique_ptr<ExamManager> exams_;
  std::unique_ptr<ControllerCounters> counters_;  // before the servers that count into it
  std::unique_ptr<DrillService> drill_;
  std::unique_ptr<WebService> web_;
  std::unique_ptr<web::HttpServer> http_;
  std::unique_ptr<grpc::Server> agent_server_;
  std::unique_ptr<grpc::Server> server_;
  bool stopped_ = false;
};

}  // namespace firedrill::controller
