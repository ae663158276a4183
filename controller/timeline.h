// A session's shared timeline: who did what and when, for everyone on it.
// Participants' actions (tool runs, notes, status updates, proposed and
// submitted diagnoses, the fix, hints) and the controller's own events
// (baseline, verification, scored) in one numbered sequence, stored before
// anyone is told, and a wait for what comes next so that each viewer's
// stream (WatchTimeline) costs a condition variable, not a poll.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "firedrill/v1/controller.pb.h"

namespace firedrill::controller {

class Store;

class Timeline {
 public:
  explicit Timeline(Store* store) : store_(store) {}
  StatusOr<v1::TimelineItem> Append(const std::string& session_id, int64_t unix_ms, const std::string& who,
                                    const std::string& role, const std::string& kind,
                                    const std::string& text);
  StatusOr<std::vector<v1::TimelineItem>> After(const std::string& session_id, int64_t after_seq);
  // Returns when session `session_id` has an entry after `after_seq`, or
  // after `at_most` (whichever first).
  void WaitAfter(const std::string& session_id, int64_t after_seq, std::chrono::milliseconds at_most);

 private:
  Store* store_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, int64_t> newest_;  // session -> its newest seq, once appended here
};

}  // namespace firedrill::controller
