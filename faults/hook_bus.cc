#include "faults/hook_bus.h"

#include "faults/registry.h"

namespace firedrill::faults {

StatusOr<std::unique_ptr<HookBus>> HookBus::Create(const std::vector<v1::ResolvedFault>& faults, Env& env) {
  auto bus = std::make_unique<HookBus>();
  for (const auto& f : faults) {
    const FaultKind* kind = FindFaultKind(f.kind());
    if (kind == nullptr) return InvalidArgument("unknown fault kind '" + f.kind() + "'");
    bus->entries_.push_back({f.trigger_step(), kind->make(f, env)});
  }
  return bus;
}

}  // namespace firedrill::faults
