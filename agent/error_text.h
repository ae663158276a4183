// An exception's message for a Status: LibTorch's errors without the C++
// backtrace c10 appends to what(), anything else as is.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace firedrill::agent {

inline std::string ErrorText(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}

}  // namespace firedrill::agent
