// The controller's HTTP side on a running drill: /metrics passes promtool
// and says what `status --json` says for the same step window, the status
// event stream updates while the job runs, and a token that may not see a
// session gets nothing of it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "common/http_client.h"
#include "tests/e2e/browser.h"
#include "tests/e2e/harness.h"

namespace firedrill::e2e {
namespace {

namespace th = http;

// The value of series `name{labels}` in a scrape; NaN when absent.
double Sample(const std::string& scrape, const std::string& series) {
  const size_t at = scrape.find("\n" + series + " ");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(scrape.c_str() + at + series.size() + 2, nullptr);
}

int PromtoolCheck(const std::string& text, const std::string& dir, std::string* said) {
  const std::string path = dir + "/scrape.prom";
  std::ofstream(path) << text;
  FILE* p = popen(("promtool check metrics < " + path + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) *said += buf;
  const int rc = pclose(p);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// A token for a learner who started nothing.
StatusOr<v1::IssueTokenResponse> IssueLearner(cli::DrillClient& c, const std::string& name) {
  v1::IssueTokenRequest req;
  req.set_name(name);
  req.add_roles("learner");
  return c.IssueToken(req);
}

class WebTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    ctl_ =
        std::make_unique<ControllerProcess>(dir_, std::vector<std::string>{"--http-listen", "127.0.0.1:0"});
    ASSERT_TRUE(ctl_->ok());
    std::ifstream in(dir_ + "/http.addr");
    std::getline(in, http_);
    ASSERT_FALSE(http_.empty());
    owner_ = cli::ReadOwnerToken(dir_);
  }
  void TearDown() override {
    ctl_.reset();
    std::error_code ec;
    if (!HasFailure()) std::filesystem::remove_all(dir_, ec);  // kept for its logs otherwise
  }
  std::string dir_, http_, owner_;
  std::unique_ptr<ControllerProcess> ctl_;
};

TEST_F(WebTest, MetricsOfARunningDrillAgreeWithStatusAndStreamUpdates) {
  cli::DrillClient& c = ctl_->client();
  auto info = StartRunning(c, "throughput-halved", 8801);
  ASSERT_TRUE(info.ok()) << info.status().message();
  const std::string id = info->session_id();
  ASSERT_TRUE(
      WaitUntil(
          c, id,
          [](const v1::SessionStatus& s) { return s.ranks_size() == 4 && s.ranks(0).window_steps() >= 5; },
          120)
          .ok());

  // The same step on every rank in both looks: then the same window, and
  // every number must agree (the scrape is computed fresh after 600 ms).
  bool compared = false;
  std::string scrape;
  for (int attempt = 0; attempt < 60 && !compared; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    auto st = c.GetStatus(id);
    ASSERT_TRUE(st.ok());
    th::Reply r = th::Get(http_, "/metrics", owner_);
    ASSERT_EQ(r.status, 200);
    scrape = r.body;
    bool same = true;
    for (const auto& rank : st->ranks()) {
      const std::string l = "{session=\"" + id + "\",rank=\"" + std::to_string(rank.rank()) + "\"}";
      same &= Sample(scrape, "firedrill_rank_step" + l) == static_cast<double>(rank.step());
    }
    if (!same) continue;
    compared = true;
    for (const auto& rank : st->ranks()) {
      const std::string l = "{session=\"" + id + "\",rank=\"" + std::to_string(rank.rank()) + "\"}";
      EXPECT_DOUBLE_EQ(Sample(scrape, "firedrill_rank_step_seconds" + l), rank.step_ms() / 1e3) << l;
      EXPECT_DOUBLE_EQ(Sample(scrape, "firedrill_rank_samples_per_second" + l), rank.samples_per_s()) << l;
      EXPECT_DOUBLE_EQ(Sample(scrape, "firedrill_rank_loss" + l), rank.loss()) << l;
      const std::string comm =
          "{session=\"" + id + "\",rank=\"" + std::to_string(rank.rank()) + "\",phase=\"comm\"}";
      EXPECT_DOUBLE_EQ(Sample(scrape, "firedrill_rank_phase_seconds" + comm), rank.comm_ms() / 1e3) << l;
    }
    EXPECT_DOUBLE_EQ(Sample(scrape, "firedrill_baseline_samples_per_second{session=\"" + id + "\"}"),
                     st->baseline().throughput_samples_per_s());
  }
  EXPECT_TRUE(compared) << "no scrape landed on the step status showed; last scrape:\n" << scrape;
  std::string said;
  EXPECT_EQ(PromtoolCheck(scrape, dir_, &said), 0) << said << "\non:\n" << scrape;
  EXPECT_NE(scrape.find("firedrill_agent_registrations_total{result=\"accepted\"} 4\n"), std::string::npos)
      << scrape;

  // Two status events seconds apart differ: the stream follows the job.
  const int fd = th::Dial(http_, 20000);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(th::SendAll(fd, "GET /api/sessions/" + id +
                                  "/events HTTP/1.1\r\nHost: t\r\nCookie: fd_token=" + owner_ + "\r\n\r\n"));
  std::string got;
  char buf[65536];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto events = [&] {
    size_t n = 0;
    for (size_t at = 0; (at = got.find("event: status\n", at)) != std::string::npos; ++at) ++n;
    return n;
  };
  while (events() < 3 && std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  ASSERT_GE(events(), 3u) << got.substr(0, 2000);
  EXPECT_NE(got.find("Content-Type: text/event-stream"), std::string::npos);
  const size_t first = got.find("event: status\ndata: "),
               second = got.find("event: status\ndata: ", first + 1);
  EXPECT_NE(got.substr(first, second - first), got.substr(second, got.find("\n\n", second) - second));

  // A learner who did not start it: no series, no status, no stream.
  auto other = IssueLearner(c, "other-learner");
  ASSERT_TRUE(other.ok()) << other.status().message();
  th::Reply theirs = th::Get(http_, "/metrics", other->token());
  EXPECT_EQ(theirs.status, 200);
  EXPECT_EQ(theirs.body.find(id), std::string::npos) << theirs.body;
  EXPECT_EQ(th::Get(http_, "/api/sessions/" + id + "/status", other->token()).status, 404);
  EXPECT_EQ(th::Get(http_, "/api/sessions/" + id + "/events", other->token()).status, 404);
  EXPECT_EQ(th::Get(http_, "/api/sessions/" + id + "/timeline", other->token()).status, 404);
  th::Reply mine = th::Get(http_, "/api/sessions/" + id + "/timeline", owner_);
  EXPECT_EQ(mine.status, 200);
  EXPECT_NE(mine.body.find("\"who\":\"controller\""), std::string::npos) << mine.body;
  th::Reply listed = th::Get(http_, "/api/sessions", other->token());
  EXPECT_EQ(listed.body.find(id), std::string::npos) << listed.body;

  // Ended: its series go (an ended session's would otherwise stay for ever).
  ASSERT_TRUE(c.EndSession(id, std::chrono::seconds(60)).ok());
  th::Reply after = th::Get(http_, "/metrics", owner_);
  EXPECT_EQ(after.body.find("session=\"" + id + "\""), std::string::npos) << after.body;
}

// Where the browser tests leave their screenshots (CI keeps the build
// folder's test-artifacts/ as artifacts).
std::string ArtifactDir() {
  const std::string d = std::string(FIREDRILL_BIN_DIR) + "/../test-artifacts/dashboard";
  std::filesystem::create_directories(d);
  return d;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_F(WebTest, TheDashboardShowsEveryRankAndFollowsTheJobInARealBrowser) {
  cli::DrillClient& c = ctl_->client();
  auto info = StartRunning(c, "throughput-halved", 8802);
  ASSERT_TRUE(info.ok()) << info.status().message();
  const std::string id = info->session_id();
  th::Reply link = th::Request(http_, "POST", "/api/login-link?next=%2F%23%2Fs%2F" + id,
                               "Authorization: Bearer " + owner_ + "\r\n");
  ASSERT_EQ(link.status, 200) << link.body;
  const std::string path = nlohmann::json::parse(link.body).at("path");

  auto browser = HeadlessBrowser::Start(dir_ + "/chromium-profile");
  ASSERT_TRUE(browser.ok()) << browser.status().message();
  HeadlessBrowser& b = **browser;
  ASSERT_TRUE(b.Navigate("http://" + http_ + path).ok());
  // Every rank charted: a step-time line and five phase segments each.
  Status shown = b.WaitFor("document.querySelectorAll('[data-chart=step-time] polyline').length === 4", 60);
  ASSERT_TRUE(shown.ok()) << shown.message();
  for (int r = 0; r < 4; ++r) {
    auto n = b.Eval("document.querySelectorAll('[data-chart=phases] rect[data-rank=\"" + std::to_string(r) +
                    "\"]').length");
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 5) << "rank " << r;
  }
  const std::string points =
      "[...document.querySelectorAll('[data-chart=step-time] polyline')]"
      ".map(p => p.getAttribute('points')).join('|')";
  const std::string dir = ArtifactDir();
  ASSERT_TRUE(b.WaitFor(points + ".split(' ').length >= 8", 30).ok());  // a few looks on the chart
  ASSERT_TRUE(b.Screenshot(dir + "/session-1.png").ok());
  auto first = b.Eval(points);
  std::this_thread::sleep_for(std::chrono::seconds(4));
  ASSERT_TRUE(b.Screenshot(dir + "/session-2.png").ok());
  auto second = b.Eval(points);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(*first, *second) << "the charted data did not change in 4 s";
  EXPECT_NE(Slurp(dir + "/session-1.png"), Slurp(dir + "/session-2.png"));
  EXPECT_GT(Slurp(dir + "/session-1.png").size(), 10000u);

  // The shared timeline: the controller's entries at least (the baseline, the run).
  EXPECT_TRUE(b.WaitFor("document.querySelectorAll('.events tr').length >= 2", 20).ok());

  // The list shows the session; the page logged no error anywhere.
  ASSERT_TRUE(b.Eval("location.hash = '#/'").ok());
  EXPECT_TRUE(b.WaitFor("document.querySelector('tr[data-session=\"" + id + "\"]') !== null", 20).ok());
  ASSERT_TRUE(b.Screenshot(dir + "/sessions.png").ok());
  EXPECT_EQ(b.Errors(), std::vector<std::string>());

  // Another learner's browser: the list holds nothing of it and its page is
  // refused, charting nothing (what a candidate beside a drill sees too).
  auto other = IssueLearner(c, "other-learner");
  ASSERT_TRUE(other.ok()) << other.status().message();
  th::Reply other_link = th::Request(http_, "POST", "/api/login-link?next=%2F%23%2F",
                                     "Authorization: Bearer " + other->token() + "\r\n");
  ASSERT_EQ(other_link.status, 200) << other_link.body;
  {
    auto ob = HeadlessBrowser::Start(dir_ + "/chromium-other");
    ASSERT_TRUE(ob.ok()) << ob.status().message();
    HeadlessBrowser& o = **ob;
    ASSERT_TRUE(
        o.Navigate("http://" + http_ + nlohmann::json::parse(other_link.body).at("path").get<std::string>())
            .ok());
    Status empty = o.WaitFor(
        "[...document.querySelectorAll('[data-view=sessions] td')].some(t => t.textContent === 'no sessions "
        "yet')",
        20);
    EXPECT_TRUE(empty.ok()) << empty.message();
    auto rows = o.Eval("document.querySelectorAll('tr[data-session]').length");
    ASSERT_TRUE(rows.ok());
    EXPECT_EQ(*rows, 0);
    ASSERT_TRUE(o.Eval("location.hash = '#/s/" + id + "'").ok());
    Status refused = o.WaitFor("document.querySelector('[data-refused]') !== null", 20);
    EXPECT_TRUE(refused.ok()) << refused.message();
    auto lines = o.Eval("document.querySelectorAll('polyline').length");
    ASSERT_TRUE(lines.ok());
    EXPECT_EQ(*lines, 0);
    ASSERT_TRUE(o.Screenshot(dir + "/session-other-learner.png").ok());
  }

  // The link was for one use.
  th::Reply again = th::Get(http_, path);
  EXPECT_EQ(again.status, 303);
  EXPECT_NE(again.Header("location").find("why="), std::string::npos);
  EXPECT_TRUE(again.Header("set-cookie").empty());
}

}  // namespace
}  // namespace firedrill::e2e
