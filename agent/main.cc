// firedrill-agent: one process per rank. Thin: flags, then AgentClient.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <fstream>

#include "agent/agent_client.h"
#include "common/log.h"
#include "common/paths.h"

int main(int argc, char** argv) {
  using namespace firedrill;
  agent::AgentOptions opts;
  opts.controller = DefaultControllerAddress();
  char hostname[256] = {0};
  gethostname(hostname, sizeof(hostname) - 1);
  opts.host = hostname;
  opts.agent_id = std::string(hostname) + "-" + std::to_string(getpid());

  CLI::App app{"firedrill-agent: runs one rank of a firedrill training job for a controller"};
  app.add_option("--controller", opts.controller, "controller address host:port")->capture_default_str();
  app.add_option("--agent-id", opts.agent_id, "unique id of this agent")->capture_default_str();
  app.add_option("--host", opts.host, "host name this agent reports (hardware faults follow it)")
      ->capture_default_str();
  app.add_option("--advertise-host", opts.advertise_host, "address peers use to reach this agent")
      ->capture_default_str();
  app.add_option("--bind-host", opts.bind_host, "address rank 0's own store client connects to")->capture_default_str();
  app.add_option("--link-ifname", opts.link_ifname,
                 "this host's own network interface (in its namespace): a slow link is a tc rate limit on it");
  app.add_option("--connect-timeout", opts.connect_timeout_s, "seconds to wait for the controller")
      ->capture_default_str();
  app.add_flag("--exit-on-disconnect", opts.exit_on_disconnect, "exit as soon as the controller stream ends");
  std::string token_file;
  app.add_option("--join-token-file", token_file,
                 "file holding the pool token the controller's --pool-token-file names (remote agents); "
                 "agents the controller launches get theirs in FIREDRILL_JOIN_TOKEN");
  CLI11_PARSE(app, argc, argv);
  if (const char* t = std::getenv("FIREDRILL_JOIN_TOKEN"); t && *t) opts.join_token = t;
  // Not left in the environment of anything this process starts.
  unsetenv("FIREDRILL_JOIN_TOKEN");
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    std::getline(in, opts.join_token);
    if (!in && opts.join_token.empty()) {
      std::fprintf(stderr, "firedrill-agent: cannot read --join-token-file %s\n", token_file.c_str());
      return 2;
    }
  }

  InitLogging("agent " + opts.agent_id);
  signal(SIGPIPE, SIG_IGN);
  agent::AgentClient client(opts);
  return client.Run();
}
