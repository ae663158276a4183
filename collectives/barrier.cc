// barrier (c10d's monitored barrier): a rendezvous, no payload.
#include "collectives/internal.h"

namespace firedrill::collectives {

const Collective kBarrier = {
    "barrier", "", "none", false, [](int64_t, int) -> int64_t { return 0; }, [](int) { return 0.0; },
    NoBuffers, NoValue,        NoValue,
};

}  // namespace firedrill::collectives
