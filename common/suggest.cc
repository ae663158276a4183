#include "common/suggest.h"

#include <algorithm>
#include <cctype>

namespace firedrill {

namespace {

std::string Fold(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string ClosestMatch(const std::string& got, const std::vector<std::string>& options) {
  const std::string g = Fold(got);
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& o : options) {
    const size_t d = EditDistance(g, Fold(o));
    if (d < best_d) {
      best_d = d;
      best = o;
    }
  }
  const size_t limit = std::max<size_t>(2, g.size() / 3);
  return best_d <= limit && best != got ? best : "";
}

std::string DidYouMean(const std::string& got, const std::vector<std::string>& options) {
  const std::string m = ClosestMatch(got, options);
  return m.empty() ? "" : "; did you mean '" + m + "'?";
}

}  // namespace firedrill
