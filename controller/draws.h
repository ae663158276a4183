// The seed a session's draws (culprit rank, trigger step, ...) come from.
// A learner sees the session seed, and the scenario files and the draw code
// are public, so draws from the seed alone could be computed offline. They
// come from HMAC-SHA256(the controller's draw key, seed) instead: the same
// seed gives the same drill on the same controller (practice can be
// repeated), and only someone who can read the key (the state dir's owner)
// can work a culprit out.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace firedrill::controller {

// The key in `path` (32 random bytes, hex), created owner-only if missing.
StatusOr<std::string> LoadOrCreateDrawKey(const std::string& path);

// The seed the draws of session seed `seed` use under `key`.
uint64_t DrawSeed(const std::string& key, int64_t seed);

}  // namespace firedrill::controller
