// Logging goes through spdlog; this header keeps the setup in one place.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace firedrill {

// Sets the default logger's name and pattern; level from FIREDRILL_LOG
// (trace|debug|info|warn|error), default info.
void InitLogging(const std::string& name);

}  // namespace firedrill
