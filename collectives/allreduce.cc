// all_reduce (sum), in place: every rank ends with the sum of every rank's
// buffer. A ring moves 2(n-1)/n of the buffer over each rank's link (a
// reduce-scatter, then an all-gather).
#include "collectives/internal.h"

namespace firedrill::collectives {

const Collective kAllReduce = {
    "allreduce",
    "all_reduce",
    "sum",
    true,
    [](int64_t bytes, int n) -> int64_t { return n <= 1 ? 0 : 2 * bytes * (n - 1) / n; },
    [](int n) { return n <= 1 ? 0.0 : 2.0 * (n - 1) / n; },
    [](int64_t size, int) {
      const int64_t count = Elements(size);
      return Buffers{count, count, 0};
    },
    [](int rank, int, int64_t, int64_t i) { return Pattern(rank, i); },
    [](int, int n, int64_t, int64_t i) { return PatternSum(n, i); },
};

}  // namespace firedrill::collectives
