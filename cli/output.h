// How the CLI prints: aligned tables for a terminal, JSON for --json, and a
// progress bar on stderr when it is a terminal.
#pragma once

#include <google/protobuf/message.h>

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
void PrintScore(const v1::ScoreReport& r, std::ostream& out);

// Redraws one line on stderr if it is a terminal; otherwise silent.
class Progress {
 public:
  explicit Progress(std::string label) : label_(std::move(label)) {}
  ~Progress() { Done(); }
  void Update(const std::string& phase, int64_t done, int64_t total);
  void Done();

 private:
  std::string label_;
  bool drawn_ = false;
};

}  // namespace firedrill::cli
