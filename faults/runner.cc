#include "faults/runner.h"

#include "faults/registry.h"

namespace firedrill::faults {

bool ActiveAt(const v1::ResolvedFault& f, int64_t step) {
  if (step < f.trigger_step()) return false;
  if (f.until_step() > 0 && step >= f.until_step()) return false;
  if (f.flap_on_steps() > 0 && f.flap_off_steps() > 0) {
    const int64_t period = static_cast<int64_t>(f.flap_on_steps()) + f.flap_off_steps();
    return (step - f.trigger_step()) % period < f.flap_on_steps();
  }
  return true;
}

StatusOr<std::unique_ptr<FaultRunner>> FaultRunner::Create(const std::vector<v1::ResolvedFault>& faults) {
  auto runner = std::make_unique<FaultRunner>();
  for (size_t i = 0; i < faults.size(); ++i) {
    const v1::ResolvedFault& f = faults[i];
    const FaultKind* kind = FindFaultKind(f.kind());
    if (kind == nullptr) return InvalidArgument("unknown fault kind '" + f.kind() + "'");
    if (!kind->make) continue;
    runner->entries_.push_back({f, kind->make(f, static_cast<FaultId>(i))});
  }
  return runner;
}

Status FaultRunner::At(int64_t step, Seams& seams) {
  for (auto& e : entries_) {
    const bool active = ActiveAt(e.spec, step);
    if (active == e.applied) continue;
    Status st = active ? e.fault->Apply(seams) : e.fault->Recover(seams);
    if (!st.ok()) {
      return Status(st.code(), std::string(active ? "applying" : "recovering") + " fault " + e.spec.kind() +
                                   " at step " + std::to_string(step) + ": " + st.message());
    }
    e.applied = active;
  }
  return Status::Ok();
}

void FaultRunner::RecoverAll(Seams& seams) {
  for (auto& e : entries_) {
    if (!e.applied) continue;
    (void)e.fault->Recover(seams);  // best effort: the run is over either way
    e.applied = false;
  }
}

int FaultRunner::applied() const {
  int n = 0;
  for (const auto& e : entries_) n += e.applied ? 1 : 0;
  return n;
}

}  // namespace firedrill::faults
