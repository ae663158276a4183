// Simulated hosts as network namespaces (controller/netns_fabric.h), on the
// real kernel: hosts reach each other over real TCP through their veths and
// the bridge, nothing routes beyond the fabric, the machine's own
// interfaces are untouched, and neither a clean end nor a crash leaves a
// namespace or link behind. Skipped, with the reason, where the machine
// refuses namespaces (not root, no iproute2).
#include "controller/netns_fabric.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "faults/shaped_link.h"

namespace firedrill::controller {
namespace {

std::string Output(const std::vector<std::string>& argv) {
  auto r = RunCommand(argv);
  return r.ok() ? r->output : "";
}

// The machine's interfaces that are not ours.
std::set<std::string> ForeignLinks() {
  std::set<std::string> names;
  std::istringstream in(Output({"ip", "-o", "link", "show"}));
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(": "), b = line.find(':', a + 2);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string name = line.substr(a + 2, b - a - 2);
    if (const auto at = name.find('@'); at != std::string::npos) name = name.substr(0, at);
    if (name.rfind("fd", 0) != 0) names.insert(name);
  }
  return names;
}

class NetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status ok = NetnsFabric::Available();
    if (!ok.ok()) GTEST_SKIP() << "network namespaces refused here: " << ok.message();
    dir_ = std::filesystem::temp_directory_path() / ("fd-netns-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    ledger_ = (dir_ / "network.ledger").string();
    before_ = ForeignLinks();
  }
  void TearDown() override {
    if (dir_.empty()) return;
    EXPECT_EQ(ForeignLinks(), before_) << "the machine's own interfaces must not change";
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
  std::string ledger_;
  std::set<std::string> before_;
};

// Inside `host`'s namespace (RunIn): listens on its address, publishes the
// port, and accepts one client within 10 s (a fabric that drops frames must
// fail the test, not hang it). The client's socket, or -1.
int AcceptOne(const NetnsHost& host, std::promise<int>& port) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, host.address.c_str(), &a.sin_addr);
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(s, 1) != 0) {
    port.set_value(-1);
    close(s);
    return -1;
  }
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  port.set_value(ntohs(a.sin_port));
  pollfd pfd{s, POLLIN, 0};
  const int c = poll(&pfd, 1, 10000) == 1 ? accept(s, nullptr, nullptr) : -1;
  close(s);
  return c;
}

// Echo server on `host`: returns the port once listening; serves one client.
std::future<void> Echo(const NetnsHost& host, std::promise<int>& port) {
  return std::async(std::launch::async, [&host, &port] {
    const Status st = NetnsFabric::RunIn(host.netns, [&] {
      const int c = AcceptOne(host, port);
      if (c < 0) return;
      char buf[16];
      const ssize_t n = read(c, buf, sizeof buf);
      if (n > 0) (void)!write(c, buf, static_cast<size_t>(n));
      close(c);
    });
    EXPECT_TRUE(st.ok()) << st.message();
  });
}

// Connects from `from_netns` to addr:port, sends "hello", returns the echo.
std::string Call(const std::string& from_netns, const std::string& addr, int port) {
  std::string got;
  const Status st = NetnsFabric::RunIn(from_netns, [&] {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    const timeval five{5, 0};  // bounds connect and read
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &five, sizeof five);
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &five, sizeof five);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      (void)!write(s, "hello", 5);
      char buf[16];
      const ssize_t n = read(s, buf, sizeof buf);
      if (n > 0) got.assign(buf, static_cast<size_t>(n));
    }
    close(s);
  });
  EXPECT_TRUE(st.ok()) << st.message();
  return got;
}

TEST_F(NetnsTest, HostsTalkRealTcpThroughTheBridgeAndNothingRoutesBeyondIt) {
  std::string tag;
  {
    auto fabric = NetnsFabric::Create(ledger_);
    ASSERT_TRUE(fabric.ok()) << fabric.status().message();
    tag = (*fabric)->tag();
    auto a = (*fabric)->AddHost("node-0");
    auto b = (*fabric)->AddHost("node-1");
    ASSERT_TRUE(a.ok()) << a.status().message();
    ASSERT_TRUE(b.ok()) << b.status().message();
    EXPECT_NE(a->address, b->address);
    EXPECT_EQ(a->address.rfind("198.1", 0), 0u) << a->address;
    EXPECT_FALSE((*fabric)->AddHost("node-0").ok()) << "one namespace per host";

    std::promise<int> port;
    auto served = Echo(*b, port);
    const int p = port.get_future().get();
    ASSERT_GT(p, 0);
    EXPECT_EQ(Call(a->netns, b->address, p), "hello") << "host to host over veth and bridge";
    served.get();

    // Inside a host: its own eth0 and loopback, its subnet, no default route.
    const std::string routes = Output({"ip", "-n", a->netns, "route", "show"});
    EXPECT_EQ(routes.find("default"), std::string::npos) << routes;
    const std::string links = Output({"ip", "-n", a->netns, "-o", "link", "show"});
    EXPECT_NE(links.find(" eth0"), std::string::npos) << links;
    EXPECT_NE(Output({"ip", "netns", "list"}).find(a->netns), std::string::npos);
  }
  // The fabric is gone with everything it made.
  EXPECT_EQ(Output({"ip", "netns", "list"}).find(tag), std::string::npos);
  EXPECT_EQ(Output({"ip", "-o", "link", "show"}).find(tag), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(ledger_));
}

// Receives on `host` until the sender closes; the rate it measured (bytes
// per second from the first byte to the end), or -1.
std::future<double> Sink(const NetnsHost& host, std::promise<int>& port) {
  return std::async(std::launch::async, [&host, &port] {
    double rate = -1;
    const Status st = NetnsFabric::RunIn(host.netns, [&] {
      const int c = AcceptOne(host, port);
      if (c < 0) return;
      const timeval ten{10, 0};
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &ten, sizeof ten);
      std::vector<char> buf(1 << 16);
      int64_t total = 0;
      std::chrono::steady_clock::time_point first;
      for (ssize_t n; (n = read(c, buf.data(), buf.size())) > 0;) {
        if (total == 0) first = std::chrono::steady_clock::now();
        total += n;
      }
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - first).count();
      if (total > 0 && secs > 0) rate = static_cast<double>(total) / secs;
      close(c);
    });
    EXPECT_TRUE(st.ok()) << st.message();
    return rate;
  });
}

// Sends `bytes` from `from` to `to` over TCP; the receiver's measured rate.
double Transfer(const NetnsHost& from, const NetnsHost& to, int64_t bytes) {
  std::promise<int> port;
  auto rate = Sink(to, port);
  const int p = port.get_future().get();
  if (p <= 0) return -1;
  const Status st = NetnsFabric::RunIn(from.netns, [&] {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    const timeval ten{10, 0};
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &ten, sizeof ten);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(p));
    inet_pton(AF_INET, to.address.c_str(), &a.sin_addr);
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      std::vector<char> buf(1 << 16, 'x');
      for (int64_t left = bytes; left > 0;) {
        const ssize_t n = write(s, buf.data(), static_cast<size_t>(std::min<int64_t>(left, buf.size())));
        if (n <= 0) break;
        left -= n;
      }
    }
    close(s);
  });
  EXPECT_TRUE(st.ok()) << st.message();
  return rate.get();
}

TEST_F(NetnsTest, AShapedLinkCapsWhatTheBadHostSendsAndReceivesAndNothingElse) {
  auto fabric = NetnsFabric::Create(ledger_);
  ASSERT_TRUE(fabric.ok()) << fabric.status().message();
  auto a = (*fabric)->AddHost("node-0");
  auto b = (*fabric)->AddHost("node-1");
  auto c = (*fabric)->AddHost("node-2");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const int64_t bytes = 6 << 20;
  const double free_ab = Transfer(*a, *b, bytes);
  ASSERT_GT(free_ab, 0);

  // The bad host's link at 20 MB/s, set from inside its namespace as its
  // agent does.
  const double cap = 20e6;
  std::unique_ptr<faults::ShapedLink> link;
  ASSERT_TRUE(NetnsFabric::RunIn(a->netns, [&] {
                link = std::make_unique<faults::ShapedLink>("eth0");
                link->Degrade(0, 0, cap / 1e9);
              }).ok());
  ASSERT_TRUE(link->fallback().empty()) << "tc refused: " << link->fallback();
  // Ingress shaping needs the ifb device; a kernel without it caps egress
  // only (still a slow ring), which is said and checked as such.
  const bool ingress = link->ingress_fallback().empty();
  if (!ingress) std::printf("ingress not shaped on this kernel: %s\n", link->ingress_fallback().c_str());
  RecordProperty("ingress_shaped", ingress ? "yes" : link->ingress_fallback());
  auto qdiscs = [&] { return Output({"ip", "netns", "exec", a->netns, "tc", "qdisc", "show"}); };
  EXPECT_NE(qdiscs().find("tbf"), std::string::npos) << qdiscs();
  EXPECT_EQ(link->DelayFor(1 << 20), faults::Nanos(0)) << "the kernel queues the bytes: nothing to wait out";
  // A second agent on the same host (two ranks sharing its interface)
  // neither clears the first one's qdisc when it starts nor replaces it.
  ASSERT_TRUE(NetnsFabric::RunIn(a->netns, [&] {
                faults::ShapedLink second("eth0");
                second.Degrade(1, 0, 2 * cap / 1e9);
                EXPECT_NE(second.fallback().find("another agent"), std::string::npos) << second.fallback();
                EXPECT_EQ(second.DelayFor(1 << 20), faults::Nanos(0))
                    << "the first agent's rate limit already queues its bytes: not slowed twice";
              }).ok());
  EXPECT_NE(qdiscs().find("tbf"), std::string::npos) << "the first agent's qdisc stays: " << qdiscs();
  const double out = Transfer(*a, *b, bytes);
  const double in = Transfer(*b, *a, bytes);
  const double others = Transfer(*b, *c, bytes);
  RecordProperty("free_MBps", std::to_string(free_ab / 1e6));
  RecordProperty("bad_out_MBps", std::to_string(out / 1e6));
  RecordProperty("bad_in_MBps", std::to_string(in / 1e6));
  RecordProperty("others_MBps", std::to_string(others / 1e6));
  for (double r : ingress ? std::vector<double>{out, in} : std::vector<double>{out}) {
    EXPECT_GT(r, 0.5 * cap) << "about the cap";
    EXPECT_LT(r, 1.5 * cap) << "about the cap";
  }
  EXPECT_LT(out, 0.5 * others) << "a pair that avoids the bad host is not capped";

  ASSERT_TRUE(NetnsFabric::RunIn(a->netns, [&] { link->Restore(0); }).ok());
  EXPECT_EQ(qdiscs().find("tbf"), std::string::npos) << "Recover takes the qdiscs off: " << qdiscs();
  EXPECT_EQ(Output({"ip", "-n", a->netns, "link", "show"}).find("ifb"), std::string::npos);
  EXPECT_GT(Transfer(*a, *b, bytes), 2.0 * out) << "free again, against the same pair shaped";
  if (ingress) {
    EXPECT_GT(Transfer(*b, *a, bytes), 2.0 * in) << "free again, against the same pair shaped";
  }
  ASSERT_TRUE(NetnsFabric::RunIn(a->netns, [&] { link.reset(); }).ok());
}

// A drill's inter-host links (scenario cluster.inter_host_gbps): every
// host's port on the fabric capped both ways, while what a host's ranks
// send each other stays inside it. Against the same host's own path in the
// same test: without the shaping both run free and the ratio fails.
TEST_F(NetnsTest, ShapedHostsTalkToEachOtherAtTheCapAndFreelyInside) {
  auto fabric = NetnsFabric::Create(ledger_);
  ASSERT_TRUE(fabric.ok()) << fabric.status().message();
  auto a = (*fabric)->AddHost("node-0");
  auto b = (*fabric)->AddHost("node-1");
  ASSERT_TRUE(a.ok() && b.ok());
  const double cap = 20e6;  // 20 MB/s
  Status sa = (*fabric)->ShapeHost("node-0", cap / 1e9), sb = (*fabric)->ShapeHost("node-1", cap / 1e9);
  if (!sa.ok() && sa.message().find("ifb") != std::string::npos) GTEST_SKIP() << sa.message();
  ASSERT_TRUE(sa.ok()) << sa.message();
  ASSERT_TRUE(sb.ok()) << sb.message();
  EXPECT_TRUE((*fabric)->ShapeHost("node-0", cap / 1e9).ok()) << "shaping again replaces the rate";
  const int64_t bytes = 6 << 20;
  const double across = Transfer(*a, *b, bytes), back = Transfer(*b, *a, bytes),
               inside = Transfer(*a, *a, bytes);
  RecordProperty("across_MBps", std::to_string(across / 1e6));
  RecordProperty("back_MBps", std::to_string(back / 1e6));
  RecordProperty("inside_MBps", std::to_string(inside / 1e6));
  for (double r : {across, back}) {
    EXPECT_GT(r, 0.5 * cap) << "about the cap";
    EXPECT_LT(r, 1.5 * cap) << "about the cap";
  }
  EXPECT_GT(inside, 5 * across) << "a host's own path is not the link between hosts";
  // The host's eth0 is its agents' (a slow_link fault's): nothing there.
  EXPECT_EQ(Output({"ip", "netns", "exec", a->netns, "tc", "qdisc", "show", "dev", "eth0"}).find("tbf"),
            std::string::npos);
  // Removing the host takes its ifb device too.
  auto shaped = (*fabric)->Host("node-0");
  ASSERT_TRUE(shaped.ok());
  ASSERT_FALSE(shaped->ifb.empty());
  ASSERT_TRUE((*fabric)->RemoveHost("node-0").ok());
  auto gone = RunCommand({"ip", "link", "show", shaped->ifb});
  ASSERT_TRUE(gone.ok());
  EXPECT_NE(gone->exit_code, 0) << shaped->ifb << " outlived its host";
}

TEST_F(NetnsTest, AFreedAddressComesBackLastAndWithTheSameMac) {
  auto fabric = NetnsFabric::Create(ledger_);
  ASSERT_TRUE(fabric.ok()) << fabric.status().message();
  auto a = (*fabric)->AddHost("s1/node-0");
  auto b = (*fabric)->AddHost("s1/node-1");
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string mac = Output({"ip", "-n", a->netns, "-o", "link", "show", "eth0"});
  EXPECT_NE(mac.find("02:fd:"), std::string::npos) << mac;
  ASSERT_TRUE((*fabric)->RemoveHost("s1/node-0").ok());
  auto c = (*fabric)->AddHost("s2/node-0");
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->address, a->address) << "round-robin: a freed address is not the next one handed out";
  EXPECT_EQ(c->index, b->index + 1);
  // A host's MAC follows its index: when the range wraps and the freed
  // index returns, it comes with its old MAC, so a peer's neighbour cache
  // for that address stays right.
  char want[32];
  std::snprintf(want, sizeof want, "02:fd:%s:%s:%s:%02x", (*fabric)->tag().substr(0, 2).c_str(),
                (*fabric)->tag().substr(2, 2).c_str(), (*fabric)->tag().substr(4, 2).c_str(), a->index);
  EXPECT_NE(mac.find(want), std::string::npos) << mac << " should carry " << want;
}

TEST_F(NetnsTest, ACrashedControllersLeftoversAreRemovedFromItsLedger) {
  // The child makes a fabric and dies without cleaning up.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto fabric = NetnsFabric::Create(ledger_);
    if (!fabric.ok() || !(*fabric)->AddHost("node-0").ok() || !(*fabric)->AddHost("node-1").ok()) _exit(1);
    _exit(0);  // no destructors: what a SIGKILL leaves
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::ifstream in(ledger_);
  std::string kind, name, netns;
  while (in >> kind >> name)
    if (kind == "netns") netns = name;
  ASSERT_FALSE(netns.empty());
  ASSERT_NE(Output({"ip", "netns", "list"}).find(netns), std::string::npos) << "left behind, as a crash would";
  std::string report;
  const Status st = NetnsFabric::CleanLeftovers(ledger_, &report);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_NE(report.find("removed netns " + netns), std::string::npos) << report;
  EXPECT_EQ(Output({"ip", "netns", "list"}).find(netns), std::string::npos);
  const std::string tag = netns.substr(3, 6);
  EXPECT_EQ(Output({"ip", "-o", "link", "show"}).find(tag), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(ledger_));
}

TEST_F(NetnsTest, ALedgerNamingSomethingNotOursIsRefused) {
  {
    std::ofstream out(ledger_);
    out << "link eth0\nnetns default\n";
  }
  std::string report;
  EXPECT_FALSE(NetnsFabric::CleanLeftovers(ledger_, &report).ok());
  EXPECT_NE(report.find("could not remove link eth0"), std::string::npos) << report;
  std::filesystem::remove(ledger_);
}

}  // namespace
}  // namespace firedrill::controller
