// The AgentLink service: every agent holds one bidirectional stream. The pool
// knows which agents are connected, sends them messages, and forwards what
// they report to a Listener (the session manager).
//
// Only agents with a credential join: an agent the controller launched
// presents the join token it was given for its id (Expect), a remote agent
// the operator's pool token. Anything else is refused with
// PERMISSION_DENIED before it can read a job (and its faults) or report.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "firedrill/v1/agent.grpc.pb.h"

namespace firedrill::controller {

struct AgentInfo {
  std::string agent_id;
  std::string host;
  int pid = 0;
  std::string advertise_addr;
  bool busy = false;  // holds a job it has not reported finished or failed
};

class AgentListener {
 public:
  virtual ~AgentListener() = default;
  virtual void OnSteps(const std::string& agent_id, const v1::StepBatch& batch) = 0;
  virtual void OnJobEvent(const std::string& agent_id, const v1::JobEvent& event) = 0;
  virtual void OnAgentGone(const std::string& agent_id, const std::string& reason) = 0;
  virtual void OnFlightRecord(const std::string& agent_id, const v1::FlightRecord& record) {}
  virtual void OnProbeReport(const std::string& agent_id, const v1::ProbeReport& report) {}
};

class AgentPool final : public v1::AgentLink::Service {
 public:
  // May be set while agents are connected (the agents' listener starts
  // before the session manager exists).
  void SetListener(AgentListener* listener) { listener_.store(listener); }
  // Remote agents must present this token; empty: remote agents are refused.
  void SetPoolToken(std::string token);
  // The agent `agent_id` (about to be launched) may join with `token`.
  void Expect(const std::string& agent_id, const std::string& token);
  // Drops an expectation (the agent was retired before it joined).
  void Forget(const std::string& agent_id);

  grpc::Status Connect(grpc::ServerContext* ctx,
                       grpc::ServerReaderWriter<v1::ControllerMessage, v1::AgentMessage>* stream) override;

  // False if the agent is not connected or the write failed.
  bool Send(const std::string& agent_id, const v1::ControllerMessage& msg);
  // Blocks until every id has registered, or the deadline passes.
  StatusOr<std::vector<AgentInfo>> WaitFor(const std::vector<std::string>& ids,
                                           std::chrono::milliseconds timeout);
  std::optional<AgentInfo> Find(const std::string& agent_id);
  std::vector<AgentInfo> Connected();
  // Ends every stream (controller shutdown).
  void CloseAll();
  // Agents that presented themselves since the controller started, by
  // whether they were let in (/metrics).
  uint64_t registrations(bool accepted) const { return accepted ? accepted_.load() : refused_.load(); }

 private:
  struct Conn {
    AgentInfo info;
    std::string run_id;  // the job it was sent and has not ended
    grpc::ServerContext* ctx = nullptr;
    grpc::ServerReaderWriter<v1::ControllerMessage, v1::AgentMessage>* stream = nullptr;
    std::mutex write_mu;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Conn>> conns_;
  std::map<std::string, std::string> expected_;  // agent id -> join token
  std::string pool_token_;
  std::atomic<AgentListener*> listener_{nullptr};
  std::atomic<uint64_t> accepted_{0}, refused_{0};
};

}  // namespace firedrill::controller
