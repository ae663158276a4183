// Runs a real firedrill-controller (which launches real agents) in a temp
// state dir on a free port, and drives it through the public Drill API.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/client.h"

namespace firedrill::e2e {

std::string BinDir();
std::string MakeTempDir();
bool ProcessAlive(int pid);
// A TCP port free on loopback just now.
int FreePort();

class ControllerProcess {
 public:
  // Starts the controller with --listen 127.0.0.1:0 on `state_dir`, and
  // `extra` flags.
  explicit ControllerProcess(std::string state_dir, std::vector<std::string> extra = {});
  ~ControllerProcess();  // SIGTERM, then SIGKILL
  bool ok() const { return pid_ > 0 && !address_.empty(); }
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  cli::DrillClient& client() { return *client_; }
  void Kill9();  // crash it: no shutdown path runs
  int Terminate();  // SIGTERM and wait; returns the exit status

 private:
  std::string state_dir_;
  pid_t pid_ = -1;
  std::string address_;
  std::unique_ptr<cli::DrillClient> client_;
};

// A test with its own controller in a fresh state dir (kept when the test
// fails, for its logs).
class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  cli::DrillClient& c() { return ctl_->client(); }
  std::string dir_;
  std::unique_ptr<ControllerProcess> ctl_;
};

// Polls GetStatus until `pred` holds or `timeout_s` passes.
template <typename Pred>
StatusOr<v1::SessionStatus> WaitUntil(cli::DrillClient& c, const std::string& id, Pred pred, int timeout_s);

// Starts a session and waits for the running state.
StatusOr<v1::SessionInfo> StartRunning(cli::DrillClient& c, const std::string& scenario, int64_t seed);
// Watches the running job until the telemetry shows one rank as a straggler
// on several consecutive looks; returns it (or -1).
int WatchForStraggler(cli::DrillClient& c, const std::string& id, int timeout_s);
// Applies a fix and waits for the score.
StatusOr<v1::ScoreReport> FixAndScore(cli::DrillClient& c, const v1::ApplyFixRequest& fix);

}  // namespace firedrill::e2e

#include <chrono>
#include <thread>

namespace firedrill::e2e {
template <typename Pred>
StatusOr<v1::SessionStatus> WaitUntil(cli::DrillClient& c, const std::string& id, Pred pred, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (true) {
    auto st = c.GetStatus(id);
    if (!st.ok()) return st.status();
    if (pred(*st)) return st;
    if (std::chrono::steady_clock::now() > deadline) {
      return DeadlineExceeded("condition not met in " + std::to_string(timeout_s) + " s; state " +
                              st->session().state());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}
}  // namespace firedrill::e2e
