#include "faults/corrupt_checkpoint.h"

#include <string>

namespace firedrill::faults {

Status CorruptCheckpoint::Apply(Seams& s) {
  if (!s.host) return MissingSeam("corrupt_checkpoint", "host");
  FD_RETURN_IF_ERROR(s.host->DamageShards(id_, p_.damage(), p_.checkpoints(), seed_));
  return s.host->Crash(id_, "the host went down (power loss)");
}

Status CorruptCheckpoint::Recover(Seams&) {
  return Status::Ok();  // damaged files stay damaged; the host came back on its own
}

Status ValidateCorruptCheckpoint(const v1::FaultSpec& spec) {
  const auto& p = spec.corrupt_checkpoint();
  if (p.damage() != "bit_rot" && p.damage() != "truncated")
    return InvalidArgument("params.damage must be \"bit_rot\" or \"truncated\", got \"" + p.damage() + "\"");
  if (p.checkpoints() < 1 || p.checkpoints() > 8)
    return InvalidArgument("params.checkpoints must be 1..8 (the newest checkpoints whose shard on the host is "
                           "damaged), got " + std::to_string(p.checkpoints()));
  return Status::Ok();
}

}  // namespace firedrill::faults
