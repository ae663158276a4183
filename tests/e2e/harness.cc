#include "tests/e2e/harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "analysis/straggler.h"
#include "cli/commands.h"
#include "cli/demo.h"
#include "controller/netns_fabric.h"

namespace firedrill::e2e {

std::string BinDir() { return FIREDRILL_BIN_DIR; }

std::string MakeTempDir() {
  char tmpl[] = "/tmp/firedrill-e2e-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

bool ProcessAlive(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return false;
  // A zombie is dead for our purposes.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

ControllerProcess::ControllerProcess(std::string state_dir, std::vector<std::string> extra)
    : state_dir_(std::move(state_dir)) {
  const std::string bin = BinDir() + "/firedrill-controller";
  const std::string log = state_dir_ + "/controller.log";
  std::remove((state_dir_ + "/controller.addr").c_str());
  std::vector<std::string> args = {bin, "--listen", "127.0.0.1:0", "--state-dir", state_dir_,
                                   "--scenarios", FIREDRILL_SOURCE_DIR "/scenarios"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    // Only async-signal-safe calls: this process has gRPC threads.
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) dup2(fd, 2);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  for (int i = 0; i < 200 && address_.empty(); ++i) {
    std::ifstream in(state_dir_ + "/controller.addr");
    std::getline(in, address_);
    if (address_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!address_.empty()) {
    // The owner token is written before the address: the test is the owner.
    client_ = std::make_unique<cli::DrillClient>(address_, std::chrono::seconds(30));
    client_->SetToken(cli::ReadOwnerToken(state_dir_));
  }
}

ControllerProcess::~ControllerProcess() {
  if (pid_ > 0) Terminate();
}

void ControllerProcess::Kill9() {
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int ControllerProcess::Terminate() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 300; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  ADD_FAILURE() << "the controller did not stop within 15 s of SIGTERM; see " << state_dir_ << "/controller.log";
  (void)controller::NetnsFabric::CleanLeftovers(state_dir_ + "/network.ledger", nullptr);
  return status;
}

void ControllerTest::SetUp() {
  dir_ = MakeTempDir();
  ctl_ = std::make_unique<ControllerProcess>(dir_);
  ASSERT_TRUE(ctl_->ok()) << "controller did not start; see " << dir_ << "/controller.log";
}

void ControllerTest::TearDown() {
  ctl_.reset();
  std::error_code ec;
  if (!HasFailure()) std::filesystem::remove_all(dir_, ec);
}

StatusOr<v1::SessionInfo> StartRunning(cli::DrillClient& c, const std::string& scenario, int64_t seed) {
  auto info = c.StartSession(scenario, seed);
  if (!info.ok()) return info.status();
  auto st = WaitUntil(
      c, info->session_id(), [](const v1::SessionStatus& s) { return s.session().state() != "created" && s.session().state() != "baseline"; },
      180);
  if (!st.ok()) return st.status();
  if (st->session().state() != "running") return Aborted("session ended up " + st->session().state());
  return *info;
}

int WatchForStraggler(cli::DrillClient& c, const std::string& id, int timeout_s) {
  int last = -1, streak = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline && streak < 4) {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    auto st = c.GetStatus(id);
    if (!st.ok()) return -1;
    const int r = analysis::FindStraggler(*st, 1.5, nullptr);
    streak = (r >= 0 && r == last) ? streak + 1 : (r >= 0 ? 1 : 0);
    last = r;
  }
  return streak >= 4 ? last : -1;
}

StatusOr<v1::ScoreReport> FixAndScore(cli::DrillClient& c, const v1::ApplyFixRequest& fix) {
  auto f = c.ApplyFix(fix);
  if (!f.ok()) return f.status();
  auto st = WaitUntil(
      c, fix.session_id(),
      [](const v1::SessionStatus& s) {
        const std::string& state = s.session().state();
        return state == "scored" || state == "ended" || state == "aborted";
      },
      300);
  if (!st.ok()) return st.status();
  return c.GetScore(fix.session_id());
}

}  // namespace firedrill::e2e
