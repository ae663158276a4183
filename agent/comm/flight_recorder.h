// Each rank's ring buffer of its most recent collectives, like PyTorch's
// NCCL flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE): sequence number, op,
// bytes, state and wall-clock start/end. It outlives the process group, so a
// rank whose group failed can still say what it was doing. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace firedrill::agent::comm {

struct FrEntry {
  int64_t seq = 0;
  std::string op;         // allreduce | broadcast | barrier (training); any collective's name (collectives/)
  int64_t bytes = 0;
  int64_t step = 0;
  std::string transport;  // gloo | shm
  std::string state;      // started | completed | failed
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;  // 0 while started
  std::string error;        // failed: the library's message
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity = 128) : capacity_(capacity) {}
  void Started(int64_t seq, const std::string& op, int64_t bytes, int64_t step, const std::string& transport);
  // Marks the newest entry with `seq` completed (error empty) or failed.
  void Finished(int64_t seq, const std::string& error);
  // Oldest first.
  std::vector<FrEntry> Snapshot() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<FrEntry> entries_;
};

int64_t UnixNowNs();

}  // namespace firedrill::agent::comm
