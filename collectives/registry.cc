#include "collectives/internal.h"

namespace firedrill::collectives {

const std::vector<const Collective*>& All() {
  static const std::vector<const Collective*> all = {&kAllReduce, &kAllGather, &kReduceScatter, &kP2p,
                                                     &kBroadcast, &kSend,      &kRecv,          &kBarrier};
  return all;
}

const Collective* Find(std::string_view name) {
  for (const Collective* c : All())
    if (name == c->name) return c;
  return nullptr;
}

std::string ProbeNames() {
  std::string out;
  for (const Collective* c : All())
    if (c->probe) out += (out.empty() ? "" : ", ") + std::string(c->name);
  return out;
}

}  // namespace firedrill::collectives
