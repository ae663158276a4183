// Wall-clock time as the controller stores it.
#pragma once

#include <chrono>
#include <cstdint>

namespace firedrill {

inline int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace firedrill
