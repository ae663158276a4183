// What the controller's HTTP side costs a running drill, side by side: one
// session's job, its step time measured in alternating windows without and
// with load (A B A B): N dashboard viewers, each holding the session's
// status event stream (as the dashboard's session view does), and a
// Prometheus scrape of /metrics every second. Per pair: loaded / unloaded
// median step time, from the job's own step reports (`firedrill metrics`
// rows, every rank's) of the steps that ended in each window; odd pairs
// measure the loaded window first, so a drift of the job's speed over the
// run does not read as the load's cost. Then the controller's resident
// memory is sampled every minute, --quiet-minutes without the load (what
// it does on its own with a live session) and --soak-minutes with it: it
// must stay flat. Results in bench/RESULTS.md.
//
//   build/bin/web_load --pairs 10 --window-s 60 --viewers 20 --quiet-minutes 5 --soak-minutes 10
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_controller.h"
#include "cli/client.h"
#include "common/http_client.h"
#include "common/paths.h"
#include "common/stats.h"

namespace {

using namespace firedrill;
using Clock = std::chrono::steady_clock;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The controller's resident set, kB.
long RssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

// N viewers of a session's event stream and one scraper, until stopped.
class Load {
 public:
  Load(std::string http, std::string token, std::string session, int viewers)
      : http_(std::move(http)), token_(std::move(token)), session_(std::move(session)), viewers_(viewers) {}
  void Start() {
    stop_ = false;
    for (int i = 0; i < viewers_; ++i) threads_.emplace_back([this] { View(); });
    threads_.emplace_back([this] { Scrape(); });
  }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  uint64_t bytes() const { return bytes_; }
  uint64_t scrapes() const { return scrapes_; }
  uint64_t failures() const { return failures_; }
  void SetSession(const std::string& id) { session_ = id; }

 private:
  void View() {
    while (!stop_) {
      const int fd = http::Dial(http_, 1000);
      if (fd < 0) {
        ++failures_;
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      // What the dashboard's session view opens: the status stream.
      http::SendAll(fd, "GET /api/sessions/" + session_ +
                            "/events HTTP/1.1\r\nHost: b\r\nCookie: fd_token=" + token_ + "\r\n\r\n");
      char buf[16384];
      while (!stop_) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n == 0) break;  // the stream ended (the session did): reconnect, as EventSource does
        if (n > 0) bytes_ += static_cast<uint64_t>(n);
      }
      ::close(fd);
    }
  }
  void Scrape() {
    while (!stop_) {
      const auto next = Clock::now() + std::chrono::seconds(1);
      const http::Reply r = http::Get(http_, "/metrics", token_);
      if (r.status == 200) {
        ++scrapes_;
      } else {
        ++failures_;
      }
      std::this_thread::sleep_until(next);
    }
  }
  std::string http_, token_, session_;
  int viewers_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> bytes_{0}, scrapes_{0}, failures_{0};
  std::vector<std::thread> threads_;
};

// Median step time (ms) over every rank's steps that ended in [from, to):
// the median, because a window's mean moves with its few long steps (a
// checkpoint write, a scheduling stall) more than with what the load costs
// every step.
double MedianStepMs(cli::DrillClient& c, const std::string& id, int64_t from_ms, int64_t to_ms, int* steps) {
  v1::GetMetricsRequest req;
  req.set_session_id(id);
  auto m = c.GetMetrics(req);
  *steps = 0;
  if (!m.ok()) return 0;
  std::vector<double> ms;
  for (const auto& r : m->ranks())
    for (const auto& row : r.rows())
      if (row.end_unix_ms() >= from_ms && row.end_unix_ms() < to_ms && row.step_ms() > 0)
        ms.push_back(row.step_ms());
  *steps = static_cast<int>(ms.size());
  return ms.empty() ? 0 : Median(ms);
}

StatusOr<std::string> StartRunning(cli::DrillClient& c, const std::string& scenario, int64_t seed) {
  auto info = c.StartSession(scenario, seed);
  if (!info.ok()) return info.status();
  for (int i = 0; i < 900; ++i) {
    auto st = c.GetStatus(info->session_id());
    if (st.ok() && st->session().state() == "running" && st->ranks_size() > 0 &&
        st->ranks(0).window_steps() > 0)
      return info->session_id();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return DeadlineExceeded("session " + info->session_id() + " did not start running in 3 min");
}

bool Live(cli::DrillClient& c, const std::string& id) {
  auto st = c.GetStatus(id);
  return st.ok() && st->session().state() == "running";
}

// The controller's RSS every minute for `minutes` (minute 0 first), with
// the load on (`load`) or off (null); follows the drill to a new session
// when its time runs out.
void SampleRss(const char* what, int minutes, pid_t pid, cli::DrillClient& c, StatusOr<std::string>& id,
               const std::string& scenario, int64_t& next_seed, Load* load) {
  std::vector<long> rss;
  std::printf("%s: %d min %s; controller RSS (MiB) every minute:\n", what, minutes,
              load ? "of the same load" : "without the load, the session running");
  for (int m = 0; m <= minutes; ++m) {
    if (m > 0) std::this_thread::sleep_for(std::chrono::minutes(1));
    if (!Live(c, *id)) {  // a drill's time runs out: follow a new one
      (void)c.EndSession(*id, std::chrono::seconds(60));
      if (load) load->Stop();
      id = StartRunning(c, scenario, next_seed++);
      if (!id.ok()) break;
      if (load) {
        load->SetSession(*id);
        load->Start();
      }
    }
    rss.push_back(RssKb(pid));
    std::printf("  minute %2d: %.1f MiB\n", m, rss.back() / 1024.0);
    std::fflush(stdout);
  }
  if (rss.size() >= 3) {
    const auto [lo, hi] = std::minmax_element(rss.begin() + 1, rss.end());
    std::printf(
        "%s: RSS minute 1 %.1f MiB, minute %zu %.1f MiB (%+.1f%%), range after minute 0 %.1f-%.1f MiB\n",
        what, rss[1] / 1024.0, rss.size() - 1, rss.back() / 1024.0, (double(rss.back()) / rss[1] - 1) * 100,
        *lo / 1024.0, *hi / 1024.0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int pairs = 10, window_s = 60, viewers = 20, soak_minutes = 10, quiet_minutes = 5;
  int64_t seed = 9100;
  std::string scenario = "quiet-night-page", scenario_dir = DefaultScenarioDir();
  CLI::App app{"web_load: what dashboard viewers and a Prometheus scrape cost a running drill"};
  app.add_option("--pairs", pairs, "unloaded/loaded window pairs")->capture_default_str();
  app.add_option("--window-s", window_s, "seconds per window")->capture_default_str();
  app.add_option("--viewers", viewers, "dashboard viewers (status event streams)")->capture_default_str();
  app.add_option("--quiet-minutes", quiet_minutes, "then memory sampled this long without the load (0: none)")
      ->capture_default_str();
  app.add_option("--soak-minutes", soak_minutes, "then the load held this long, sampling memory (0: none)")
      ->capture_default_str();
  app.add_option("--scenario", scenario, "a scenario without faults")->capture_default_str();
  app.add_option("--scenarios", scenario_dir, "scenario directory")->capture_default_str();
  app.add_option("--seed", seed, "session seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  bench::BenchController ctl(scenario_dir, {"--http-listen", "127.0.0.1:0"});
  if (!ctl.ok()) {
    std::fprintf(stderr, "web_load: the controller did not start; see %s/controller.log\n",
                 ctl.dir().c_str());
    return 1;
  }
  std::string http_addr;
  std::getline(std::ifstream(ctl.dir() + "/http.addr"), http_addr);
  cli::DrillClient c(ctl.addr(), std::chrono::seconds(30));
  const std::string token = cli::ReadOwnerToken(ctl.dir());
  c.SetToken(token);
  auto id = StartRunning(c, scenario, seed);
  if (!id.ok()) {
    std::fprintf(stderr, "web_load: %s\n", id.status().message().c_str());
    return 1;
  }
  std::printf("web_load: %s seed %lld, %d viewers + a scrape every second, %d pairs of %d s windows\n",
              scenario.c_str(), static_cast<long long>(seed), viewers, pairs, window_s);
  std::printf("%-5s %12s %12s %8s %8s %8s\n", "pair", "idle ms", "loaded ms", "ratio", "steps", "scrapes");
  Load load(http_addr, token, *id, viewers);
  std::vector<double> ratios;
  for (int p = 0; p < pairs; ++p) {
    if (!Live(c, *id)) {
      std::fprintf(stderr, "web_load: the session is no longer running after %d pairs\n", p);
      break;
    }
    // Two windows back to back, the loaded one first in odd pairs (A B, B A, ...).
    const bool loaded_first = p % 2 == 1;
    const uint64_t scrapes0 = load.scrapes();
    int64_t edge[3];
    edge[0] = NowMs();
    for (int w = 0; w < 2; ++w) {
      const bool loaded = (w == 0) == loaded_first;
      if (loaded) load.Start();
      std::this_thread::sleep_for(std::chrono::seconds(window_s));
      if (loaded) load.Stop();
      edge[w + 1] = NowMs();
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));  // every step of the second window reported
    const int64_t *idle_w = loaded_first ? edge + 1 : edge, *loaded_w = loaded_first ? edge : edge + 1;
    int na = 0, nb = 0;
    const double a = MedianStepMs(c, *id, idle_w[0], idle_w[1], &na),
                 b = MedianStepMs(c, *id, loaded_w[0], loaded_w[1], &nb);
    if (a <= 0 || b <= 0) continue;
    ratios.push_back(b / a);
    std::printf("%-5d %12.2f %12.2f %8.4f %8d %8llu\n", p + 1, a, b, b / a, na + nb,
                static_cast<unsigned long long>(load.scrapes() - scrapes0));
  }
  if (ratios.empty()) {
    std::fprintf(stderr, "web_load: no pair measured\n");
    return 1;
  }
  std::printf(
      "median loaded/idle step time %.4f over %zu pairs (cost %.2f%%); viewers read %llu bytes, %llu "
      "failures\n",
      Median(ratios), ratios.size(), (Median(ratios) - 1) * 100,
      static_cast<unsigned long long>(load.bytes()), static_cast<unsigned long long>(load.failures()));

  int64_t next_seed = seed + 1;
  if (quiet_minutes > 0 && id.ok()) {
    SampleRss("quiet", quiet_minutes, ctl.pid(), c, id, scenario, next_seed, nullptr);
  }
  if (soak_minutes > 0 && id.ok()) {
    const uint64_t scrapes0 = load.scrapes(), failures0 = load.failures();
    load.Start();
    SampleRss("soak", soak_minutes, ctl.pid(), c, id, scenario, next_seed, &load);
    load.Stop();
    std::printf("soak: %llu scrapes, %llu failures\n",
                static_cast<unsigned long long>(load.scrapes() - scrapes0),
                static_cast<unsigned long long>(load.failures() - failures0));
  }
  if (id.ok()) (void)c.EndSession(*id, std::chrono::seconds(60));
  return 0;
}
