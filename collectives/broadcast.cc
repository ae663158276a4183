// broadcast from a root: every rank ends with the root's buffer; each link
// carries the whole buffer once.
#include "collectives/internal.h"

namespace firedrill::collectives {

const Collective kBroadcast = {
    "broadcast",
    "broadcast",
    "none",
    false,
    [](int64_t bytes, int n) -> int64_t { return n <= 1 ? 0 : bytes; },
    [](int n) { return n <= 1 ? 0.0 : 1.0; },
    NoBuffers,
    NoValue,
    NoValue,
};

}  // namespace firedrill::collectives
