// The collectives' definitions, one per file; the registry lists them.
#pragma once

#include <algorithm>

#include "collectives/collective.h"

namespace firedrill::collectives {

extern const Collective kAllReduce;      // allreduce.cc
extern const Collective kAllGather;      // allgather.cc
extern const Collective kReduceScatter;  // reducescatter.cc
extern const Collective kBroadcast;      // broadcast.cc
extern const Collective kP2p, kSend, kRecv;  // p2p.cc
extern const Collective kBarrier;        // barrier.cc

// Helpers shared by the definitions.
inline int64_t Elements(int64_t size_bytes) { return std::max<int64_t>(1, size_bytes / 4); }
// A buffer split evenly over the ranks: at least one element each.
inline int64_t Divisible(int64_t count, int world) { return std::max<int64_t>(world, count / world * world); }
inline double NoFactor(int) { return 1.0; }
inline float NoValue(int, int, int64_t, int64_t) { return 0.0f; }
inline Buffers NoBuffers(int64_t, int) { return Buffers{}; }

}  // namespace firedrill::collectives
