#include "cli/local_controller.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/client.h"
#include "common/http_client.h"
#include "common/paths.h"
#include "controller/netns_fabric.h"

namespace firedrill::cli {

namespace {

std::string ReadFileTrimmed(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

std::string LogTail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += all[i] + " | ";
  return out;
}

// The reason a controller gave for not starting ("firedrill-controller: ..."
// on its own line) in what its log gained since byte `from`; "" if none.
std::string StartError(const std::string& path, std::streamoff from) {
  std::ifstream in(path);
  in.seekg(from);
  const std::string prefix = "firedrill-controller: ";
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  return "";
}

bool IsController(int pid) {
  char buf[4096];
  const std::string link = "/proc/" + std::to_string(pid) + "/exe";
  const ssize_t n = readlink(link.c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) return false;
  buf[n] = 0;
  return std::string(buf).find("firedrill-controller") != std::string::npos;
}

}  // namespace

std::optional<int> RunningControllerPid(const std::string& state_dir) {
  const std::string s = ReadFileTrimmed(state_dir + "/controller.pid");
  if (s.empty()) return std::nullopt;
  const int pid = std::atoi(s.c_str());
  if (pid <= 0 || kill(pid, 0) != 0 || !IsController(pid)) return std::nullopt;
  return pid;
}

StatusOr<ControllerProcess> StartController(const std::string& listen, const std::string& state_dir,
                                            const std::vector<std::string>& scenario_dirs,
                                            const std::string& tls_dir, const std::string& http_listen) {
  std::string err;
  if (!MakePrivateDir(state_dir, &err)) return Internal(err);
  ControllerProcess p;
  p.state_dir = state_dir;
  p.address = listen;
  p.log_path = state_dir + "/controller.log";
  const std::string bin = ExecutableDir() + "/firedrill-controller";
  if (access(bin.c_str(), X_OK) != 0) return NotFound("cannot find " + bin + "; build it first (make)");
  std::vector<std::string> args = {bin, "--listen", listen, "--state-dir", state_dir};
  if (!http_listen.empty()) args.insert(args.end(), {"--http-listen", http_listen});
  for (const auto& d : scenario_dirs) {
    std::error_code ec;
    const std::string abs = std::filesystem::absolute(d, ec).string();
    if (!std::filesystem::is_directory(abs, ec)) return NotFound("--add-scenarios " + d + ": not a directory");
    args.insert(args.end(), {"--add-scenarios", abs});
  }
  if (!tls_dir.empty()) {
    std::error_code ec;
    const std::string abs = std::filesystem::absolute(tls_dir, ec).lexically_normal().string();
    for (const char* f : {"/server.pem", "/server.key", "/ca.pem"})
      if (access((abs + f).c_str(), R_OK) != 0)
        return NotFound("--tls " + tls_dir + ": no readable " + std::string(f + 1) +
                        " (make them with `firedrill certs --out " + tls_dir + "`)");
    args.insert(args.end(), {"--tls-cert", abs + "/server.pem", "--tls-key", abs + "/server.key"});
    p.tls_ca = abs + "/ca.pem";
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::streamoff log_start = 0;
  {
    std::ifstream log(p.log_path, std::ios::ate);
    if (log) log_start = log.tellg();
  }
  const pid_t pid = fork();
  if (pid < 0) return Internal("fork failed");
  if (pid == 0) {
    // Grandchild pattern: the controller must not be our child, so that it
    // outlives this CLI and is reaped by init.
    setsid();
    const pid_t inner = fork();
    if (inner != 0) _exit(inner < 0 ? 1 : 0);
    const int fd = open(p.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  waitpid(pid, nullptr, 0);

  DrillClient client(listen, std::chrono::seconds(10), p.tls_ca);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto running = RunningControllerPid(state_dir); running && client.Reachable(std::chrono::milliseconds(200))) {
      p.pid = *running;
      // The address it actually serves (127.0.0.1 for a 0.0.0.0 listen).
      if (const std::string bound = ReadFileTrimmed(state_dir + "/controller.addr"); !bound.empty()) p.address = bound;
      if (!http_listen.empty()) p.http_address = ReadFileTrimmed(state_dir + "/http.addr");
      return p;
    }
    // A controller that refused to start (its state dir is locked by
    // another, a port in use) says why in its log: no need to wait.
    if (std::string why = StartError(p.log_path, log_start); !why.empty()) return FailedPrecondition(why);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Unavailable("the controller did not come up within 20 s; its log " + p.log_path +
                     " ends with: " + LogTail(p.log_path, 3));
}

StatusOr<LoginLink> NewLoginLink(const std::string& state_dir, const std::string& token,
                                 const std::string& next, int ttl_s) {
  const std::string addr = ReadFileTrimmed(state_dir + "/http.addr");
  if (addr.empty())
    return FailedPrecondition("the controller of state dir " + state_dir +
                              " serves no HTTP side (no http.addr there): `firedrill up` starts one with it "
                              "(--http-listen)");
  if (addr.rfind("127.0.0.1:", 0) != 0)
    return FailedPrecondition(
        "the HTTP side " + addr +
        " is not on loopback, and the CLI sends no token in plaintext off this machine: "
        "open http://" +
        addr + "/ and log in with your token");
  std::string target = "/api/login-link?ttl_s=" + std::to_string(ttl_s) + "&next=";
  for (unsigned char c : next) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
      target += static_cast<char>(c);
    } else {
      char esc[4];
      std::snprintf(esc, sizeof esc, "%%%02X", c);
      target += esc;
    }
  }
  const http::Reply r = http::Request(addr, "POST", target, "Authorization: Bearer " + token + "\r\n");
  if (r.status == 0)
    return Unavailable("cannot reach the controller's HTTP side at " + addr +
                       " (is the controller running? `firedrill up`)");
  const auto body = nlohmann::json::parse(r.body, nullptr, false);
  if (r.status != 200 || !body.is_object() || !body.contains("path")) {
    const std::string why =
        body.is_object() && body.contains("error") ? body["error"].value("message", r.body) : r.body;
    return Unavailable("the HTTP side refused a login link (" + std::to_string(r.status) + "): " + why);
  }
  LoginLink link;
  link.url = "http://" + addr + body["path"].get<std::string>();
  link.home = "http://" + addr + "/";
  link.name = body.value("name", std::string("you"));
  link.expires_in_s = body.value("expires_in_s", 0);
  return link;
}

StatusOr<int> StopController(const std::string& state_dir) {
  auto pid = RunningControllerPid(state_dir);
  if (!pid) {
    return NotFound("no controller is running for state dir " + state_dir + " (no live pid in " + state_dir +
                    "/controller.pid)");
  }
  kill(*pid, SIGTERM);
  for (int i = 0; i < 150; ++i) {
    if (kill(*pid, 0) != 0) return *pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(*pid, SIGKILL);  // its agents die with it (PR_SET_PDEATHSIG)
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // What it could not remove itself: its hosts' namespaces and links.
  (void)controller::NetnsFabric::CleanLeftovers(state_dir + "/network.ledger", nullptr);
  return *pid;
}

}  // namespace firedrill::cli
