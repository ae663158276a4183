// The multi-host rehearsal on one machine: the controller in the root
// namespace with --launcher remote, and five agents started in five network
// namespaces (as an operator starts them on five machines) that dial in over
// the bridge. A slow-link drill is played on them over real veth links: the
// p2p probe finds the bad host (its row and column slow, a ratio against
// the other pairs), and moving its rank to the idle fifth host passes
// verification. Skipped, with the reason, where namespaces are refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/stats.h"
#include "common/subprocess.h"
#include "controller/netns_fabric.h"
#include "tests/e2e/harness.h"

namespace firedrill::e2e {
namespace {

using controller::NetnsFabric;
using controller::NetnsHost;

// firedrill-agent inside `host`'s namespace, dialling the controller's agent
// port on the bridge; killed with the test.
pid_t StartAgentIn(const NetnsHost& host, const std::string& controller, const std::string& token_file,
                   const std::string& log) {
  const std::string bin = BinDir() + "/firedrill-agent";
  std::vector<std::string> args = {bin,           "--controller",     controller,   "--agent-id",   host.name + "-agent",
                                   "--host",      host.name,          "--advertise-host", host.address,
                                   "--bind-host", host.address,       "--link-ifname", host.ifname,
                                   "--join-token-file", token_file};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int ns = open(NetnsFabric::NetnsPath(host.netns).c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    if (setns(ns, CLONE_NEWNET) != 0) _exit(126);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  close(ns);
  return pid;
}

// Whether this kernel has ifb devices (what shapes a host's ingress): one is
// made and removed again inside `host`'s namespace.
bool IfbAvailable(const NetnsFabric& fabric, const std::string& host) {
  auto h = fabric.Host(host);
  if (!h.ok()) return false;
  auto made = RunCommand({"ip", "-n", h->netns, "link", "add", "fdifbprobe", "type", "ifb"});
  if (!made.ok() || made->exit_code != 0) return false;
  (void)RunCommand({"ip", "-n", h->netns, "link", "del", "fdifbprobe"});
  return true;
}

class RemoteNetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status ok = NetnsFabric::Available();
    if (!ok.ok()) GTEST_SKIP() << "network namespaces refused here: " << ok.message();
    dir_ = MakeTempDir();
    auto fabric = NetnsFabric::Create(dir_ + "/test-network.ledger");
    ASSERT_TRUE(fabric.ok()) << fabric.status().message();
    fabric_ = std::move(fabric).value();
  }
  void TearDown() override {
    ctl_.reset();
    for (pid_t p : agents_) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    fabric_.reset();
    std::error_code ec;
    if (!HasFailure() && !dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
  std::unique_ptr<NetnsFabric> fabric_;
  std::unique_ptr<ControllerProcess> ctl_;
  std::vector<pid_t> agents_;
};

TEST_F(RemoteNetnsTest, ASlowLinkDrillOverRealVethLinksBetweenFiveHosts) {
  const std::string token_file = dir_ + "/pool.token";
  std::ofstream(token_file) << "remote-netns-test-pool-token-0123456789\n";
  // Port 0: the controller takes a free one and says which (no window for
  // another process to take a port picked here).
  ctl_ = std::make_unique<ControllerProcess>(
      dir_, std::vector<std::string>{"--launcher", "remote", "--agent-listen", fabric_->gateway() + ":0",
                                     "--pool-token-file", token_file});
  ASSERT_TRUE(ctl_->ok()) << "see " << dir_ << "/controller.log";
  std::string agent_addr;
  std::getline(std::ifstream(dir_ + "/agent-listen.addr"), agent_addr);
  ASSERT_EQ(agent_addr.rfind(fabric_->gateway() + ":", 0), 0u) << "agent-listen.addr: '" << agent_addr << "'";
  ASSERT_NE(agent_addr, fabric_->gateway() + ":0");
  std::map<std::string, std::string> address;  // host -> its eth0 address
  for (int i = 0; i < 5; ++i) {
    auto h = fabric_->AddHost("node-" + std::to_string(i));
    ASSERT_TRUE(h.ok()) << h.status().message();
    address[h->name] = h->address;
    const pid_t pid = StartAgentIn(*h, agent_addr, token_file, dir_ + "/" + h->name + ".log");
    ASSERT_GT(pid, 0);
    agents_.push_back(pid);
  }
  cli::DrillClient& c = ctl_->client();
  // The agents register in their own time: a session needs four of them.
  StatusOr<v1::SessionInfo> info = Unavailable("not started");
  for (int i = 0; i < 60 && !info.ok(); ++i) {
    info = StartRunning(c, "allreduce-slowdown", 4242);
    if (!info.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_TRUE(info.ok()) << info.status().message() << "; agent logs in " << dir_;
  const std::string id = info->session_id();
  auto st = c.GetStatus(id);
  ASSERT_TRUE(st.ok());
  std::vector<std::string> hosts;
  for (const auto& r : st->ranks()) hosts.push_back(r.host());
  ASSERT_EQ(hosts.size(), 4u);
  for (const auto& h : hosts) EXPECT_TRUE(address.count(h)) << h << " is not one of the namespaces";

  // The job must be stepping for a probe to run between its steps.
  auto stepping = WaitUntil(
      c, id, [](const v1::SessionStatus& s) { return s.run().state() == "running" && s.run().steps_done() > 5; }, 60);
  ASSERT_TRUE(stepping.ok()) << stepping.status().message();
  // The learner's way in: the p2p matrix. The bad host's row and column are
  // slow; every pair that avoids it is not.
  v1::RunProbeRequest p2p;
  p2p.set_session_id(id);
  p2p.mutable_spec()->set_op("p2p");
  auto probe = c.RunProbe(p2p);
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  std::vector<double> touching(4, 0);
  std::vector<int> count(4, 0);
  for (const auto& p : probe->pairs()) {
    for (int r : {p.src(), p.dst()}) {
      touching[r] += p.bw_gbps();
      ++count[r];
    }
  }
  int bad = 0;
  for (int r = 0; r < 4; ++r) {
    touching[r] /= std::max(1, count[r]);
    if (touching[r] < touching[bad]) bad = r;
  }
  // Shaping what the bad host receives needs an ifb device; a kernel
  // without one caps its egress alone, and only the pairs it sends on slow.
  const bool ingress = IfbAvailable(*fabric_, address.begin()->first);
  RecordProperty("ingress_shaped", ingress ? "yes" : "no (no ifb in this kernel)");
  std::vector<double> with_bad, without;
  for (const auto& p : probe->pairs()) {
    const bool involves = p.src() == bad || (ingress && p.dst() == bad);
    if (!involves && p.dst() == bad) continue;  // egress only: unshaped, but not a pair that avoids it
    (involves ? with_bad : without).push_back(p.bw_gbps());
  }
  ASSERT_EQ(with_bad.size(), ingress ? 6u : 3u);
  ASSERT_EQ(without.size(), 6u);
  RecordProperty("bad_pairs_over_others", std::to_string(Median(with_bad) / Median(without)));
  EXPECT_LT(*std::max_element(with_bad.begin(), with_bad.end()), 0.5 * Median(without))
      << "rank " << bad << "'s row and column, both ways, against the pairs that avoid it";

  v1::SubmitDiagnosisRequest d;
  d.set_session_id(id);
  d.set_cause("slow-link");
  d.add_culprit_ranks(bad);
  ASSERT_TRUE(c.SubmitDiagnosis(d).ok());
  v1::ApplyFixRequest fix;
  fix.set_session_id(id);
  fix.add_replace_host_ranks(bad);
  auto score = FixAndScore(c, fix);
  ASSERT_TRUE(score.ok()) << score.status().message();
  EXPECT_TRUE(score->verification().passed()) << score->verification().detail();
  ASSERT_EQ(score->answer_culprit_ranks_size(), 1);
  EXPECT_EQ(score->answer_culprit_ranks(0), bad);
  auto after = c.GetStatus(id);
  ASSERT_TRUE(after.ok());
  const std::string moved_to = after->ranks(bad).host();
  EXPECT_TRUE(address.count(moved_to)) << moved_to;
  EXPECT_EQ(std::count(hosts.begin(), hosts.end(), moved_to), 0) << "the rank moved to the idle fifth host";
  EXPECT_TRUE(c.EndSession(id, std::chrono::seconds(60)).ok());
}

}  // namespace
}  // namespace firedrill::e2e
