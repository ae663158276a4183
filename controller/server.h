// Wires the controller together: store, scenario catalogue, agent pool,
// session manager and the gRPC server (Drill + AgentLink + reflection).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "controller/agent_pool.h"
#include "controller/drill_service.h"
#include "controller/session_manager.h"
#include "controller/store.h"

namespace firedrill::controller {

struct ServerOptions {
  std::string listen = "127.0.0.1:50071";  // port 0 picks a free port
  std::string state_dir;
  std::string scenario_dir;
  std::string agent_bin;
  bool local_launcher = true;
};

class Server {
 public:
  explicit Server(ServerOptions opts) : opts_(std::move(opts)) {}
  ~Server();
  // Opens the store, loads scenarios, starts serving. Writes
  // <state>/controller.addr with the address actually bound.
  Status Start();
  const std::string& address() const { return bound_; }
  // Aborts live sessions, kills agents, stops serving. Idempotent.
  void Shutdown();

 private:
  ServerOptions opts_;
  std::string bound_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<AgentPool> pool_;
  std::unique_ptr<SessionManager> sessions_;
  std::unique_ptr<DrillService> drill_;
  std::unique_ptr<grpc::Server> server_;
  bool stopped_ = false;
};

}  // namespace firedrill::controller
