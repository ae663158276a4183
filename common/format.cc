#include "common/format.h"

#include <cmath>
#include <cstdio>
#include <iterator>

namespace firedrill {

std::string Num(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

std::string Sig(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

std::string ScaleText(double v) { return v >= 1 || v == 0 ? Num(v) : Sig(v); }

std::string PartDiffText(int differ, int missing, double max_abs_diff, const std::string& a, const std::string& b) {
  if (differ == 0) return "-";
  if (!a.empty() || !b.empty()) return a + " | " + b;
  if (missing == differ) return "only one holds them";
  if (max_abs_diff > 0 || std::isnan(max_abs_diff)) {
    char buf[48];
    std::snprintf(buf, sizeof(buf), "max |diff| %.3g", max_abs_diff);
    return buf;
  }
  return "other bytes";
}

std::string Bytes(int64_t n) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int unit = 0;
  while (std::abs(v) >= 1024 && unit + 1 < static_cast<int>(std::size(kUnits))) {
    v /= 1024;
    ++unit;
  }
  return (unit == 0 ? Num(v) : Num(v, 1)) + " " + kUnits[unit];
}

}  // namespace firedrill
