#include "faults/registry.h"

#include <thread>

#include "faults/collective_desync.h"
#include "faults/comm_misconfig.h"
#include "faults/dataloader_starvation.h"
#include "faults/padding_waste.h"
#include "faults/slow_link.h"
#include "faults/straggler.h"
#include "faults/tiny_buckets.h"

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
       },
       nullptr},
      {"dataloader_starvation", Scope::kHost, ValidateDataLoaderStarvation,
       [](const v1::ResolvedFault& f, Env&) -> std::unique_ptr<Fault> {
         return std::make_unique<DataLoaderStarvation>(f.dataloader_starvation().sample_latency_ms());
       },
       ApplyDataLoaderStarvation},
      {"padding_waste", Scope::kRank, ValidatePaddingWaste,
       [](const v1::ResolvedFault&, Env&) -> std::unique_ptr<Fault> { return std::make_unique<PaddingWaste>(); },
       ApplyPaddingWaste},
      {"tiny_buckets", Scope::kRank, ValidateTinyBuckets,
       [](const v1::ResolvedFault&, Env&) -> std::unique_ptr<Fault> { return std::make_unique<TinyBuckets>(); },
       ApplyTinyBuckets},
      {"collective_desync", Scope::kRank, ValidateCollectiveDesync,
       [](const v1::ResolvedFault&, Env&) -> std::unique_ptr<Fault> { return std::make_unique<CollectiveDesync>(); },
       ApplyCollectiveDesync},
      {"comm_misconfig", Scope::kHost, ValidateCommMisconfig,
       [](const v1::ResolvedFault& f, Env&) -> std::unique_ptr<Fault> {
         return std::make_unique<CommMisconfig>(f.comm_misconfig().socket_ifname());
       },
       nullptr},
      {"slow_link", Scope::kHost, ValidateSlowLink,
       [](const v1::ResolvedFault& f, Env&) -> std::unique_ptr<Fault> {
         return std::make_unique<SlowLink>(f.slow_link().latency_us(), f.slow_link().bandwidth_gbps());
       },
       nullptr},
  };
  return kinds;
}

const FaultKind* FindFaultKind(const std::string& name) {
  for (const auto& k : BuiltinFaultKinds()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

void ApplyFaultsToJob(const std::vector<v1::ResolvedFault>& faults, v1::JobSpec* job) {
  for (const auto& f : faults) {
    const FaultKind* k = FindFaultKind(f.kind());
    if (k != nullptr && k->apply_to_job) k->apply_to_job(f, job);
  }
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
      "out-of-memory",      "collective-timeout",  "small-buckets",          "comm-misconfig",
  };
  return causes;
}

bool IsKnownCause(const std::string& cause) {
  for (const auto& c : KnownCauses()) {
    if (c == cause) return true;
  }
  return false;
}

std::string CauseClass(const std::string& cause) {
  static const std::vector<std::pair<std::string, std::string>> classes = {
      {"straggler", "compute"},
      {"data-loader-starvation", "input pipeline"},
      {"padding-waste", "input pipeline"},
      {"slow-link", "communication"},
      {"small-buckets", "communication"},
      {"comm-misconfig", "communication"},
      {"collective-hang", "communication"},
      {"collective-timeout", "communication"},
      {"fp16-overflow", "numerics"},
      {"lr-divergence", "numerics"},
      {"silent-divergence", "numerics"},
      {"grad-accumulation-bug", "numerics"},
      {"corrupt-checkpoint", "state"},
      {"resume-without-state", "state"},
      {"out-of-memory", "memory"},
      {"rank-crash", "process"},
  };
  for (const auto& [c, k] : classes)
    if (c == cause) return k;
  return "";
}

}  // namespace firedrill::faults
