// Each candidate's variant of an exam item: the session seed its drill is
// drawn from (culprit rank, trigger step, ...) and, for an item drawn from a
// pool, which scenario. Both come from HMAC-SHA256 under the exam's secret
// (kept in the controller's private state), so two candidates get different
// drills, a candidate who reconnects gets the same one, and knowing one
// candidate's variant tells nothing about another's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace firedrill::controller {

struct ItemVariant {
  int64_t seed = 0;       // 1 .. 2^31-1: a valid session seed
  size_t pool_index = 0;  // which scenario of the item's pool (0 for one scenario)
};

ItemVariant DrawItemVariant(const std::string& exam_secret, const std::string& exam_id,
                            const std::string& candidate, int item_index, size_t pool_size);

}  // namespace firedrill::controller
