#include "controller/server.h"

#include <fcntl.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/log.h"
#include "common/paths.h"
#include "controller/draws.h"
#include "controller/rpc_counting.h"
#include "faults/cpu_quota.h"
#include "scenario/loader.h"

namespace firedrill::controller {

namespace {

// Unix socket paths are limited to sizeof(sun_path) - 1 bytes.
constexpr size_t kMaxSocketPath = 107;

void KeepAlive(grpc::ServerBuilder& b) {
  // Agents stream telemetry batches; keep connections alive through idle drills.
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
}

}  // namespace

Server::~Server() { Shutdown(); }

Status Server::LockStateDir() {
  const std::string path = opts_.state_dir + "/controller.lock";
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) return FailedPrecondition("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    std::ifstream in(path);
    std::string holder;
    std::getline(in, holder);
    ::close(lock_fd_);
    lock_fd_ = -1;
    return FailedPrecondition("another controller holds state dir " + opts_.state_dir + " (" +
                              (holder.empty() ? std::string("see ") + path : holder) +
                              "); stop it with `firedrill down`, or give this one its own --state-dir");
  }
  const std::string me = "pid " + std::to_string(::getpid()) + ", listening on " + opts_.listen;
  if (::ftruncate(lock_fd_, 0) == 0) (void)!::write(lock_fd_, (me + "\n").data(), me.size() + 1);
  return Status::Ok();
}

// Hosts as network namespaces where the machine allows it; what a crashed
// controller of this state dir left is removed first. The operator reads
// here which way the hosts went (the learner sees no difference).
Status Server::StartFabric() {
  const std::string ledger = opts_.state_dir + "/network.ledger";
  std::string report;
  Status clean = NetnsFabric::CleanLeftovers(ledger, &report);
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) spdlog::info("left by an earlier controller: {}", line);
  if (!clean.ok()) spdlog::warn("could not remove everything {} lists: {}", ledger, clean.message());
  if (const int n = faults::CpuQuota::CleanLeftovers(); n > 0)
    spdlog::info("removed {} CPU quota cgroup(s) of agents that were killed", n);
  if (opts_.hosts != "auto" && opts_.hosts != "netns" && opts_.hosts != "loopback")
    return InvalidArgument("--hosts must be auto, netns or loopback, got '" + opts_.hosts + "'");
  if (opts_.hosts == "loopback") {
    spdlog::info("hosts: every simulated host's agents share this network namespace (--hosts loopback)");
    return Status::Ok();
  }
  if (!opts_.local_launcher) {
    if (opts_.hosts == "netns")
      return InvalidArgument("--hosts netns places the agents this controller launches; with --launcher remote "
                             "agents run where they were started (put them in namespaces yourself)");
    spdlog::info("hosts: remote agents run where they were started (--launcher remote)");
    return Status::Ok();
  }
  Status why = agent_bound_.rfind("unix:", 0) == 0
                   ? NetnsFabric::Available()
                   : FailedPrecondition("agents in namespaces reach the controller on its unix socket, and the "
                                        "state dir is too deep for one (" + opts_.state_dir + ")");
  if (why.ok()) {
    auto fabric = NetnsFabric::Create(ledger);
    if (fabric.ok()) {
      fabric_ = std::move(fabric).value();
    } else {
      why = fabric.status();
    }
  }
  if (!why.ok()) {
    if (opts_.hosts == "netns") return Unavailable("--hosts netns: " + why.message());
    spdlog::warn("hosts: network namespaces are not available here ({}); falling back to one namespace: every "
                 "simulated host's agents talk over loopback",
                 why.message());
    return Status::Ok();
  }
  spdlog::info("hosts: a network namespace each, on bridge {} (gateway {}); ledger {}", fabric_->bridge(),
               fabric_->gateway(), ledger);
  return Status::Ok();
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> Server::PublicCredentials() const {
  if (opts_.tls_cert.empty() && opts_.tls_key.empty()) {
    const std::string host = opts_.listen.substr(0, opts_.listen.rfind(':'));
    if (host != "127.0.0.1" && host != "localhost" && host != "[::1]")
      spdlog::warn(
          "the public listener {} is plaintext: tokens cross the network readable; give it --tls-cert and "
          "--tls-key (`firedrill certs` makes a pair)",
          opts_.listen);
    return grpc::InsecureServerCredentials();
  }
  if (opts_.tls_cert.empty() || opts_.tls_key.empty())
    return InvalidArgument("TLS needs both --tls-cert and --tls-key");
  auto read = [](const std::string& path, const std::string& flag) -> StatusOr<std::string> {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (!in || ss.str().find("-----BEGIN") == std::string::npos)
      return InvalidArgument(flag + " " + path + ": cannot read a PEM file there");
    return ss.str();
  };
  auto cert = read(opts_.tls_cert, "--tls-cert");
  if (!cert.ok()) return cert.status();
  auto key = read(opts_.tls_key, "--tls-key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  spdlog::info("the public listener speaks TLS with {}", opts_.tls_cert);
  return grpc::SslServerCredentials(ssl);
}

Status Server::Start() {
  // A TLS pair that cannot be read stops the start before anything else.
  auto creds = PublicCredentials();
  if (!creds.ok()) return creds.status();
  std::string err;
  if (!MakePrivateDir(opts_.state_dir, &err)) return Internal(err);
  FD_RETURN_IF_ERROR(LockStateDir());
  auto store = Store::Open(opts_.state_dir + "/firedrill.db");
  if (!store.ok()) return store.status();
  store_ = std::move(store).value();

  auto scenarios = scenario::LoadScenarioDirs(opts_.scenario_dirs);
  if (!scenarios.ok()) return scenarios.status();

  pool_ = std::make_unique<AgentPool>();
  if (!opts_.pool_token_file.empty()) {
    std::ifstream in(opts_.pool_token_file);
    std::string token;
    std::getline(in, token);
    if (token.size() < 16) {
      return InvalidArgument("--pool-token-file " + opts_.pool_token_file +
                             ": needs a token of at least 16 characters on its first line");
    }
    pool_->SetPoolToken(token);
  } else if (!opts_.agent_listen.empty()) {
    return InvalidArgument("--agent-listen needs --pool-token-file: remote agents must present a token");
  }

  // The agents' listener first: the reflection plugin, once initialised,
  // joins every server built after it, and this one serves no learner.
  {
    grpc::ServerBuilder builder;
    KeepAlive(builder);
    const std::string sock = std::filesystem::absolute(opts_.state_dir + "/agent.sock").lexically_normal().string();
    std::remove(sock.c_str());
    int local_port = 0;
    const bool unix_ok = sock.size() <= kMaxSocketPath;
    if (unix_ok) {
      builder.AddListeningPort("unix:" + sock, grpc::InsecureServerCredentials());
    } else {
      // A state dir too deep for a socket path: loopback, still token-checked.
      builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &local_port);
    }
    int remote_port = 0;
    if (!opts_.agent_listen.empty())
      builder.AddListeningPort(opts_.agent_listen, grpc::InsecureServerCredentials(), &remote_port);
    builder.RegisterService(pool_.get());
    agent_server_ = builder.BuildAndStart();
    if (!agent_server_ || (!unix_ok && local_port == 0) || (!opts_.agent_listen.empty() && remote_port == 0)) {
      return Unavailable("cannot listen for agents on " + (unix_ok ? sock : std::string("127.0.0.1")) +
                         (opts_.agent_listen.empty() ? "" : " and " + opts_.agent_listen) +
                         " (in use? try another --agent-listen)");
    }
    agent_bound_ = unix_ok ? "unix:" + sock : "127.0.0.1:" + std::to_string(local_port);
    if (unix_ok) (void)::chmod(sock.c_str(), 0600);
    if (!opts_.agent_listen.empty()) {
      // Port 0 takes a free one: the address bound is logged and written
      // beside controller.addr, for whoever starts the remote agents.
      const std::string remote = opts_.agent_listen.substr(0, opts_.agent_listen.rfind(':') + 1) +
                                 std::to_string(remote_port);
      std::ofstream(opts_.state_dir + "/agent-listen.addr") << remote << "\n";
      spdlog::info("remote agents may register on {}", remote);
    }
  }

  FD_RETURN_IF_ERROR(StartFabric());

  // The session manager is ready (sessions loaded, launcher dialling the
  // agents' listener) before any learner can call it.
  auto key = LoadOrCreateDrawKey(opts_.state_dir + "/draw.key");
  if (!key.ok()) return key.status();
  SessionManagerOptions sm;
  sm.state_dir = opts_.state_dir;
  sm.agent_bin = opts_.agent_bin;
  // Beside the agent: the same build's checkpoint tool.
  sm.ckpt_bin = opts_.agent_bin.substr(0, opts_.agent_bin.find_last_of('/') + 1) + "firedrill-ckpt";
  sm.train_bin = opts_.agent_bin.substr(0, opts_.agent_bin.find_last_of('/') + 1) + "firedrill-train";
  sm.local_launcher = opts_.local_launcher;
  sm.draw_key = *key;
  sm.fabric = fabric_.get();
  const std::vector<v1::Scenario> catalogue = *scenarios;
  sessions_ = std::make_unique<SessionManager>(sm, store_.get(), pool_.get(), std::move(scenarios).value());
  sessions_->SetAgentDialAddress(agent_bound_);
  // Every session event goes on its shared timeline too, as the
  // controller's entry beside the participants' own.
  timeline_ = std::make_unique<Timeline>(store_.get());
  counters_ = std::make_unique<ControllerCounters>();
  sessions_->SetEventSink([t = timeline_.get(), c = counters_.get()](const std::string& id,
                                                                     const v1::SessionEvent& e) {
    if (e.kind() == "verification_passed" || e.kind() == "verification_failed")
      c->CountVerification(e.kind().substr(std::string("verification_").size()));
    if (auto item = t->Append(id, e.unix_ms(), "controller", "", "event", e.kind() + ": " + e.message());
        !item.ok())
      spdlog::error("session {}: the timeline did not take an event: {}", id, item.status().message());
  });
  FD_RETURN_IF_ERROR(sessions_->Init());
  // Every public call presents a token; the owner's is written beside the
  // database before anyone can call, for the local CLI to read.
  gate_ = std::make_unique<Gatekeeper>(store_.get());
  FD_RETURN_IF_ERROR(gate_->Init(opts_.state_dir + "/owner.token"));
  // Exams: their clock runs from here on, through any client's disconnect.
  exam_sessions_ = SessionsForExams(sessions_.get(), store_.get(), catalogue);
  ExamManagerOptions eo;
  eo.key_file = opts_.state_dir + "/exam.key";
  eo.minute_ms = opts_.exam_minute_ms;
  if (eo.minute_ms != 60000)
    spdlog::warn(
        "an exam minute lasts {} ms on this controller (--exam-minute-ms): for tests of the clock only",
        eo.minute_ms);
  exams_ = std::make_unique<ExamManager>(eo, store_.get(), gate_.get(), exam_sessions_.get());
  FD_RETURN_IF_ERROR(exams_->Init());

  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(opts_.listen, *creds, &port);
  KeepAlive(builder);
  {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> counting;
    counting.push_back(RpcCountingInterceptors(counters_.get()));
    builder.experimental().SetInterceptorCreators(std::move(counting));
  }
  drill_ = std::make_unique<DrillService>(sessions_.get(), gate_.get(), exams_.get(), timeline_.get());
  builder.RegisterService(drill_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port == 0) {
    return Unavailable("cannot listen on " + opts_.listen + " (in use? another controller running? try --listen)");
  }
  const std::string host = opts_.listen.substr(0, opts_.listen.rfind(':'));
  const std::string dial_host = (host == "0.0.0.0" || host == "[::]" || host.empty()) ? "127.0.0.1" : host;
  bound_ = dial_host + ":" + std::to_string(port);

  if (!opts_.http_listen.empty()) FD_RETURN_IF_ERROR(StartHttp());
  std::ofstream(opts_.state_dir + "/controller.addr") << bound_ << "\n";
  spdlog::info("firedrill-controller listening on {} (agents on {}, state {})", bound_, agent_bound_,
               opts_.state_dir);
  return Status::Ok();
}

Status Server::StartHttp() {
  web_ =
      std::make_unique<WebService>(drill_.get(), sessions_.get(), pool_.get(), counters_.get(), exams_.get());
  web::HttpServerOptions ho;
  ho.listen = opts_.http_listen;
  http_ = std::make_unique<web::HttpServer>(
      ho, [w = web_.get()](const web::HttpRequest& req) { return w->Handle(req); });
  FD_RETURN_IF_ERROR(http_->Start());
  web_->SetServer(http_.get());
  http_bound_ = http_->address();
  const std::string host = http_bound_.substr(0, http_bound_.rfind(':'));
  if (host != "127.0.0.1" && host != "[::1]")
    spdlog::warn(
        "the HTTP side {} is plaintext: tokens and the login cookie cross the network readable; keep it "
        "on 127.0.0.1 or put a TLS proxy in front of it",
        http_bound_);
  std::ofstream(opts_.state_dir + "/http.addr") << http_bound_ << "\n";
  spdlog::info("http on {} (/metrics, /api/sessions)", http_bound_);
  return Status::Ok();
}

void Server::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  if (http_) http_->Stop();  // no request reaches a service being torn down
  if (!http_bound_.empty()) std::remove((opts_.state_dir + "/http.addr").c_str());
  if (exams_) exams_->Shutdown();        // no clock ends items while sessions stop
  if (sessions_) sessions_->Shutdown();  // every agent is gone after this
  fabric_.reset();                        // and so are their hosts
  if (pool_) pool_->CloseAll();
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(2);
  if (server_) server_->Shutdown(deadline);
  if (agent_server_) agent_server_->Shutdown(deadline);
  if (!bound_.empty()) std::remove((opts_.state_dir + "/controller.addr").c_str());
  if (agent_bound_.rfind("unix:", 0) == 0) std::remove(agent_bound_.substr(5).c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
  lock_fd_ = -1;
}

}  // namespace firedrill::controller
