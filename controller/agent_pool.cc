#include "controller/agent_pool.h"

#include "common/log.h"
#include "controller/exam/crypto.h"

namespace firedrill::controller {

void AgentPool::SetPoolToken(std::string token) {
  std::lock_guard<std::mutex> lock(mu_);
  pool_token_ = std::move(token);
}

void AgentPool::Expect(const std::string& agent_id, const std::string& token) {
  std::lock_guard<std::mutex> lock(mu_);
  expected_[agent_id] = token;
}

void AgentPool::Forget(const std::string& agent_id) {
  std::lock_guard<std::mutex> lock(mu_);
  expected_.erase(agent_id);
}

grpc::Status AgentPool::Connect(grpc::ServerContext* ctx,
                                grpc::ServerReaderWriter<v1::ControllerMessage, v1::AgentMessage>* stream) {
  v1::AgentMessage msg;
  if (!stream->Read(&msg) || !msg.has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message on AgentLink must be Hello");
  }
  auto conn = std::make_shared<Conn>();
  conn->info = {msg.hello().agent_id(), msg.hello().host(), msg.hello().pid(), msg.hello().advertise_addr()};
  conn->ctx = ctx;
  conn->stream = stream;
  const std::string id = conn->info.agent_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto want = expected_.find(id);
    const bool launched = want != expected_.end() && SameSecret(msg.hello().join_token(), want->second);
    const bool pooled = want == expected_.end() && SameSecret(msg.hello().join_token(), pool_token_);
    if (!launched && !pooled) {
      refused_.fetch_add(1);
      spdlog::warn("agent {} (host {}, pid {}) refused: no valid join token", id, msg.hello().host(),
                   msg.hello().pid());
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "agent '" + id + "' has no valid join token: an agent the controller launches gets one "
                          "in FIREDRILL_JOIN_TOKEN; a remote agent needs the pool token (--join-token-file, the "
                          "file the controller's --pool-token-file names)");
    }
    if (conns_.count(id)) {
      refused_.fetch_add(1);
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          "agent id '" + id + "' is already connected; give each agent a unique --agent-id");
    }
    conns_[id] = conn;
    accepted_.fetch_add(1);
  }
  cv_.notify_all();
  spdlog::info("agent {} registered (host {}, pid {})", id, conn->info.host, conn->info.pid);

  std::string reason = "stream closed";
  while (stream->Read(&msg)) {
    AgentListener* listener = listener_.load();
    if (listener == nullptr) continue;
    switch (msg.msg_case()) {
      case v1::AgentMessage::kSteps:
        listener->OnSteps(id, msg.steps());
        break;
      case v1::AgentMessage::kEvent:
        if (msg.event().kind() == v1::JobEvent::FINISHED || msg.event().kind() == v1::JobEvent::FAILED) {
          std::lock_guard<std::mutex> lock(mu_);
          if (conn->run_id == msg.event().run_id()) {
            conn->run_id.clear();
            conn->info.busy = false;
          }
        }
        listener->OnJobEvent(id, msg.event());
        break;
      case v1::AgentMessage::kFlightRecord:
        listener->OnFlightRecord(id, msg.flight_record());
        break;
      case v1::AgentMessage::kProbeReport:
        listener->OnProbeReport(id, msg.probe_report());
        break;
      default:
        break;  // heartbeats only keep the stream alive
    }
  }
  if (ctx->IsCancelled()) reason = "stream cancelled";
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = conns_.find(id);
    if (it != conns_.end() && it->second == conn) conns_.erase(it);
  }
  {
    // Wait for writers in flight before the stream object goes away.
    std::lock_guard<std::mutex> lock(conn->write_mu);
    conn->stream = nullptr;
  }
  spdlog::info("agent {} disconnected ({})", id, reason);
  if (AgentListener* listener = listener_.load())
    listener->OnAgentGone(id, "lost contact with the controller (" + reason + ")");
  return grpc::Status::OK;
}

bool AgentPool::Send(const std::string& agent_id, const v1::ControllerMessage& msg) {
  std::shared_ptr<Conn> conn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = conns_.find(agent_id);
    if (it == conns_.end()) return false;
    conn = it->second;
  }
  if (msg.has_run()) {
    std::lock_guard<std::mutex> lock(mu_);
    conn->run_id = msg.run().run_id();
    conn->info.busy = true;
  }
  std::lock_guard<std::mutex> lock(conn->write_mu);
  return conn->stream != nullptr && conn->stream->Write(msg);
}

StatusOr<std::vector<AgentInfo>> AgentPool::WaitFor(const std::vector<std::string>& ids,
                                                     std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto all_here = [&] {
    for (const auto& id : ids) {
      if (!conns_.count(id)) return false;
    }
    return true;
  };
  if (!cv_.wait_for(lock, timeout, all_here)) {
    std::string missing;
    for (const auto& id : ids) {
      if (!conns_.count(id)) missing += (missing.empty() ? "" : ", ") + id;
    }
    return DeadlineExceeded("agents did not register within " + std::to_string(timeout.count() / 1000) +
                            " s: " + missing + " (see their logs)");
  }
  std::vector<AgentInfo> out;
  for (const auto& id : ids) out.push_back(conns_[id]->info);
  return out;
}

std::optional<AgentInfo> AgentPool::Find(const std::string& agent_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(agent_id);
  if (it == conns_.end()) return std::nullopt;
  return it->second->info;
}

std::vector<AgentInfo> AgentPool::Connected() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<AgentInfo> out;
  for (auto& [id, c] : conns_) out.push_back(c->info);
  return out;
}

void AgentPool::CloseAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, c] : conns_) c->ctx->TryCancel();
}

}  // namespace firedrill::controller
