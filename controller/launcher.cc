#include "controller/launcher.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "common/paths.h"

namespace firedrill::controller {

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) + (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
  }
  return "ended (wait status " + std::to_string(status) + ")";
}

Launcher::Launcher(std::string agent_bin, std::string controller_addr, std::string log_dir, ExitFn on_exit)
    : agent_bin_(std::move(agent_bin)),
      controller_addr_(std::move(controller_addr)),
      log_dir_(std::move(log_dir)),
      on_exit_(std::move(on_exit)),
      monitor_([this] { Monitor(); }) {}

Launcher::~Launcher() {
  KillAll();
  // Give the monitor a moment to reap what was killed, then stop it.
  for (int i = 0; i < 40; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (children_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  stop_ = true;
  monitor_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, pid] : children_) waitpid(pid, nullptr, 0);
}

StatusOr<pid_t> Launcher::Launch(const std::string& agent_id, const std::string& host,
                                 const std::string& join_token, const Placement& where) {
  std::string err;
  if (!MakePrivateDir(log_dir_, &err)) return Internal(err);
  const std::string log_path = log_dir_ + "/" + agent_id + ".log";
  std::vector<std::string> args = {agent_bin_, "--controller", controller_addr_, "--agent-id", agent_id,
                                   "--host",   host,       "--exit-on-disconnect"};
  if (!where.netns_path.empty()) {
    if (controller_addr_.rfind("unix:", 0) != 0)
      return FailedPrecondition("an agent in namespace " + where.netns_path +
                                " needs the controller's unix socket, not " + controller_addr_);
    args.insert(args.end(),
                {"--advertise-host", where.address, "--bind-host", where.address, "--link-ifname", where.ifname});
  }
  // Opened here, so that a missing namespace is the parent's error to
  // report; joined in the child.
  struct Fd {
    int fd = -1;
    ~Fd() {
      if (fd >= 0) close(fd);
    }
  } netns;
  if (!where.netns_path.empty()) {
    netns.fd = open(where.netns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (netns.fd < 0)
      return Unavailable("host " + host + ": cannot open " + where.netns_path + ": " + std::strerror(errno));
  }
  static constexpr char kSetnsFailed[] = "firedrill-agent: could not join the host's network namespace (setns)\n";
  static constexpr char kAffinityFailed[] =
      "firedrill-agent: could not pin to the host's CPUs (sched_setaffinity)\n";
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The environment is built before fork: the child of a multi-threaded
  // process may only make async-signal-safe calls, and setenv allocates.
  // One BLAS/OpenMP thread per rank unless told otherwise: several ranks
  // share the cores, and oversubscription wrecks step times.
  std::vector<std::string> env_store;
  bool has_omp = false;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("FIREDRILL_JOIN_TOKEN=", 0) == 0) continue;
    env_store.push_back(kv);
    has_omp = has_omp || kv.rfind("OMP_NUM_THREADS=", 0) == 0;
  }
  if (!has_omp) env_store.emplace_back("OMP_NUM_THREADS=1");
  env_store.push_back("FIREDRILL_JOIN_TOKEN=" + join_token);
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : where.cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &cpus);

  std::lock_guard<std::mutex> lock(mu_);
  const pid_t pid = fork();
  if (pid < 0) return Internal(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);  // the controller died before prctl
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    if (netns.fd >= 0 && setns(netns.fd, CLONE_NEWNET) != 0) {
      (void)!write(2, kSetnsFailed, sizeof kSetnsFailed - 1);
      _exit(126);
    }
    // The host's cores: inherited by the trainer processes the agent starts.
    if (!where.cpus.empty() && sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
      (void)!write(2, kAffinityFailed, sizeof kAffinityFailed - 1);
      _exit(126);
    }
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execve(agent_bin_.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so the group exists before any kill
  children_[agent_id] = pid;
  spdlog::info("launched agent {} (host {}{}, pid {}), log {}", agent_id, host,
               where.netns_path.empty() ? "" : " at " + where.address + " in " + where.netns_path, pid, log_path);
  return pid;
}

void Launcher::Kill(const std::string& agent_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(agent_id);
  if (it != children_.end()) kill(-it->second, SIGKILL);
}

void Launcher::KillAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, pid] : children_) kill(-pid, SIGKILL);
}

bool Launcher::Running(const std::string& agent_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return children_.count(agent_id) > 0;
}

void Launcher::Monitor() {
  while (!stop_) {
    std::vector<std::tuple<std::string, pid_t, int>> exited;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = children_.begin(); it != children_.end();) {
        int status = 0;
        if (waitpid(it->second, &status, WNOHANG) == it->second) {
          exited.emplace_back(it->first, it->second, status);
          kill(-it->second, SIGKILL);  // anything the agent left in its group
          it = children_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& [id, pid, status] : exited) {
      const std::string how = DescribeWaitStatus(status);
      spdlog::info("agent {} (pid {}) {}", id, pid, how);
      if (on_exit_) on_exit_(id, pid, how);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace firedrill::controller
