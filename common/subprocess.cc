#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace firedrill {

std::string CommandLine(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

std::string SystemTool(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  for (const char* dir : {"/usr/sbin/", "/usr/bin/", "/sbin/", "/bin/"}) {
    const std::string p = dir + name;
    struct stat st {};
    if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & S_IXUSR)) return p;
  }
  return "";
}

StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv) { return RunCommand(argv, RunLimits{}); }

StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, const RunLimits& limits) {
  if (argv.empty()) return InvalidArgument("RunCommand: no command");
  const bool bounded = limits.limit.count() > 0 || static_cast<bool>(limits.cancelled);
  const std::string path = SystemTool(argv[0]);
  if (path.empty())
    return NotFound("`" + argv[0] + "` is not installed (looked in /usr/sbin, /usr/bin, /sbin, /bin)");
  // Built before fork: the child of a multi-threaded process may only make
  // async-signal-safe calls. Messages in C: callers match on them.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_store;
  // What the caller sets replaces what this process has (getenv takes the
  // first of a name).
  auto overridden = [&](const char* e) {
    for (const auto& mine : limits.env) {
      const size_t eq = mine.find('=');
      if (eq != std::string::npos && std::strncmp(e, mine.c_str(), eq + 1) == 0) return true;
    }
    return false;
  };
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "LC_ALL=", 7) != 0 && std::strncmp(*e, "LANG=", 5) != 0 && !overridden(*e))
      env_store.emplace_back(*e);
  env_store.emplace_back("LC_ALL=C");
  for (const auto& e : limits.env) env_store.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    if (bounded) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
    }
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execve(path.c_str(), args.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  if (bounded) setpgid(pid, pid);  // also from here, so the group exists before any kill
  CommandResult r;
  const auto deadline = std::chrono::steady_clock::now() + limits.limit;
  bool killed = false;
  char buf[4096];
  for (;;) {
    if (bounded && !killed) {
      // Until its output ends (its whole group holds the pipe), checking the
      // clock and the caller between reads.
      pollfd p{fds[0], POLLIN, 0};
      const int ready = poll(&p, 1, 100);
      if (ready < 0 && errno != EINTR) {
        kill(-pid, SIGKILL);  // not waited for blind
        killed = true;
        continue;
      }
      r.timed_out = limits.limit.count() > 0 && std::chrono::steady_clock::now() >= deadline;
      r.cancelled = !r.timed_out && limits.cancelled && limits.cancelled();
      if (r.timed_out || r.cancelled) {
        kill(-pid, SIGKILL);
        killed = true;
        continue;
      }
      if (ready <= 0) continue;
    }
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) {
      if (r.output.size() < (1 << 20)) r.output.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  close(fds[0]);
  int status = 0;
  pid_t got;
  while ((got = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (got != pid) return Internal("waiting for `" + CommandLine(argv) + "`: " + std::strerror(errno));
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  while (!r.output.empty() && (r.output.back() == '\n' || r.output.back() == ' ')) r.output.pop_back();
  return r;
}

Status RunChecked(const std::vector<std::string>& argv) {
  auto r = RunCommand(argv);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0)
    return Internal("`" + CommandLine(argv) + "` failed (exit " + std::to_string(r->exit_code) + ")" +
                    (r->output.empty() ? "" : ": " + r->output));
  return Status::Ok();
}

}  // namespace firedrill
