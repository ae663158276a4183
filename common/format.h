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
// A loss scale: as a whole number from 1 up (16777216), in significant
// digits below (a dynamic scale backed off to 6.939e-18), 0 as 0.
std::string ScaleText(double v);
// A byte count in binary units: "512 B", "41.2 MiB".
std::string Bytes(int64_t n);
// The last column of a part-by-part checkpoint comparison (firedrill-ckpt
// diff, probe resume): "-" (the same), a blob's two values "A | B", "only
// one holds them", "max |diff| 0.0123" (inf, or nan where a value went
// NaN), or "other bytes" (the same values in other bits: -0.0 against 0.0,
// NaN payloads, another dtype).
std::string PartDiffText(int differ, int missing, double max_abs_diff, const std::string& a, const std::string& b);

}  // namespace firedrill
