// all_gather: rank r's part lands at r x part in every rank's output. A ring
// moves (n-1)/n of the whole buffer over each rank's link.
#include "collectives/internal.h"

namespace firedrill::collectives {

const Collective kAllGather = {
    "allgather",
    "all_gather",
    "none",
    true,
    [](int64_t bytes, int n) -> int64_t { return n <= 1 ? 0 : bytes * (n - 1) / n; },
    [](int n) { return n <= 1 ? 0.0 : static_cast<double>(n - 1) / n; },
    [](int64_t size, int n) {
      const int64_t count = Divisible(Elements(size), n);
      return Buffers{count, count / n, count};
    },
    [](int rank, int, int64_t part, int64_t i) { return Pattern(rank, rank * part + i); },
    [](int, int, int64_t part, int64_t i) { return Pattern(static_cast<int>(i / part), i); },
};

}  // namespace firedrill::collectives
