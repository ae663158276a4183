#include "bench/bench_controller.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/paths.h"

namespace firedrill::bench {

BenchController::BenchController(const std::string& scenarios, const std::vector<std::string>& extra) {
  char tmpl[] = "/tmp/fd-bench-XXXXXX";
  if (!mkdtemp(tmpl)) return;
  dir_ = tmpl;
  const std::string bin = ExecutableDir() + "/firedrill-controller";
  std::vector<std::string> args = {bin, "--listen", "127.0.0.1:0", "--state-dir", dir_, "--scenarios", scenarios};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = dir_ + "/controller.log";
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) dup2(fd, 2);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  for (int i = 0; i < 400 && addr_.empty(); ++i) {
    std::ifstream in(dir_ + "/controller.addr");
    std::getline(in, addr_);
    if (addr_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string BenchController::hosts_mode() const {
  std::ifstream in(dir_ + "/controller.log");
  for (std::string line; std::getline(in, line);)
    if (line.find("hosts: a network namespace each") != std::string::npos) return "netns";
  return "loopback";
}

BenchController::~BenchController() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

}  // namespace firedrill::bench
