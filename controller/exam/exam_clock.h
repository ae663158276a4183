// An exam's clock is the controller's: it starts when the candidate starts,
// runs through disconnects, warns at 30, 15 and 5 minutes left, and stops
// everything at the limit. Times are passed in (unix ms), so tests move the
// clock instead of waiting for it.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace firedrill::controller {

// Minutes left at which a candidate is warned, largest first.
inline constexpr int kExamWarningMinutes[] = {30, 15, 5};

class ExamClock {
 public:
  ExamClock(int64_t started_unix_ms, int64_t limit_ms) : started_ms_(started_unix_ms), limit_ms_(limit_ms) {}

  int64_t started_ms() const { return started_ms_; }
  int64_t deadline_ms() const { return started_ms_ + limit_ms_; }
  int64_t RemainingMs(int64_t now_ms) const { return now_ms >= deadline_ms() ? 0 : deadline_ms() - now_ms; }
  bool Expired(int64_t now_ms) const { return now_ms >= deadline_ms(); }

  // The warning to post at `now_ms`, given the marks already posted: the
  // smallest mark reached and not posted, or 0 for none. Marks at or above
  // the limit never come due (a 20-minute exam is warned at 15 and 5), and
  // after the limit nothing does. A controller that was down across two
  // marks posts only the nearer one: "30 minutes left" with 4 left misleads.
  int DueWarning(int64_t now_ms, const std::set<int>& posted) const;
  // The marks a posted warning of `minutes` settles: itself and every larger
  // one (never posted late).
  static std::vector<int> Settled(int minutes);

 private:
  int64_t started_ms_;
  int64_t limit_ms_;
};

}  // namespace firedrill::controller
