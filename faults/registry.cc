#include "faults/registry.h"

#include <thread>

#include "faults/straggler.h"

namespace firedrill::faults {

namespace {
class SleepingEnv : public Env {
 public:
  void SleepFor(Nanos d) override { std::this_thread::sleep_for(d); }
};
}  // namespace

Env& RealEnv() {
  static SleepingEnv env;
  return env;
}

const std::vector<FaultKind>& BuiltinFaultKinds() {
  static const std::vector<FaultKind> kinds = {
      {"straggler", Scope::kHost, ValidateStraggler,
       [](const v1::ResolvedFault& f, Env& env) -> std::unique_ptr<Fault> {
         return std::make_unique<Straggler>(f.straggler().slowdown(), env);
       }},
  };
  return kinds;
}

const FaultKind* FindFaultKind(const std::string& name) {
  for (const auto& k : BuiltinFaultKinds()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::vector<std::string> FaultKindNames() {
  std::vector<std::string> names;
  for (const auto& k : BuiltinFaultKinds()) names.push_back(k.name);
  return names;
}

}  // namespace firedrill::faults

namespace firedrill::faults {

const std::vector<std::string>& KnownCauses() {
  static const std::vector<std::string> causes = {
      "straggler",          "slow-link",           "data-loader-starvation", "collective-hang",
      "rank-crash",         "fp16-overflow",       "lr-divergence",          "silent-divergence",
      "grad-accumulation-bug", "corrupt-checkpoint", "resume-without-state", "padding-waste",
      "out-of-memory",      "collective-timeout",  "small-buckets",
  };
  return causes;
}

bool IsKnownCause(const std::string& cause) {
  for (const auto& c : KnownCauses()) {
    if (c == cause) return true;
  }
  return false;
}

}  // namespace firedrill::faults
