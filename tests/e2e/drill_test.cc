// Whole drills through the controller's public gRPC API, with real agent
// processes, real Gloo collectives and a real straggler.
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "tests/e2e/harness.h"

namespace firedrill::e2e {
namespace {

constexpr char kScenario[] = "throughput-halved";

const v1::ScoreItem* Item(const v1::ScoreReport& r, const std::string& name) {
  for (const auto& it : r.items()) {
    if (it.name() == name) return &it;
  }
  return nullptr;
}

std::vector<int> AgentPids(const v1::SessionStatus& st) {
  std::vector<int> pids;
  for (const auto& r : st.ranks()) {
    if (r.pid() > 0) pids.push_back(r.pid());
  }
  return pids;
}

bool AllDead(const std::vector<int>& pids, int wait_s) {
  for (int i = 0; i < wait_s * 10; ++i) {
    bool any = false;
    for (int p : pids) any = any || ProcessAlive(p);
    if (!any) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

class DrillTest : public ControllerTest {
 protected:
  // Starts a drill and finds the straggler from telemetry, as a learner would.
  std::pair<std::string, int> StartAndFindStraggler(int64_t seed) {
    auto info = StartRunning(c(), kScenario, seed);
    EXPECT_TRUE(info.ok()) << info.status().message();
    if (!info.ok()) return {"", -1};
    const int culprit = WatchForStraggler(c(), info->session_id(), 90);
    EXPECT_GE(culprit, 0) << "no rank stood out in the telemetry";
    return {info->session_id(), culprit};
  }
};

// The right diagnosis and fix, verified and scored, and the score outliving
// a controller crash: AttackerTest.TheScoreBeforeScoringIsNoOracleAndGuessesArePriced
// plays that session to its end.

// One session, the ways to get a drill wrong without fixing it: a bare fix
// is refused (and the session keeps its one fix); the right cause on the
// wrong rank earns no culprit points; and "nothing needs changing", said
// explicitly on a drill with a fault, fails verification (the answer that
// scores on the no-fault control must not score here). A healthy host
// replaced instead is grading_reliability's wrong fix for this drill.
TEST_F(DrillTest, AnEmptyFixIsRefusedAndTheWrongRankWithNoChangeEarnsNeitherCulpritNorFix) {
  auto [id, culprit] = StartAndFindStraggler(202);
  ASSERT_GE(culprit, 0);
  v1::ApplyFixRequest fix;  // "restart it as it is", without saying so
  fix.set_session_id(id);
  auto refused = c().ApplyFix(fix);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--no-change"), std::string::npos) << refused.status().message();
  auto st = c().GetStatus(id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->session().state(), "running") << "a refused fix must not use up the session's fix";

  v1::SubmitDiagnosisRequest d;
  d.set_session_id(id);
  d.set_cause("straggler");
  d.add_culprit_ranks((culprit + 1) % 4);
  ASSERT_TRUE(c().SubmitDiagnosis(d).ok());
  fix.set_no_change(true);  // said explicitly: nothing needs changing
  auto score = FixAndScore(c(), fix);
  ASSERT_TRUE(score.ok()) << score.status().message();
  EXPECT_TRUE(score->final());
  EXPECT_EQ(Item(*score, "cause")->points(), 40);
  EXPECT_EQ(Item(*score, "culprit")->points(), 0);
  EXPECT_FALSE(score->verification().passed()) << score->verification().detail();
  EXPECT_EQ(Item(*score, "fix")->points(), 0);
}

TEST_F(DrillTest, AKilledAgentIsReportedAndTheLauncherRestartsTheJob) {
  auto info = StartRunning(c(), kScenario, 404);
  ASSERT_TRUE(info.ok()) << info.status().message();
  const std::string id = info->session_id();
  auto st = WaitUntil(c(), id, [](const v1::SessionStatus& s) { return s.run().steps_done() >= 10; }, 60);
  ASSERT_TRUE(st.ok());
  const std::vector<int> pids = AgentPids(*st);
  ASSERT_EQ(pids.size(), 4u);
  ASSERT_EQ(kill(st->ranks(1).pid(), SIGKILL), 0);

  // The lost rank is named, the survivors fail out of their collective
  // instead of hanging in it, and the job's launcher (elastic.max_restarts)
  // starts the whole job again on fresh processes, as torchrun would.
  auto count = [](const v1::SessionStatus& s, const std::string& kind, int rank) {
    int n = 0;
    for (const auto& e : s.events()) n += e.kind() == kind && (rank < 0 || e.rank() == rank) ? 1 : 0;
    return n;
  };
  auto after = WaitUntil(
      c(), id,
      [&](const v1::SessionStatus& s) {
        if (count(s, "job_restarted", -1) == 0) return false;
        for (const auto& r : s.ranks())
          if (r.state() != "running") return false;
        return s.run().steps_done() > 0;
      },
      60);
  ASSERT_TRUE(after.ok()) << after.status().message();
  EXPECT_EQ(count(*after, "rank_lost", 1), 1);
  EXPECT_GE(count(*after, "rank_failed", -1), 1) << "a survivor failed out of the all-reduce";
  for (const auto& e : after->events())
    if (e.kind() == "job_restarted") EXPECT_NE(e.message().find("restart 1 of 3 (elastic.max_restarts) after rank 1"), std::string::npos) << e.message();
  // The lost host's agent is a new process; the others' agents (each a
  // node's, as torchrun's elastic agent is) run the job again themselves.
  const std::vector<int> now = AgentPids(*after);
  ASSERT_EQ(now.size(), 4u);
  EXPECT_NE(now[1], pids[1]);
  for (int r : {0, 2, 3}) EXPECT_EQ(now[r], pids[r]) << "rank " << r;
  std::vector<int> all = pids;
  all.insert(all.end(), now.begin(), now.end());
  EXPECT_EQ(after->run().state(), "running");

  auto ended = c().EndSession(id, std::chrono::seconds(60));
  ASSERT_TRUE(ended.ok()) << ended.status().message();
  EXPECT_EQ(ended->state(), "ended") << "a deliberate end is not a crash";
  EXPECT_TRUE(AllDead(all, 10));
}

TEST_F(DrillTest, ControllerCrashTakesItsAgentsAndTheSessionIsAbortedAfterRestart) {
  auto info = StartRunning(c(), kScenario, 505);
  ASSERT_TRUE(info.ok()) << info.status().message();
  auto st = c().GetStatus(info->session_id());
  ASSERT_TRUE(st.ok());
  const std::vector<int> pids = AgentPids(*st);
  ASSERT_EQ(pids.size(), 4u);
  // The hosts' namespaces, where the machine allows them: the crash leaves
  // them, the next controller on this state removes them.
  std::vector<std::string> namespaces;
  {
    std::ifstream ledger(dir_ + "/network.ledger");
    std::string kind, name;
    while (ledger >> kind >> name)
      if (kind == "netns") namespaces.push_back(name);
  }
  if (!namespaces.empty()) {
    // Each host's agent runs in its host's namespace, none in ours.
    std::set<std::string> seen;
    for (int pid : pids) {
      std::error_code ec;
      const auto ns = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/ns/net", ec);
      ASSERT_FALSE(ec) << "pid " << pid << ": " << ec.message();
      seen.insert(ns.string());
    }
    EXPECT_EQ(seen.size(), 4u) << "four hosts, four network namespaces";
    EXPECT_EQ(seen.count(std::filesystem::read_symlink("/proc/self/ns/net").string()), 0u);
  }
  ctl_->Kill9();
  EXPECT_TRUE(AllDead(pids, 10)) << "agents outlived their controller";
  for (const auto& ns : namespaces)
    EXPECT_TRUE(std::filesystem::exists("/run/netns/" + ns)) << ns << ": a crash cannot clean up";
  ctl_ = std::make_unique<ControllerProcess>(dir_);
  ASSERT_TRUE(ctl_->ok());
  for (const auto& ns : namespaces)
    EXPECT_FALSE(std::filesystem::exists("/run/netns/" + ns)) << ns << " outlived the restart";
  RecordProperty("host_namespaces", std::to_string(namespaces.size()));
  auto sessions = c().ListSessions();
  ASSERT_TRUE(sessions.ok());
  ASSERT_EQ(sessions->sessions_size(), 1);
  EXPECT_EQ(sessions->sessions(0).state(), "aborted");
}

// No process of ours mentions the state dir any more.
std::vector<int> ProcessesMentioning(const std::string& needle) {
  std::vector<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline");
    std::stringstream ss;
    ss << in.rdbuf();
    const int pid = std::stoi(name);
    if (ss.str().find(needle) != std::string::npos && pid != getpid() && ProcessAlive(pid)) out.push_back(pid);
  }
  return out;
}

TEST(CliLifecycle, UpStartEndDownLeavesNoFiredrillProcess) {
  const std::string dir = MakeTempDir();
  // `up` remembers what it started in the user's config dir: not the real one.
  setenv("XDG_CONFIG_HOME", (dir + "/config").c_str(), 1);
  const std::string addr = "127.0.0.1:" + std::to_string(FreePort());
  auto run = [&](std::vector<std::string> args) {
    std::vector<std::string> full = {"firedrill", "--controller", addr, "--state-dir", dir};
    full.insert(full.end(), args.begin(), args.end());
    std::ostringstream out, err;
    const int rc = cli::RunCli(full, out, err);
    EXPECT_EQ(rc, 0) << "firedrill " << args[0] << ": " << err.str();
    return out.str();
  };
  // The HTTP side on a free port: the default one may be taken on a shared machine.
  EXPECT_NE(run({"up", "--http-listen", "127.0.0.1:0"}).find("  http:  http://127.0.0.1:"),
            std::string::npos);
  run({"start", kScenario, "--seed", "7"});
  cli::DrillClient client(addr);
  client.SetToken(cli::ReadOwnerToken(dir));
  std::ifstream cur(dir + "/current-session");
  std::string id;
  std::getline(cur, id);
  auto st = client.GetStatus(id);
  ASSERT_TRUE(st.ok());
  std::vector<int> pids = AgentPids(*st);
  ASSERT_EQ(pids.size(), 4u);
  std::ifstream pidf(dir + "/controller.pid");
  int ctl_pid = 0;
  pidf >> ctl_pid;
  ASSERT_GT(ctl_pid, 0);
  pids.push_back(ctl_pid);
  EXPECT_NE(run({"status"}).find("RANK"), std::string::npos);
  run({"end"});
  run({"down"});
  EXPECT_TRUE(AllDead(pids, 10));
  EXPECT_TRUE(ProcessesMentioning(dir).empty());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace firedrill::e2e
