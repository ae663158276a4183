// What /metrics says: a session's live job as Prometheus families (from the
// same SessionStatus `firedrill status --json` prints, so the two agree on
// every number for the same step window), and the controller's own counters.
// Labels name sessions, ranks and hosts, never a learner, a token, a fault
// or an answer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "controller/web/prometheus.h"
#include "firedrill/v1/controller.pb.h"

namespace firedrill::controller {

// The controller's own counts since it started. Thread-safe.
class ControllerCounters {
 public:
  // A finished public RPC: its method ("StartSession") and gRPC code name
  // ("OK", "PERMISSION_DENIED").
  void CountRpc(const std::string& method, const std::string& code);
  // A verification run that ended: "passed" or "failed".
  void CountVerification(const std::string& result);
  std::map<std::pair<std::string, std::string>, uint64_t> Rpcs() const;
  std::map<std::string, uint64_t> Verifications() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> rpcs_;
  std::map<std::string, uint64_t> verifications_;
};

// Every family /metrics may carry, declared (HELP and TYPE) even when no
// session has a sample for it: a dashboard's queries and promtool see the
// same names on an idle controller as on a busy one.
void DeclareSessionFamilies(web::Exposition* out);
// Samples of one session that `st` shows: its info, its run and baseline,
// and (while its job runs) every rank's latest window.
void AddSessionSamples(const v1::SessionStatus& st, web::Exposition* out);

struct ControllerSnapshot {
  std::map<std::string, int> sessions_by_state;  // every session the controller holds
  uint64_t agents_accepted = 0, agents_refused = 0;
  int agents_connected = 0;
  std::map<std::pair<std::string, std::string>, uint64_t> rpcs;
  std::map<std::string, uint64_t> verifications;
  uint64_t http_requests = 0;
  int http_connections = 0;
  double uptime_s = 0;
  std::string version;
};
void AddControllerSamples(const ControllerSnapshot& c, web::Exposition* out);

}  // namespace firedrill::controller
