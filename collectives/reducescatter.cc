// reduce_scatter (sum): rank r gets the sum of every rank's part r. A ring
// moves (n-1)/n of the whole buffer over each rank's link. Gloo in LibTorch
// 1.13 has none; the agent runs an all-to-all and sums locally, which moves
// the same bytes.
#include "collectives/internal.h"

namespace firedrill::collectives {

const Collective kReduceScatter = {
    "reducescatter",
    "reduce_scatter",
    "sum",
    true,
    [](int64_t bytes, int n) -> int64_t { return n <= 1 ? 0 : bytes * (n - 1) / n; },
    [](int n) { return n <= 1 ? 0.0 : static_cast<double>(n - 1) / n; },
    [](int64_t size, int n) {
      const int64_t count = Divisible(Elements(size), n);
      return Buffers{count, count, count / n};
    },
    [](int rank, int, int64_t, int64_t i) { return Pattern(rank, i); },
    [](int rank, int n, int64_t part, int64_t i) { return PatternSum(n, rank * part + i); },
};

}  // namespace firedrill::collectives
