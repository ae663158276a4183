// firedrill-controller: the long-lived server. Thin: flags, signals, Server.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fstream>

#include "common/log.h"
#include "common/paths.h"
#include "controller/server.h"

int main(int argc, char** argv) {
  using namespace firedrill;
  controller::ServerOptions opts;
  opts.state_dir = DefaultStateDir();
  opts.scenario_dir = DefaultScenarioDir();
  opts.agent_bin = ExecutableDir() + "/firedrill-agent";
  opts.listen = DefaultControllerAddress();
  std::string launcher = "local";

  CLI::App app{"firedrill-controller: runs drills, their agents and the learner-facing Drill API"};
  app.add_option("--listen", opts.listen, "host:port to serve gRPC on (port 0 = any free port)")->capture_default_str();
  app.add_option("--state-dir", opts.state_dir, "database, logs and pid file")->capture_default_str();
  app.add_option("--scenarios", opts.scenario_dir, "directory of scenario YAML files")->capture_default_str();
  app.add_option("--agent-bin", opts.agent_bin, "firedrill-agent executable (local launcher)")->capture_default_str();
  app.add_option("--launcher", launcher, "local: spawn agents here; remote: use agents that register")
      ->check(CLI::IsMember({"local", "remote"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  opts.local_launcher = launcher == "local";

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
