#include "agent/agent_client.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "agent/comm/process_group.h"
#include "common/log.h"
#include "faults/shaped_link.h"
#include "faults/throttled_compute.h"

namespace firedrill::agent {

namespace {

void DumpFlightRecorderToLog(int rank, const comm::FlightRecorder& rec) {
  const auto entries = rec.Snapshot();
  if (entries.empty()) return;  // it failed before its first collective
  const size_t n = std::min<size_t>(entries.size(), 16);
  spdlog::error("rank {}: flight recorder, last {} of {} collectives (oldest first):", rank, n, entries.size());
  for (size_t i = entries.size() - n; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const double ms = e.end_unix_ns > 0 ? (e.end_unix_ns - e.start_unix_ns) / 1e6 : -1;
    std::string error = e.error.substr(0, 300);
    std::replace(error.begin(), error.end(), '\n', ' ');
    spdlog::error("  #{} {} {} step {} via {}: {}{}{}", e.seq, e.op, comm::FormatBytes(e.bytes), e.step, e.transport,
                  e.state, ms >= 0 ? fmt::format(" after {:.1f} ms", ms) : std::string(" (never finished)"),
                  error.empty() ? "" : ": " + error);
  }
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

AgentClient::~AgentClient() {
  done_ = true;
  stop_ = true;
  job_cv_.notify_all();
  if (sender_.joinable()) sender_.join();
  if (job_thread_.joinable()) job_thread_.join();
}

int AgentClient::Run() {
  // How this host's faults act, said by every agent alike (a line only the
  // faulty host printed would name it).
  spdlog::info("{}", faults::ThrottledCompute::Capability("probe-" + std::to_string(getpid())));
  spdlog::info("{}", opts_.link_ifname.empty() ? std::string("a slow link here waits out its bytes (no interface of its own)")
                                                : faults::ShapedLink::Capability(opts_.link_ifname));
  auto channel = grpc::CreateChannel(opts_.controller, grpc::InsecureChannelCredentials());
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(opts_.connect_timeout_s);
  if (!channel->WaitForConnected(deadline)) {
    spdlog::error("cannot reach the controller at {} within {} s; is it running (`firedrill up`)?",
                  opts_.controller, opts_.connect_timeout_s);
    return 2;
  }
  stub_ = v1::AgentLink::NewStub(channel);
  stream_ = stub_->Connect(&ctx_);
  v1::AgentMessage hello;
  auto* h = hello.mutable_hello();
  h->set_agent_id(opts_.agent_id);
  h->set_host(opts_.host);
  h->set_pid(getpid());
  h->set_advertise_addr(opts_.advertise_host);
  h->add_capabilities("gloo");
  h->add_capabilities("cpu");
  h->set_join_token(opts_.join_token);
  if (!Write(hello)) {
    spdlog::error("controller at {} closed the stream on Hello", opts_.controller);
    return 2;
  }
  spdlog::info("agent {} on host {} registered with {}", opts_.agent_id, opts_.host, opts_.controller);
  sender_ = std::thread([this] { SenderLoop(); });

  v1::ControllerMessage msg;
  while (stream_->Read(&msg)) {
    switch (msg.msg_case()) {
      case v1::ControllerMessage::kRun:
        OnRunJob(msg.run());
        break;
      case v1::ControllerMessage::kRendezvous: {
        std::lock_guard<std::mutex> lock(job_mu_);
        if (msg.rendezvous().run_id() == run_id_) {
          store_ = StoreAddress{msg.rendezvous().store_host(), msg.rendezvous().store_port()};
        }
        job_cv_.notify_all();
        break;
      }
      case v1::ControllerMessage::kDumpFlightRecorder:
        OnDumpFlightRecorder(msg.dump_flight_recorder());
        break;
      case v1::ControllerMessage::kProbe:
        OnRunProbe(msg.probe());
        break;
      case v1::ControllerMessage::kStop: {
        std::lock_guard<std::mutex> lock(job_mu_);
        if (msg.stop().run_id() == run_id_) stop_ = true;
        job_cv_.notify_all();
        break;
      }
      default:
        break;
    }
  }
  const grpc::Status st = stream_->Finish();
  spdlog::warn("controller stream ended: {}", st.ok() ? "closed" : st.error_message());
  if (opts_.exit_on_disconnect) {
    // A training thread may be blocked in a collective; don't wait for it.
    std::fflush(nullptr);
    std::_Exit(3);
  }
  done_ = true;
  stop_ = true;
  job_cv_.notify_all();
  return 3;
}

bool AgentClient::Write(const v1::AgentMessage& msg) {
  std::lock_guard<std::mutex> lock(write_mu_);
  return stream_ && stream_->Write(msg);
}

void AgentClient::SendEvent(const std::string& run_id, int rank, v1::JobEvent::Kind kind, const std::string& message,
                            int64_t step) {
  v1::AgentMessage m;
  auto* e = m.mutable_event();
  e->set_run_id(run_id);
  e->set_rank(rank);
  e->set_kind(kind);
  e->set_message(message);
  e->set_step(step);
  Write(m);
}

void AgentClient::FlushSteps() {
  v1::AgentMessage m;
  {
    std::lock_guard<std::mutex> lock(job_mu_);
    if (pending_.empty()) return;
    auto* batch = m.mutable_steps();
    batch->set_run_id(run_id_);
    for (auto& s : pending_) *batch->add_steps() = std::move(s);
    pending_.clear();
  }
  Write(m);
}

void AgentClient::SenderLoop() {
  auto last_beat = std::chrono::steady_clock::now();
  while (!done_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    FlushSteps();
    if (std::chrono::steady_clock::now() - last_beat > std::chrono::seconds(1)) {
      v1::AgentMessage m;
      m.mutable_heartbeat()->set_unix_ns(NowNs());
      Write(m);
      last_beat = std::chrono::steady_clock::now();
    }
  }
}

void AgentClient::OnRunJob(const v1::RunJob& job) {
  if (job_running_) {
    SendEvent(job.run_id(), job.rank(), v1::JobEvent::FAILED,
              "agent " + opts_.agent_id + " is still running run " + run_id_ + "; cannot start another", 0);
    return;
  }
  if (job_thread_.joinable()) job_thread_.join();
  {
    std::lock_guard<std::mutex> lock(job_mu_);
    run_id_ = job.run_id();
    store_.reset();
    pending_.clear();
    stop_ = false;
  }
  job_running_ = true;
  job_thread_ = std::thread([this, job] { JobMain(job); });
}

StatusOr<StoreAddress> AgentClient::AwaitStore(const std::string& run_id, double timeout_s) {
  std::unique_lock<std::mutex> lock(job_mu_);
  job_cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                    [&] { return store_.has_value() || stop_ || done_; });
  if (store_) return *store_;
  if (stop_ || done_) return Status(StatusCode::kCancelled, "run stopped before rendezvous");
  return DeadlineExceeded("rank 0's store address did not arrive within " + std::to_string(static_cast<int>(timeout_s)) +
                          " s (run " + run_id + ")");
}

void AgentClient::OnDumpFlightRecorder(const v1::DumpFlightRecorder& req) {
  v1::AgentMessage m;
  auto* fr = m.mutable_flight_record();
  fr->set_request_id(req.request_id());
  std::shared_ptr<comm::FlightRecorder> rec;
  {
    std::lock_guard<std::mutex> lock(job_mu_);
    rec = recorder_;
    fr->set_run_id(run_id_);
    fr->set_rank(rec ? recorder_rank_ : -1);
  }
  if (rec) {
    for (const auto& e : rec->Snapshot()) {
      auto* c = fr->add_entries();
      c->set_seq(e.seq);
      c->set_op(e.op);
      c->set_bytes(e.bytes);
      c->set_step(e.step);
      c->set_transport(e.transport);
      c->set_state(e.state);
      c->set_start_unix_ns(e.start_unix_ns);
      c->set_end_unix_ns(e.end_unix_ns);
      c->set_error(e.error);
    }
  }
  fr->set_unix_ns(comm::UnixNowNs());
  Write(m);
}

void AgentClient::OnRunProbe(const v1::RunProbe& req) {
  std::shared_ptr<ProbeMailbox> box;
  int rank = -1;
  {
    std::lock_guard<std::mutex> lock(job_mu_);
    if (job_running_ && req.run_id() == run_id_) box = probes_;
    rank = recorder_rank_;
  }
  if (box) {
    box->Post(req);
    return;
  }
  v1::AgentMessage m;
  auto* r = m.mutable_probe_report();
  r->set_request_id(req.request_id());
  r->set_run_id(req.run_id());
  r->set_rank(rank);
  r->set_error("agent " + opts_.agent_id + " is not running run " + req.run_id());
  Write(m);
}

void AgentClient::JobMain(v1::RunJob job) {
  const std::string run_id = job.run_id();
  const int rank = job.rank();
  TrainerOptions o;
  o.job = job.job();
  o.rank = rank;
  o.max_steps = job.max_steps();
  o.seed = static_cast<uint64_t>(job.seed());
  o.faults.assign(job.faults().begin(), job.faults().end());
  o.store_bind_host = opts_.bind_host;
  o.store_advertise_host = opts_.advertise_host;
  o.comm_host = opts_.advertise_host;  // Gloo binds here and peers dial it
  o.link_ifname = opts_.link_ifname;
  o.cpu_cgroup = "rank" + std::to_string(rank) + "-" + std::to_string(getpid());
  const std::string& transport = job.job().comm().transport();
  if (transport != "" && transport != "auto" && transport != "gloo") {
    SendEvent(run_id, rank, v1::JobEvent::FAILED,
              "comm.transport '" + transport + "' is not a transport (auto | gloo)", 0);
    job_running_ = false;
    return;
  }
  o.shared_memory_allreduce = SharedMemoryAllReduce(job.job(), job.ranks_share_host());
  o.store_ready = [this, run_id, rank](const StoreAddress& a) {
    v1::AgentMessage m;
    auto* e = m.mutable_event();
    e->set_run_id(run_id);
    e->set_rank(rank);
    e->set_kind(v1::JobEvent::STORE_READY);
    e->set_store_host(a.host);
    e->set_store_port(a.port);
    Write(m);
  };
  auto o_recorder = o.recorder = std::make_shared<comm::FlightRecorder>();
  auto o_probes = o.probes = std::make_shared<ProbeMailbox>([this](const v1::ProbeReport& r) {
    v1::AgentMessage m;
    *m.mutable_probe_report() = r;
    Write(m);
  });
  {
    std::lock_guard<std::mutex> lock(job_mu_);
    recorder_ = o.recorder;
    recorder_rank_ = rank;
    probes_ = o.probes;
  }
  // A host that goes down takes its process with it: no last report, no
  // goodbye on the stream, as a power loss.
  o.crash = [](const std::string&) { ::kill(::getpid(), SIGKILL); };
  const double rendezvous_timeout = job.job().comm().timeout_s() + 30.0;
  o.await_store = [this, run_id, rendezvous_timeout] { return AwaitStore(run_id, rendezvous_timeout); };

  Status result;
  int64_t steps = 0;
  auto trainer = Trainer::Create(std::move(o));
  if (!trainer.ok()) {
    result = trainer.status();
  } else {
    result = (*trainer)->Run(stop_, [this](const v1::StepReport& r) {
      std::lock_guard<std::mutex> lock(job_mu_);
      pending_.push_back(r);
    });
    steps = (*trainer)->steps_done();
  }
  FlushSteps();  // every step report goes out before the end event
  // A probe that came too late for the last step boundary gets an answer.
  if (auto late = o_probes->Take(std::chrono::milliseconds(0))) {
    v1::AgentMessage m;
    auto* r = m.mutable_probe_report();
    r->set_request_id(late->request_id());
    r->set_run_id(run_id);
    r->set_rank(rank);
    r->set_step(steps);
    r->set_error("rank " + std::to_string(rank) + ": the run ended after step " + std::to_string(steps) +
                 " before the probe could run");
    Write(m);
  }
  // Free for the next job before saying this one is over: the controller
  // may send the next RunJob the moment it reads the end event.
  job_running_ = false;
  if (result.ok() || result.code() == StatusCode::kCancelled) {
    spdlog::info("run {} rank {}: finished after {} steps", run_id, rank, steps);
    SendEvent(run_id, rank, v1::JobEvent::FINISHED, result.ok() ? "" : result.message(), steps);
  } else {
    spdlog::error("run {} rank {}: {}", run_id, rank, result.message());
    // As TORCH_NCCL_DUMP_ON_TIMEOUT does: what this rank was doing, in its
    // own log, for whoever reads it after the job is gone.
    if (job.dump_flight_recorder() &&
        (result.code() == StatusCode::kDeadlineExceeded || result.code() == StatusCode::kUnavailable ||
         result.code() == StatusCode::kAborted))
      DumpFlightRecorderToLog(rank, *o_recorder);
    SendEvent(run_id, rank, v1::JobEvent::FAILED, result.message(), steps);
  }
}

}  // namespace firedrill::agent
