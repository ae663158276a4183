#include "agent/comm/flight_recorder.h"

#include <chrono>

namespace firedrill::agent::comm {

int64_t UnixNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void FlightRecorder::Started(int64_t seq, const std::string& op, int64_t bytes, int64_t step,
                             const std::string& transport) {
  FrEntry e;
  e.seq = seq;
  e.op = op;
  e.bytes = bytes;
  e.step = step;
  e.transport = transport;
  e.state = "started";
  e.start_unix_ns = UnixNowNs();
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_back(std::move(e));
  while (entries_.size() > capacity_) entries_.pop_front();
}

void FlightRecorder::Finished(int64_t seq, const std::string& error) {
  const int64_t now = UnixNowNs();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->seq != seq) continue;
    it->state = error.empty() ? "completed" : "failed";
    it->end_unix_ns = now;
    it->error = error;
    return;
  }
}

std::vector<FrEntry> FlightRecorder::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {entries_.begin(), entries_.end()};
}

}  // namespace firedrill::agent::comm
