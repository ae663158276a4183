#include "controller/exam/exam_clock.h"

namespace firedrill::controller {

int ExamClock::DueWarning(int64_t now_ms, const std::set<int>& posted) const {
  if (Expired(now_ms)) return 0;
  const int64_t left = RemainingMs(now_ms);
  int due = 0;
  for (int m : kExamWarningMinutes) {
    const int64_t mark_ms = int64_t{m} * 60 * 1000;
    if (mark_ms >= limit_ms_ || left > mark_ms) continue;
    if (!posted.count(m)) due = m;  // marks go largest first: the last reached is the smallest
  }
  // A smaller mark already posted settles the larger ones.
  for (int m : posted)
    if (due != 0 && m < due) return 0;
  return due;
}

std::vector<int> ExamClock::Settled(int minutes) {
  std::vector<int> out;
  for (int m : kExamWarningMinutes)
    if (m >= minutes) out.push_back(m);
  return out;
}

}  // namespace firedrill::controller
