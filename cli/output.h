// How the CLI prints: aligned tables for a terminal, JSON for --json, and a
// progress bar on stderr when it is a terminal.
#pragma once

#include <google/protobuf/message.h>

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/format.h"
#include "firedrill/v1/controller.pb.h"

namespace firedrill::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string ToJson(const google::protobuf::Message& msg);
// The same on one line (for streams of objects, such as `top --json`).
std::string ToJsonLine(const google::protobuf::Message& msg);

void PrintScenarios(const v1::ListScenariosResponse& r, std::ostream& out);
void PrintScenarioDetail(const v1::ScenarioDetail& d, std::ostream& out);
void PrintSessions(const v1::ListSessionsResponse& r, std::ostream& out);
void PrintStatus(const v1::SessionStatus& st, std::ostream& out);
// A running rank that stopped reporting steps: none for 5 s and for at least
// 20 of its own step times (stuck in a collective, a loader, a hang).
bool Stalled(const v1::RankStatus& r);
// True once a session is over: scored, ended or aborted.
bool SessionOver(const std::string& state);
// The job's settings, one `key = value  # class` line each, with the dotted
// keys `fix --set` takes and each key's class (workload, operational,
// environment); unset (default) fields are left out.
void PrintConfig(const v1::SessionStatus& st, std::ostream& out);
void PrintVerification(const v1::Verification& v, std::ostream& out);
// `ckpt list`: newest first, each with its verification and the steps a
// resume from it would redo; `ckpt verify`: one checkpoint.
void PrintCheckpoints(const v1::ListCheckpointsResponse& r, std::ostream& out);
void PrintCheckpointVerify(const v1::VerifyCheckpointResponse& r, std::ostream& out);
// "throughput_drop on rank 3 + ...": a diagnosis's findings as the CLI writes them.
std::string FindingsText(const google::protobuf::RepeatedPtrField<v1::Finding>& fs);
// "--set k=v --replace-host 2": a fix as the command line that applies it.
std::string FixText(const v1::ApplyFixRequest& f);
void PrintScore(const v1::ScoreReport& r, std::ostream& out);

// Redraws one line on stderr if it is a terminal; otherwise silent.
class Progress {
 public:
  explicit Progress(std::string label) : label_(std::move(label)) {}
  ~Progress() { Done(); }
  // `done` of `total` steps of `phase` (total 0: no count, just the phase).
  // With a count, the bar says how long the rest should take at the rate
  // measured since this phase's first update.
  void Update(const std::string& phase, int64_t done, int64_t total);
  void Done();
  // "about 12 s left" from a phase's progress so far; "" until it can say.
  static std::string Estimate(int64_t done_then, int64_t done_now, int64_t total, double seconds_between);

 private:
  std::string label_;
  bool drawn_ = false;
  std::string phase_;  // the phase the estimate is measured in
  int64_t total_ = 0;
  int64_t first_done_ = -1;
  std::chrono::steady_clock::time_point first_at_;
};

}  // namespace firedrill::cli
