#include "common/subprocess.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace firedrill {

std::string CommandLine(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv) {
  if (argv.empty()) return InvalidArgument("RunCommand: no command");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + std::strerror(errno));
  // Built before fork: the child of a multi-threaded process may only make
  // async-signal-safe calls.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  CommandResult r;
  char buf[4096];
  for (;;) {
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
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  while (!r.output.empty() && (r.output.back() == '\n' || r.output.back() == ' ')) r.output.pop_back();
  if (r.exit_code == 127 && r.output.empty())
    return NotFound("`" + argv[0] + "` could not be run (not installed, or not on PATH)");
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
