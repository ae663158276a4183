// "Did you mean ...?" for mistyped names (commands, causes, scenario ids,
// settings).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace firedrill {

// Levenshtein distance (insertions, deletions, substitutions).
size_t EditDistance(const std::string& a, const std::string& b);

// The option closest to `got` by edit distance, ignoring case and treating
// '_' as '-', if it is close enough to be a typo; "" otherwise.
std::string ClosestMatch(const std::string& got, const std::vector<std::string>& options);

// "; did you mean 'X'?" or "".
std::string DidYouMean(const std::string& got, const std::vector<std::string>& options);

}  // namespace firedrill
