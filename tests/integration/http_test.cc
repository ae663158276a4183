// The HTTP server through real sockets: keep-alive, limits, timeouts, event
// streams, refusals; then the controller's HTTP side in a real controller
// (in this process, no session): auth, routes, and promtool on /metrics.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "cli/client.h"
#include "common/http_client.h"
#include "common/paths.h"
#include "controller/server.h"
#include "controller/web/http_server.h"
#include "tests/e2e/browser.h"

namespace firedrill {
namespace {

namespace th = http;
using web::HttpRequest;
using web::HttpResponse;

HttpResponse Echo(const HttpRequest& req) {
  HttpResponse r;
  if (req.path == "/throw") throw std::runtime_error("boom");
  if (req.path == "/missing") {
    r.status = 404;
    r.body = "no such thing\n";
    return r;
  }
  r.body = req.method + " " + req.path + " x=" + req.Query("x") + " auth=" + req.Header("authorization") +
           " body=" + req.body;
  return r;
}

// Emits three events, one per poll, then ends the stream.
class Three final : public web::EventSource {
 public:
  bool Poll(std::string* out) override {
    *out = "data: " + std::to_string(++n_) + "\n\n";
    return n_ < 3;
  }

 private:
  int n_ = 0;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void Serve(web::HttpServerOptions opts = {}) {
    opts.listen = "127.0.0.1:0";
    server_ = std::make_unique<web::HttpServer>(opts, [](const HttpRequest& req) {
      if (req.path == "/events") {
        HttpResponse r;
        r.content_type = "text/event-stream";
        r.stream = std::make_shared<Three>();
        r.poll = std::chrono::milliseconds(50);
        return r;
      }
      return Echo(req);
    });
    ASSERT_TRUE(server_->Start().ok());
    addr_ = server_->address();
  }
  std::unique_ptr<web::HttpServer> server_;
  std::string addr_;
};

TEST_F(HttpServerTest, AnswersWhatTheHandlerSays) {
  Serve();
  th::Reply r = th::Request(addr_, "GET", "/a%2Fb?x=1+2", "Authorization: Bearer t\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "GET /a/b x=1 2 auth=Bearer t body=");
  EXPECT_EQ(r.Header("content-type"), "text/plain; charset=utf-8");
  EXPECT_EQ(th::Request(addr_, "POST", "/p", "", "k=v").body, "POST /p x= auth= body=k=v");
  EXPECT_EQ(th::Get(addr_, "/missing").status, 404);
  EXPECT_EQ(th::Get(addr_, "/throw").status, 500);
  EXPECT_EQ(th::Request(addr_, "GET", "nopath").status, 400);
}

TEST_F(HttpServerTest, KeepsAConnectionAliveAcrossRequests) {
  Serve();
  const int fd = th::Dial(addr_);
  ASSERT_GE(fd, 0);
  std::string buf;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(th::SendAll(fd, "GET /k?x=" + std::to_string(i) + " HTTP/1.1\r\nHost: t\r\n\r\n"));
    th::Reply r = th::ReadReply(fd, &buf);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "GET /k x=" + std::to_string(i) + " auth= body=");
  }
  ::close(fd);
  EXPECT_EQ(server_->requests(), 3u);
}

TEST_F(HttpServerTest, RefusesOversizedHeadersAndBodies) {
  web::HttpServerOptions o;
  o.max_body_bytes = 100;
  o.max_header_bytes = 1024;
  Serve(o);
  EXPECT_EQ(th::Request(addr_, "POST", "/p", "", std::string(101, 'x')).status, 413);
  EXPECT_EQ(th::Request(addr_, "POST", "/p", "", std::string(100, 'x')).status, 200);
  EXPECT_EQ(th::Request(addr_, "GET", "/h", "X-Big: " + std::string(2000, 'y') + "\r\n").status, 431);
}

TEST_F(HttpServerTest, StreamsEventsUntilTheSourceEnds) {
  Serve();
  const int fd = th::Dial(addr_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(th::SendAll(fd, "GET /events HTTP/1.1\r\nHost: t\r\n\r\n"));
  std::string buf;
  th::Reply r = th::ReadReply(fd, &buf);  // no length: read to the close
  ::close(fd);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("content-type"), "text/event-stream");
  EXPECT_EQ(r.body, "data: 1\n\ndata: 2\n\ndata: 3\n\n");
}

TEST_F(HttpServerTest, ClosesIdleConnectionsAndRefusesPastTheLimit) {
  web::HttpServerOptions o;
  o.idle_timeout = std::chrono::seconds(1);
  o.max_connections = 2;
  Serve(o);
  const int a = th::Dial(addr_), b = th::Dial(addr_);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  for (int i = 0; i < 50 && server_->connections() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(th::Get(addr_, "/third").status, 503);
  // Both idle ones are closed by the server within its timeout.
  char c;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(::recv(a, &c, 1, 0), 0);
  EXPECT_EQ(::recv(b, &c, 1, 0), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
  ::close(a);
  ::close(b);
  for (int i = 0; i < 50 && server_->connections() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(th::Get(addr_, "/again").status, 200);
}

TEST_F(HttpServerTest, StopsWithConnectionsOpen) {
  Serve();
  const int fd = th::Dial(addr_);
  ASSERT_GE(fd, 0);
  const auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  server_.reset();
  ::close(fd);
}

TEST(HttpServerStart, SaysWhyAnAddressCannotBeUsed) {
  web::HttpServerOptions o;
  o.listen = "127.0.0.1:0";
  web::HttpServer first(o, Echo);
  ASSERT_TRUE(first.Start().ok());
  o.listen = first.address();
  web::HttpServer second(o, Echo);
  Status st = second.Start();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find(first.address()), std::string::npos) << st.message();
  o.listen = "not-an-ip:80";
  EXPECT_EQ(web::HttpServer(o, Echo).Start().code(), StatusCode::kInvalidArgument);
  o.listen = "127.0.0.1:99999";
  EXPECT_EQ(web::HttpServer(o, Echo).Start().code(), StatusCode::kInvalidArgument);
}

// `promtool check metrics` on `text`: its exit status and what it said.
std::pair<int, std::string> Promtool(const std::string& text) {
  char in_path[] = "/tmp/fd-metrics-XXXXXX";
  const int fd = mkstemp(in_path);
  if (fd < 0) return {-1, "mkstemp failed"};
  (void)!::write(fd, text.data(), text.size());
  ::close(fd);
  const std::string cmd = std::string("promtool check metrics < ") + in_path + " 2>&1";
  std::string said;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  char buf[512];
  while (fgets(buf, sizeof buf, p)) said += buf;
  const int rc = pclose(p);
  std::remove(in_path);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, said};
}

class ControllerHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("fd-http-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    controller::ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.state_dir = dir_;
    o.scenario_dirs = {std::string(FIREDRILL_SOURCE_DIR) + "/scenarios"};
    o.agent_bin = std::string(FIREDRILL_BIN_DIR) + "/firedrill-agent";
    o.hosts = "loopback";
    o.http_listen = "127.0.0.1:0";
    server_ = std::make_unique<controller::Server>(o);
    Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.message();
    http_ = server_->http_address();
    std::ifstream in(dir_ + "/owner.token");
    std::getline(in, owner_);
    ASSERT_FALSE(owner_.empty());
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::string dir_, http_, owner_;
  std::unique_ptr<controller::Server> server_;
};

TEST_F(ControllerHttpTest, WritesItsAddressAndAnswersHealthWithoutAToken) {
  std::ifstream in(dir_ + "/http.addr");
  std::string written;
  std::getline(in, written);
  EXPECT_EQ(written, http_);
  EXPECT_EQ(th::Get(http_, "/healthz").status, 200);
}

TEST_F(ControllerHttpTest, ServesTheDashboardWithoutDataOrAToken) {
  th::Reply page = th::Get(http_, "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.Header("content-type"), "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("<script src=\"/app.js\">"), std::string::npos) << page.body;
  EXPECT_NE(page.Header("content-security-policy").find("default-src 'self'"), std::string::npos);
  EXPECT_EQ(page.Header("x-content-type-options"), "nosniff");
  th::Reply js = th::Get(http_, "/app.js");
  EXPECT_EQ(js.status, 200);
  EXPECT_EQ(js.Header("content-type"), "text/javascript; charset=utf-8");
  EXPECT_NE(js.body.find("EventSource"), std::string::npos);
  EXPECT_EQ(js.body.find("innerHTML"), std::string::npos);  // text only, never markup
  EXPECT_EQ(th::Get(http_, "/app.css").status, 200);
  EXPECT_EQ(th::Get(http_, "/other.js").status, 401);  // not an asset: a route, which wants a token
}

TEST_F(ControllerHttpTest, EveryRouteButHealthWantsAToken) {
  for (const char* route :
       {"/metrics", "/api/sessions", "/api/whoami", "/api/sessions/abc/status", "/nowhere"}) {
    for (const std::string token :
         {"", "fdt_0000000000000000000000000000000000000000000000000000000000000000"}) {
      th::Reply r = th::Get(http_, route, token);
      EXPECT_EQ(r.status, 401) << route << " token '" << token << "'";
      EXPECT_EQ(r.Header("www-authenticate"), "Bearer realm=\"firedrill\"") << route;
      EXPECT_EQ(r.body.find("fdt_"), std::string::npos) << r.body;  // no token echoed back
    }
  }
}

TEST_F(ControllerHttpTest, RoutesAnswerTheOwner) {
  th::Reply r = th::Get(http_, "/api/sessions", owner_);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("content-type"), "application/json");
  EXPECT_NE(r.body.find("\"sessions\""), std::string::npos) << r.body;
  r = th::Get(http_, "/api/whoami", owner_);
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("\"roles\":\"owner\""), std::string::npos) << r.body;
  r = th::Get(http_, "/api/sessions/nosuch/status", owner_);
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("\"code\":\"NOT_FOUND\""), std::string::npos) << r.body;
  EXPECT_EQ(th::Get(http_, "/api/sessions/nosuch/secrets", owner_).status, 404);
  EXPECT_EQ(th::Get(http_, "/nowhere", owner_).status, 404);
  r = th::Request(http_, "DELETE", "/api/sessions", "Authorization: Bearer " + owner_ + "\r\n");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.Header("allow"), "GET");
}

TEST_F(ControllerHttpTest, LoginSetsAnHttpOnlyCookieThatAuthenticates) {
  th::Reply bad = th::Request(http_, "POST", "/login", "Content-Type: application/x-www-form-urlencoded\r\n",
                              "token=fdt_wrong");
  EXPECT_EQ(bad.status, 401);
  EXPECT_TRUE(bad.Header("set-cookie").empty());
  th::Reply ok = th::Request(http_, "POST", "/login", "Content-Type: application/x-www-form-urlencoded\r\n",
                             "token=" + owner_ + "&next=//evil.example/");
  EXPECT_EQ(ok.status, 303);
  EXPECT_EQ(ok.Header("location"), "/");  // only a path on this server
  const std::string cookie = ok.Header("set-cookie");
  EXPECT_NE(cookie.find("fd_token=" + owner_), std::string::npos);
  EXPECT_NE(cookie.find("HttpOnly"), std::string::npos);
  EXPECT_NE(cookie.find("SameSite=Strict"), std::string::npos);
  th::Reply me = th::Request(http_, "GET", "/api/whoami", "Cookie: theme=dark; fd_token=" + owner_ + "\r\n");
  EXPECT_EQ(me.status, 200) << me.body;
  EXPECT_EQ(th::Get(http_, "/login").status, 405);
}

TEST_F(ControllerHttpTest, MetricsPassPromtoolAndCountTheApi) {
  cli::DrillClient client(server_->address());
  client.SetToken(owner_);
  ASSERT_TRUE(client.ListScenarios().ok());
  cli::DrillClient stranger(server_->address());
  stranger.SetToken("fdt_0000000000000000000000000000000000000000000000000000000000000000");
  EXPECT_FALSE(stranger.ListScenarios().ok());

  th::Reply r = th::Get(http_, "/metrics", owner_);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(r.body.find("firedrill_rpcs_total{method=\"ListScenarios\",code=\"OK\"} 1\n"), std::string::npos)
      << r.body;
  EXPECT_NE(r.body.find("firedrill_rpcs_total{method=\"ListScenarios\",code=\"UNAUTHENTICATED\"} 1\n"),
            std::string::npos)
      << r.body;
  EXPECT_NE(r.body.find("# TYPE firedrill_rank_step_seconds gauge\n"), std::string::npos);
  EXPECT_NE(r.body.find("firedrill_http_requests_total "), std::string::npos);
  auto [rc, said] = Promtool(r.body);
  EXPECT_EQ(rc, 0) << "promtool check metrics said:\n" << said << "\non:\n" << r.body;
}

TEST_F(ControllerHttpTest, ALearnersScrapeHoldsNoControllerFamilies) {
  cli::DrillClient client(server_->address());
  client.SetToken(owner_);
  v1::IssueTokenRequest req;
  req.set_name("lena");
  req.add_roles("learner");
  auto issued = client.IssueToken(req);
  ASSERT_TRUE(issued.ok()) << issued.status().message();
  th::Reply r = th::Get(http_, "/metrics", issued->token());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body.find("firedrill_build_info{"), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("firedrill_rpcs_total{"), std::string::npos) << r.body;
  EXPECT_EQ(Promtool(r.body).first, 0);
}

// The proctor's view and a candidate's: the exam routes answer as ListExams
// and GetSitting do, and the dashboard's exam page, in a real browser,
// shows a proctor every sitting and refuses a candidate.
TEST_F(ControllerHttpTest, TheProctorViewIsTheProctorsAndACandidateSeesTheirSitting) {
  cli::DrillClient owner(server_->address());
  owner.SetToken(owner_);
  std::ifstream file(std::string(FIREDRILL_SOURCE_DIR) + "/exams/practical.yaml");
  const std::string yaml((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto exam = owner.CreateExam(yaml, "practical.yaml");
  ASSERT_TRUE(exam.ok()) << exam.status().message();
  auto cara = owner.IssueCandidate(exam->exam_id(), "cara");
  ASSERT_TRUE(cara.ok()) << cara.status().message();
  cli::DrillClient candidate(server_->address());
  candidate.SetToken(cara->token());
  ASSERT_TRUE(candidate.StartSitting().ok());

  th::Reply exams = th::Get(http_, "/api/exams", owner_);
  EXPECT_EQ(exams.status, 200);
  EXPECT_NE(exams.body.find("\"candidate\":\"cara\""), std::string::npos) << exams.body;
  th::Reply refused = th::Get(http_, "/api/exams", cara->token());
  EXPECT_EQ(refused.status, 403) << refused.body;
  EXPECT_EQ(refused.body.find("cara"), std::string::npos) << refused.body;  // no sitting in the refusal
  th::Reply sitting = th::Get(http_, "/api/sitting", cara->token());
  EXPECT_EQ(sitting.status, 200) << sitting.body;
  EXPECT_NE(sitting.body.find("\"remaining_ms\""), std::string::npos) << sitting.body;
  EXPECT_EQ(sitting.body.find("\"seed\""), std::string::npos);

  // In a browser: the owner sees cara's sitting on the exam page; cara is refused it.
  const std::string shots = std::string(FIREDRILL_BIN_DIR) + "/../test-artifacts/dashboard";
  std::filesystem::create_directories(shots);
  auto link = [&](const std::string& token, const std::string& next) {
    th::Reply r =
        th::Request(http_, "POST", "/api/login-link?next=" + next, "Authorization: Bearer " + token + "\r\n");
    const size_t at = r.body.find("/login?ticket=");
    return at == std::string::npos ? std::string() : r.body.substr(at, r.body.find('"', at) - at);
  };
  {
    auto b = e2e::HeadlessBrowser::Start(dir_ + "/chromium-owner");
    ASSERT_TRUE(b.ok()) << b.status().message();
    ASSERT_TRUE((*b)->Navigate("http://" + http_ + link(owner_, "%2F%23%2Fexams")).ok());
    Status shown =
        (*b)->WaitFor("document.querySelector('[data-exam] tr[data-candidate=\"cara\"]') !== null", 20);
    EXPECT_TRUE(shown.ok()) << shown.message();
    ASSERT_TRUE((*b)->Screenshot(shots + "/exams-proctor.png").ok());
    EXPECT_EQ((*b)->Errors(), std::vector<std::string>());
  }
  {
    auto b = e2e::HeadlessBrowser::Start(dir_ + "/chromium-cara");
    ASSERT_TRUE(b.ok()) << b.status().message();
    ASSERT_TRUE((*b)->Navigate("http://" + http_ + link(cara->token(), "%2F%23%2Fexams")).ok());
    Status shown = (*b)->WaitFor("document.querySelector('[data-refused]') !== null", 20);
    EXPECT_TRUE(shown.ok()) << shown.message();
    auto rows = (*b)->Eval("document.querySelectorAll('[data-exam]').length");
    ASSERT_TRUE(rows.ok());
    EXPECT_EQ(*rows, 0);
    ASSERT_TRUE((*b)->Screenshot(shots + "/exams-candidate-refused.png").ok());
    // Their own sitting is theirs to see.
    ASSERT_TRUE((*b)->Eval("location.hash = '#/sitting'").ok());
    shown = (*b)->WaitFor("document.querySelector('[data-view=sitting] table') !== null", 20);
    EXPECT_TRUE(shown.ok()) << shown.message();
  }
}

}  // namespace
}  // namespace firedrill
