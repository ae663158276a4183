// The agent's side of AgentLink: registers with the controller, runs the jobs
// it is given on a training thread, streams telemetry in batches, relays the
// rendezvous address, and stops when told.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/probe.h"
#include "agent/trainer.h"
#include "firedrill/v1/agent.grpc.pb.h"

namespace firedrill::agent {

struct AgentOptions {
  std::string controller;
  std::string agent_id;
  std::string host;
  std::string advertise_host = "127.0.0.1";  // peers reach this rank's store here
  std::string bind_host = "127.0.0.1";
  std::string link_ifname;  // this host's own interface (in its namespace); empty: none
  bool exit_on_disconnect = false;
  int connect_timeout_s = 30;
  std::string join_token;  // FIREDRILL_JOIN_TOKEN, or read from --join-token-file
};

class AgentClient {
 public:
  explicit AgentClient(AgentOptions opts) : opts_(std::move(opts)) {}
  ~AgentClient();
  // Connects, serves jobs until the stream ends; returns a process exit code.
  int Run();

 private:
  void OnRunJob(const v1::RunJob& job);
  void JobMain(v1::RunJob job);
  StatusOr<StoreAddress> AwaitStore(const std::string& run_id, double timeout_s);
  bool Write(const v1::AgentMessage& msg);
  void FlushSteps();
  void OnDumpFlightRecorder(const v1::DumpFlightRecorder& req);
  void OnRunProbe(const v1::RunProbe& req);
  void SenderLoop();
  void SendEvent(const std::string& run_id, int rank, v1::JobEvent::Kind kind, const std::string& message,
                 int64_t step);

  AgentOptions opts_;
  std::unique_ptr<v1::AgentLink::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ControllerMessage>> stream_;
  std::mutex write_mu_;
  std::atomic<bool> done_{false};
  std::thread sender_;

  // The job in progress.
  std::mutex job_mu_;
  std::condition_variable job_cv_;
  std::string run_id_;
  std::optional<StoreAddress> store_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> job_running_{false};
  // The running (or last) job's flight recorder and rank, for dumps.
  std::shared_ptr<comm::FlightRecorder> recorder_;
  int recorder_rank_ = -1;
  std::shared_ptr<ProbeMailbox> probes_;  // the running job's
  std::thread job_thread_;
  std::vector<v1::StepReport> pending_;  // guarded by job_mu_
};

}  // namespace firedrill::agent
