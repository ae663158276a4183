// Numbers as people read them in tables and messages.
#pragma once

#include <cstdint>
#include <string>

namespace firedrill {

// Fixed point with `precision` decimals: Num(3.14159, 2) == "3.14".
std::string Num(double v, int precision = 0);
// Four significant digits, as printf's %.4g: Sig(0.02) == "0.02",
// Sig(16777216) == "1.678e+07".
std::string Sig(double v);
// A byte count in binary units: "512 B", "41.2 MiB".
std::string Bytes(int64_t n);

}  // namespace firedrill
