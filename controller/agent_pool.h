// The AgentLink service: every agent holds one bidirectional stream. The pool
// knows which agents are connected, sends them messages, and forwards what
// they report to a Listener (the session manager).
#pragma once

#include <grpcpp/grpcpp.h>

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
  void SetListener(AgentListener* listener) { listener_ = listener; }

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

 private:
  struct Conn {
    AgentInfo info;
    grpc::ServerContext* ctx = nullptr;
    grpc::ServerReaderWriter<v1::ControllerMessage, v1::AgentMessage>* stream = nullptr;
    std::mutex write_mu;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Conn>> conns_;
  AgentListener* listener_ = nullptr;
};

}  // namespace firedrill::controller
