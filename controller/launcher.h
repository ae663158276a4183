// Starts firedrill-agent processes on this machine (the embedded default) and
// makes sure none outlives its session or the controller: each agent runs in
// its own process group, gets SIGKILL if the controller dies
// (PR_SET_PDEATHSIG), and is reaped here; its exit is reported with how it
// ended ("killed by signal 9 (SIGKILL)").
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace firedrill::controller {

// Where an agent runs: this network namespace (the default), or a simulated
// host's (NetnsFabric), whose address its peers dial.
struct Placement {
  std::string netns_path;  // /run/netns/<ns>; empty: the controller's namespace
  std::string address;     // the host's address there (--advertise-host, --bind-host)
  std::string ifname;      // its own interface there (--link-ifname)
  std::vector<int> cpus;   // the CPUs the agent (and what it starts) may run on; empty: all
};

class Launcher {
 public:
  using ExitFn = std::function<void(const std::string& agent_id, pid_t pid, const std::string& how)>;

  Launcher(std::string agent_bin, std::string controller_addr, std::string log_dir, ExitFn on_exit);
  ~Launcher();  // kills every agent it started and reaps them

  // The agent gets `join_token` in FIREDRILL_JOIN_TOKEN (the environment,
  // not the command line, which every user can read in /proc). With a
  // namespace in `where`, the child joins it (setns) before exec: the agent
  // still reaches the controller on its unix socket, which a path names
  // whatever the network namespace.
  StatusOr<pid_t> Launch(const std::string& agent_id, const std::string& host, const std::string& join_token,
                         const Placement& where = {});
  // SIGKILL to the agent's process group; the exit is reported as usual.
  void Kill(const std::string& agent_id);
  void KillAll();
  bool Running(const std::string& agent_id);

 private:
  void Monitor();
  std::string agent_bin_, controller_addr_, log_dir_;
  ExitFn on_exit_;
  std::mutex mu_;
  std::map<std::string, pid_t> children_;  // agent_id -> pid
  std::atomic<bool> stop_{false};
  std::thread monitor_;
};

// "exited with code 3", "killed by signal 9 (SIGKILL)".
std::string DescribeWaitStatus(int status);

}  // namespace firedrill::controller
