// firedrill-controller: the long-lived server. Thin: flags, signals, Server.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/paths.h"
#include "controller/server.h"

int main(int argc, char** argv) {
  using namespace firedrill;
  controller::ServerOptions opts;
  opts.state_dir = DefaultStateDir();
  std::string scenario_dir = DefaultScenarioDir();
  std::vector<std::string> extra_dirs;
  opts.agent_bin = ExecutableDir() + "/firedrill-agent";
  opts.listen = DefaultControllerAddress();
  std::string launcher = "local";

  CLI::App app{"firedrill-controller: runs drills, their agents and the learner-facing Drill API"};
  app.add_option("--listen", opts.listen, "host:port to serve gRPC on (port 0 = any free port)")->capture_default_str();
  app.add_option("--state-dir", opts.state_dir, "database, logs and pid file")->capture_default_str();
  app.add_option("--scenarios", scenario_dir, "the scenario catalogue (a directory of YAML files)")
      ->capture_default_str();
  app.add_option("--add-scenarios", extra_dirs, "more scenario directories beside the catalogue (repeatable)");
  app.add_option("--agent-bin", opts.agent_bin, "firedrill-agent executable (local launcher)")->capture_default_str();
  app.add_option("--launcher", launcher, "local: spawn agents here; remote: use agents that register")
      ->check(CLI::IsMember({"local", "remote"}))
      ->capture_default_str();
  app.add_option("--agent-listen", opts.agent_listen,
                 "host:port where remote agents register (needs --pool-token-file; port 0: a free one, written "
                 "to <state-dir>/agent-listen.addr); local agents use a Unix socket in the state dir");
  app.add_option("--pool-token-file", opts.pool_token_file, "file whose first line is the token remote agents present");
  app.add_option("--tls-cert", opts.tls_cert,
                 "TLS on the public listener: the server certificate chain (PEM)");
  app.add_option("--tls-key", opts.tls_key,
                 "TLS on the public listener: the certificate's private key (PEM)");
  app.add_option("--http-listen", opts.http_listen,
                 "host:port for the HTTP side: /metrics (Prometheus) and the dashboard's API (port 0: a free "
                 "one, written to <state-dir>/http.addr); off when not given");
  app.add_option(
         "--exam-minute-ms", opts.exam_minute_ms,
         "how long an exam minute lasts (tests of the exam clock shorten it; the default is real time)")
      ->check(CLI::Range(int64_t{10}, int64_t{3600000}))
      ->capture_default_str();
  app.add_option("--hosts", opts.hosts,
                 "simulated hosts: netns (a network namespace each, real TCP over veth links), loopback (one "
                 "namespace), or auto (netns where this machine allows it)")
      ->check(CLI::IsMember({"auto", "netns", "loopback"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  opts.local_launcher = launcher == "local";
  opts.scenario_dirs.push_back(scenario_dir);
  opts.scenario_dirs.insert(opts.scenario_dirs.end(), extra_dirs.begin(), extra_dirs.end());

  InitLogging("controller");
  // Signals are taken synchronously in main; every other thread blocks them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  controller::Server server(opts);
  if (Status st = server.Start(); !st.ok()) {
    spdlog::error("cannot start: {}", st.message());
    std::fprintf(stderr, "firedrill-controller: %s\n", st.message().c_str());
    return 1;
  }
  const std::string pid_file = opts.state_dir + "/controller.pid";
  std::ofstream(pid_file) << getpid() << "\n";

  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("signal {}: shutting down", sig);
  server.Shutdown();
  std::remove(pid_file.c_str());
  spdlog::info("stopped");
  return 0;
}
