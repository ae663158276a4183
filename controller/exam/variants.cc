#include "controller/exam/variants.h"

#include "controller/exam/crypto.h"

namespace firedrill::controller {

namespace {

uint64_t Draw(const std::string& secret, const std::string& label, const std::string& exam_id,
              const std::string& candidate, int item_index) {
  // Lengths before each part: "ab"+"c" and "a"+"bc" are different messages.
  std::string msg = "firedrill exam " + label;
  for (const std::string& part : {exam_id, candidate, std::to_string(item_index)})
    msg += "\n" + std::to_string(part.size()) + ":" + part;
  const std::string mac = HmacSha256(secret, msg);
  uint64_t out = 0;
  for (int i = 0; i < 8; ++i) out = (out << 8) | static_cast<unsigned char>(mac[i]);
  return out;
}

}  // namespace

ItemVariant DrawItemVariant(const std::string& exam_secret, const std::string& exam_id,
                            const std::string& candidate, int item_index, size_t pool_size) {
  ItemVariant v;
  constexpr uint64_t kSeeds = (uint64_t{1} << 31) - 1;
  v.seed = static_cast<int64_t>(Draw(exam_secret, "seed", exam_id, candidate, item_index) % kSeeds) + 1;
  if (pool_size > 1) v.pool_index = Draw(exam_secret, "pool", exam_id, candidate, item_index) % pool_size;
  return v;
}

}  // namespace firedrill::controller
