// The Gloo backend: c10d's ProcessGroupGloo behind the Backend interface.
// Includes c10d: for agent/comm/ only (process_group.h is the door for the
// rest of the agent).
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "agent/comm/backend.h"
#include "agent/comm/process_group.h"

namespace firedrill::agent::comm {

// Builds the group over `store` for `opts`' rank, world size, device
// (socket_ifname, GLOO_SOCKET_IFNAME's meaning, else device_host's address)
// and timeout (Gloo's own, for the rendezvous and every collective): blocks
// until every rank has joined or the timeout passes. Errors say world size
// and timeout. The options' recorder and link are the decorators' business.
StatusOr<std::shared_ptr<Backend>> ConnectGloo(const c10::intrusive_ptr<c10d::Store>& store, const GroupOptions& opts);

// Benchmarks only: times in-place fp32 sum all-reduces of each size,
// `warmup` untimed then `iters` timed, straight on a new ProcessGroupGloo
// over `store`, with nothing of ours in between. Mean microseconds per
// iteration, per size.
StatusOr<std::vector<double>> RawGlooAllReduceUs(const c10::intrusive_ptr<c10d::Store>& store,
                                                 const GroupOptions& opts, const std::vector<int64_t>& sizes,
                                                 int warmup, int iters);

// c10d's exceptions as a message without the C++ backtrace, and as a Status
// whose code says whether it was a timeout (DeadlineExceeded) or anything
// else (Unavailable: a peer gone, a connection refused).
std::string Describe(std::exception_ptr ep);
Status CommError(const std::string& what, const std::string& cause);
Status TransportError(const std::string& cause);

}  // namespace firedrill::agent::comm
