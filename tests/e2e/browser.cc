#include "tests/e2e/browser.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/http_client.h"

namespace firedrill::e2e {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

struct HeadlessBrowser::Ws {
  asio::io_context ioc;
  beast::websocket::stream<beast::tcp_stream> ws{ioc};
};

namespace {

std::string Base64Decode(const std::string& in) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (unsigned char c : in) {
    const size_t d = chars.find(static_cast<char>(c));
    if (d == std::string::npos) break;  // '=' padding ends it
    val = (val << 6) + static_cast<int>(d);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

}  // namespace

HeadlessBrowser::~HeadlessBrowser() {
  if (ws_) ws_->ws.next_layer().close();
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);  // its renderer and helper processes too
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  if (!profile_.empty()) std::filesystem::remove_all(profile_, ec);
}

StatusOr<std::unique_ptr<HeadlessBrowser>> HeadlessBrowser::Start(const std::string& profile_dir) {
  std::unique_ptr<HeadlessBrowser> b(new HeadlessBrowser());
  b->profile_ = profile_dir;
  std::filesystem::create_directories(profile_dir);
  // The flags a closed machine needs: no background fetches of Google's
  // services (refused here, and slow to fail), no sandbox (root), no GPU.
  std::vector<std::string> args = {"chromium",
                                   "--headless",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--disable-quic",
                                   "--no-first-run",
                                   "--disable-background-networking",
                                   "--disable-component-update",
                                   "--disable-sync",
                                   "--disable-extensions",
                                   "--remote-debugging-port=0",
                                   "--remote-allow-origins=*",
                                   "--window-size=1280,900",
                                   "--user-data-dir=" + profile_dir,
                                   "about:blank"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = profile_dir + "/../chromium.log";
  b->pid_ = fork();
  if (b->pid_ < 0) return Internal("fork failed");
  if (b->pid_ == 0) {
    setpgid(0, 0);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execvp("chromium", argv.data());
    _exit(127);
  }
  // Chromium writes the port it took to DevToolsActivePort in the profile.
  std::string port;
  for (int i = 0; i < 300 && port.empty(); ++i) {
    std::ifstream in(profile_dir + "/DevToolsActivePort");
    std::getline(in, port);
    if (port.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int status = 0;
    if (::waitpid(b->pid_, &status, WNOHANG) == b->pid_) {
      b->pid_ = -1;
      return Unavailable(
          "chromium exited at start (is Debian's chromium installed? scripts/bootstrap.sh); see " + log);
    }
  }
  if (port.empty()) return Unavailable("chromium wrote no DevToolsActivePort in 30 s; see " + log);
  // The first page's WebSocket.
  std::string ws_url;
  for (int i = 0; i < 50 && ws_url.empty(); ++i) {
    const http::Reply list = http::Get("127.0.0.1:" + port, "/json/list");
    const auto targets = nlohmann::json::parse(list.body, nullptr, false);
    if (targets.is_array())
      for (const auto& t : targets)
        if (t.value("type", "") == "page") ws_url = t.value("webSocketDebuggerUrl", "");
    if (ws_url.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (ws_url.empty()) return Unavailable("chromium listed no page on port " + port);
  const std::string path = ws_url.substr(ws_url.find('/', std::string("ws://").size()));
  b->ws_ = std::make_unique<Ws>();
  try {
    auto& stream = beast::get_lowest_layer(b->ws_->ws);
    stream.connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(std::stoi(port))));
    b->ws_->ws.handshake("127.0.0.1:" + port, path);
  } catch (const std::exception& e) {
    return Unavailable(std::string("cannot open the DevTools WebSocket: ") + e.what());
  }
  for (const char* domain : {"Page.enable", "Runtime.enable", "Log.enable"}) {
    auto r = b->Call(domain, nlohmann::json::object());
    if (!r.ok()) return r.status();
  }
  return b;
}

void HeadlessBrowser::Collect(const nlohmann::json& e) {
  const std::string method = e.value("method", "");
  const auto& p = e.contains("params") ? e["params"] : nlohmann::json::object();
  if (method == "Page.loadEventFired") loaded_ = true;
  if (method == "Runtime.exceptionThrown") {
    const auto& d = p.value("exceptionDetails", nlohmann::json::object());
    errors_.push_back("exception: " + d.value("text", std::string()) + " " +
                      (d.contains("exception") ? d["exception"].value("description", std::string()) : ""));
  }
  if (method == "Runtime.consoleAPICalled" && p.value("type", "") == "error") {
    std::string text = "console.error:";
    for (const auto& a : p.value("args", nlohmann::json::array())) text += " " + a.dump();
    errors_.push_back(text);
  }
  if (method == "Log.entryAdded") {
    const auto& entry = p.value("entry", nlohmann::json::object());
    if (entry.value("level", "") == "error")
      errors_.push_back("log: " + entry.value("text", std::string()) + " " +
                        entry.value("url", std::string()));
  }
}

StatusOr<nlohmann::json> HeadlessBrowser::Call(const std::string& method, nlohmann::json params,
                                               int timeout_s) {
  const int id = next_id_++;
  const nlohmann::json msg = {{"id", id}, {"method", method}, {"params", std::move(params)}};
  try {
    beast::get_lowest_layer(ws_->ws).expires_after(std::chrono::seconds(timeout_s));
    ws_->ws.write(asio::buffer(msg.dump()));
    for (;;) {
      beast::flat_buffer buf;
      ws_->ws.read(buf);
      const auto reply = nlohmann::json::parse(beast::buffers_to_string(buf.data()), nullptr, false);
      if (!reply.is_object()) continue;
      if (reply.value("id", -1) != id) {
        Collect(reply);
        continue;
      }
      if (reply.contains("error")) return Internal(method + ": " + reply["error"].dump());
      return reply.value("result", nlohmann::json::object());
    }
  } catch (const std::exception& e) {
    return Unavailable(method + ": " + e.what());
  }
}

Status HeadlessBrowser::Navigate(const std::string& url, int timeout_s) {
  loaded_ = false;
  auto r = Call("Page.navigate", {{"url", url}});
  if (!r.ok()) return r.status();
  if (r->contains("errorText")) return Unavailable("navigating to " + url + ": " + (*r)["errorText"].dump());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (!loaded_ && std::chrono::steady_clock::now() < deadline) {
    auto ready = Eval("document.readyState");
    if (ready.ok() && *ready == "complete") loaded_ = true;
    if (!loaded_) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return loaded_ ? Status::Ok()
                 : DeadlineExceeded(url + " did not load in " + std::to_string(timeout_s) + " s");
}

StatusOr<nlohmann::json> HeadlessBrowser::Eval(const std::string& expression) {
  auto r =
      Call("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}});
  if (!r.ok()) return r.status();
  if (r->contains("exceptionDetails"))
    return Internal("evaluating " + expression + ": " + (*r)["exceptionDetails"].dump());
  return (*r)["result"].value("value", nlohmann::json());
}

Status HeadlessBrowser::WaitFor(const std::string& expression, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    auto v = Eval(expression);
    if (v.ok() && *v == true) return Status::Ok();
    if (std::chrono::steady_clock::now() > deadline)
      return DeadlineExceeded("the page never showed " + expression + " in " + std::to_string(timeout_s) +
                              " s" + (v.ok() ? "" : ": " + v.status().message()));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

Status HeadlessBrowser::Screenshot(const std::string& path, int width, int height) {
  auto m = Call("Emulation.setDeviceMetricsOverride",
                {{"width", width}, {"height", height}, {"deviceScaleFactor", 1}, {"mobile", false}});
  if (!m.ok()) return m.status();
  auto r = Call("Page.captureScreenshot", {{"format", "png"}});
  if (!r.ok()) return r.status();
  std::ofstream out(path, std::ios::binary);
  out << Base64Decode(r->value("data", std::string()));
  return out ? Status::Ok() : Internal("cannot write " + path);
}

std::vector<std::string> HeadlessBrowser::Errors() {
  (void)Eval("0");  // drains events that arrived since the last call
  return errors_;
}

}  // namespace firedrill::e2e
