// `firedrill up` / `down`: a controller in the background on this machine,
// found again through <state-dir>/controller.pid.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace firedrill::cli {

struct ControllerProcess {
  int pid = 0;
  std::string address;
  std::string log_path;
  std::string state_dir;
  std::string tls_ca;  // it speaks TLS: the CA clients trust ("" for plaintext)
  std::string http_address;  // host:port of its HTTP side ("" when off)
};

// Starts firedrill-controller (next to this executable) detached from the
// terminal, and waits until it answers. `scenario_dirs` are added to the
// shipped catalogue (--add-scenarios). `tls_dir`: serve TLS with its
// server.pem and server.key, clients trusting its ca.pem (`firedrill certs`).
// `http_listen`: the controller's HTTP side (/metrics, the dashboard's
// API), "" for none.
inline constexpr const char* kDefaultHttpListen = "127.0.0.1:50080";
StatusOr<ControllerProcess> StartController(const std::string& listen, const std::string& state_dir,
                                            const std::vector<std::string>& scenario_dirs = {},
                                            const std::string& tls_dir = "",
                                            const std::string& http_listen = kDefaultHttpListen);
// A one-time link that logs a browser in to the dashboard of the controller
// of `state_dir` (its HTTP address is in <state_dir>/http.addr) as `token`,
// opening `next` ("/", "/#/s/ID"): asked for over loopback only.
struct LoginLink {
  std::string url;   // http://127.0.0.1:PORT/login?ticket=...
  std::string home;  // http://127.0.0.1:PORT/
  std::string name;  // whose token
  int expires_in_s = 0;
};
StatusOr<LoginLink> NewLoginLink(const std::string& state_dir, const std::string& token,
                                 const std::string& next, int ttl_s);
// SIGTERM, wait (the controller stops its agents), SIGKILL if it lingers.
StatusOr<int> StopController(const std::string& state_dir);
// The pid in <state-dir>/controller.pid if that process is a live controller.
std::optional<int> RunningControllerPid(const std::string& state_dir);

}  // namespace firedrill::cli
