#include "controller/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>

#include <chrono>
#include <fstream>

#include "common/log.h"
#include "common/paths.h"
#include "controller/scenario_loader.h"

namespace firedrill::controller {

Server::~Server() { Shutdown(); }

Status Server::Start() {
  std::string err;
  if (!MakeDirs(opts_.state_dir, &err)) return Internal(err);
  auto store = Store::Open(opts_.state_dir + "/firedrill.db");
  if (!store.ok()) return store.status();
  store_ = std::move(store).value();

  auto scenarios = LoadScenarioDir(opts_.scenario_dir);
  if (!scenarios.ok()) return scenarios.status();
  if (scenarios->empty()) return NotFound("no scenario files (*.yaml) in " + opts_.scenario_dir);

  pool_ = std::make_unique<AgentPool>();
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(opts_.listen, grpc::InsecureServerCredentials(), &port);
  // Agents stream telemetry batches; keep connections alive through idle drills.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.RegisterService(pool_.get());

  // Agents dial the bound port, known only after BuildAndStart; the manager
  // starts its launcher once told (SetAgentDialAddress).
  SessionManagerOptions sm;
  sm.state_dir = opts_.state_dir;
  sm.agent_bin = opts_.agent_bin;
  sm.local_launcher = opts_.local_launcher;
  sessions_ = std::make_unique<SessionManager>(sm, store_.get(), pool_.get(), std::move(scenarios).value());
  drill_ = std::make_unique<DrillService>(sessions_.get());
  builder.RegisterService(drill_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port == 0) {
    return Unavailable("cannot listen on " + opts_.listen + " (in use? another controller running? try --listen)");
  }
  const std::string host = opts_.listen.substr(0, opts_.listen.rfind(':'));
  const std::string dial_host = (host == "0.0.0.0" || host == "[::]" || host.empty()) ? "127.0.0.1" : host;
  bound_ = dial_host + ":" + std::to_string(port);
  sessions_->SetAgentDialAddress(bound_);
  FD_RETURN_IF_ERROR(sessions_->Init());

  std::ofstream(opts_.state_dir + "/controller.addr") << bound_ << "\n";
  spdlog::info("firedrill-controller listening on {} (state {})", bound_, opts_.state_dir);
  return Status::Ok();
}

void Server::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  if (sessions_) sessions_->Shutdown();
  if (pool_) pool_->CloseAll();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  std::remove((opts_.state_dir + "/controller.addr").c_str());
}

}  // namespace firedrill::controller
