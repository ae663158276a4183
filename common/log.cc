#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace firedrill {

void InitLogging(const std::string& name) {
  auto logger = spdlog::stderr_color_mt(name);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [" + name + "] %v");
  spdlog::set_default_logger(logger);
  const char* level = std::getenv("FIREDRILL_LOG");
  spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
}

}  // namespace firedrill
