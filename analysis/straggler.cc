#include "analysis/straggler.h"

#include <algorithm>

#include "common/format.h"
#include "common/stats.h"

namespace firedrill::analysis {

double RankBusyMs(const v1::RankStatus& r) {
  // A pipeline stage blocked on its neighbour is waiting, as a rank in the
  // gradient all-reduce is.
  return std::max(0.0, r.step_ms() - r.comm_ms() - r.pp_wait_ms() - r.checkpoint_ms());
}

int FindStraggler(const v1::SessionStatus& st, double min_ratio, std::string* why) {
  int best = -1;
  double best_busy = 0;
  std::vector<double> busy;
  for (const auto& r : st.ranks()) {
    if (r.window_steps() == 0) continue;
    const double b = RankBusyMs(r);
    busy.push_back(b);
    if (b > best_busy) {
      best_busy = b;
      best = r.rank();
    }
  }
  if (best < 0) return -1;
  const double med = Median(busy);
  if (med <= 0 || best_busy / med < min_ratio) return -1;
  const auto& r = st.ranks(best);
  double others_wait = 0;
  int n = 0;
  for (const auto& o : st.ranks()) {
    if (o.rank() != best && o.window_steps() > 0) {
      others_wait += o.comm_ms();
      ++n;
    }
  }
  if (why) {
    *why = "rank " + std::to_string(best) + " (" + r.host() + ") is busy " + Num(best_busy, 1) +
           " ms per step (forward " + Num(r.forward_ms(), 1) + " + backward " + Num(r.backward_ms(), 1) +
           ") against a median of " + Num(med, 1) + " ms: " + Num(best_busy / med, 2) + "x.\n" +
           "the other ranks wait " + Num(n ? others_wait / n : 0, 1) + " ms per step in the gradient all-reduce; rank " +
           std::to_string(best) + " waits " + Num(r.comm_ms(), 1) + " ms. Everyone is waiting for rank " +
           std::to_string(best) + ": its compute is slow, not its data or its network.";
  }
  return best;
}

}  // namespace firedrill::analysis
