#include "faults/registry.h"

#include "faults/checkpoint_cadence.h"
#include "faults/checkpoint_load.h"
#include "faults/collective_desync.h"
#include "faults/comm_misconfig.h"
#include "faults/corrupt_checkpoint.h"
#include "faults/dataloader_starvation.h"
#include "faults/deploy_change.h"
#include "faults/device_memory.h"
#include "faults/fp16_overflow.h"
#include "faults/grad_accumulation.h"
#include "faults/lr_rule.h"
#include "faults/padding_waste.h"
#include "faults/rank_crash.h"
#include "faults/resume_without_state.h"
#include "faults/silent_divergence.h"
#include "faults/slow_link.h"
#include "faults/stale_accumulation.h"
#include "faults/straggler.h"
#include "faults/tiny_buckets.h"

namespace firedrill::faults {

const std::vector<FaultKind>& BuiltinFaultKinds() {
  static const std::vector<FaultKind> kinds = {
      {"straggler", Scope::kHost, ValidateStraggler,
       [](const v1::ResolvedFault& f, FaultId id) -> std::unique_ptr<Fault> {
         return std::make_unique<Straggler>(id, f.straggler().slowdown());
       },
       nullptr},
      {"dataloader_starvation", Scope::kHost, ValidateDataLoaderStarvation,
       [](const v1::ResolvedFault& f, FaultId id) -> std::unique_ptr<Fault> {
         return std::make_unique<DataLoaderStarvation>(id, f.dataloader_starvation().sample_latency_ms());
       },
       ApplyDataLoaderStarvation},
      {"padding_waste", Scope::kRank, ValidatePaddingWaste,
       nullptr, ApplyPaddingWaste},
      {"tiny_buckets", Scope::kRank, ValidateTinyBuckets,
       nullptr, ApplyTinyBuckets},
      {"collective_desync", Scope::kRank, ValidateCollectiveDesync,
       nullptr, ApplyCollectiveDesync},
      {"fp16_overflow", Scope::kRank, ValidateFp16Overflow,
       nullptr, ApplyFp16Overflow},
      {"lr_rule", Scope::kRank, ValidateLrRule,
       nullptr, ApplyLrRule},
      {"grad_accumulation", Scope::kRank, ValidateGradAccumulation,
       nullptr, ApplyGradAccumulation},
      {"device_memory", Scope::kRank, ValidateDeviceMemory,
       nullptr, ApplyDeviceMemory},
      {"resume_without_state", Scope::kRank, ValidateResumeWithoutState,
       nullptr, ApplyResumeWithoutState},
      {"checkpoint_cadence", Scope::kRank, ValidateCheckpointCadence,
       nullptr, ApplyCheckpointCadence},
      {"stale_accumulation", Scope::kRank, ValidateStaleAccumulation,
       nullptr, ApplyStaleAccumulation},
      {"checkpoint_load", Scope::kRank, ValidateCheckpointLoad,
       nullptr, ApplyCheckpointLoad},
      {"deploy_change", Scope::kRank, ValidateDeployChange,
       nullptr, ApplyDeployChange},
      {"comm_misconfig", Scope::kHost, ValidateCommMisconfig,
       [](const v1::ResolvedFault& f, FaultId id) -> std::unique_ptr<Fault> {
         return std::make_unique<CommMisconfig>(id, f.comm_misconfig().socket_ifname());
       },
       nullptr, /*at_start=*/true},
      {"silent_divergence", Scope::kHost, ValidateSilentDivergence,
       [](const v1::ResolvedFault& f, FaultId id) -> std::unique_ptr<Fault> {
         return std::make_unique<SilentDivergence>(id, f.silent_divergence());
       },
       nullptr},
      {"corrupt_checkpoint", Scope::kHost, ValidateCorruptCheckpoint,
       [](const v1::ResolvedFault& f, FaultId id) -> std::unique_ptr<Fault> {
         // Where the bit flips: fixed by the session's draws (step, rank).
         const uint64_t seed = static_cast<uint64_t>(f.trigger_step()) * 1000003u + static_cast<uint64_t>(f.rank());
         return std::make_unique<CorruptCheckpoint>(id, f.corrupt_checkpoint(), seed);
       },
       nullptr, /*at_start=*/false, /*once=*/true},
      {"rank_crash", Scope::kHost, ValidateRankCrash,
       [](const v1::ResolvedFault& f, FaultId id) -> std::unique_ptr<Fault> {
         return std::make_unique<RankCrash>(id, RankCrashReason(f.rank_crash()));
       },
       nullptr, /*at_start=*/false, /*once=*/true},
      {"slow_link", Scope::kHost, ValidateSlowLink,
       [](const v1::ResolvedFault& f, FaultId id) -> std::unique_ptr<Fault> {
         return std::make_unique<SlowLink>(id, f.slow_link().latency_us(), f.slow_link().bandwidth_gbps());
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

const std::vector<CauseInfo>& CauseTaxonomy() {
  // Broader than the fault kinds implemented so far, so the list itself
  // gives nothing away.
  static const std::vector<CauseInfo> causes = {
      {"straggler", "compute", "one host computes slower than its peers (thermal throttling, a bad part, a noisy neighbour)"},
      {"slow-link", "communication", "one host's interconnect is degraded; the ring runs at its speed"},
      {"data-loader-starvation", "input pipeline", "the training loop waits for batches: the loader cannot keep up with storage"},
      {"collective-hang", "communication", "ranks wait in collectives that can never complete (a desync or a missing peer)"},
      {"rank-crash", "process", "a rank's process died; its peers fail or hang in their next collective"},
      {"fp16-overflow", "numerics", "fp16 values overflow: inf/NaN losses or gradients, skipped optimiser steps"},
      {"lr-divergence", "numerics", "the learning rate is too high for the batch (scaling, missing warmup): the loss spikes or diverges"},
      {"silent-divergence", "numerics", "ranks hold different parameters without any error"},
      {"grad-accumulation-bug", "numerics", "gradient accumulation is wrong: unscaled gradients or an all-reduce on every micro-step"},
      {"global-batch-change", "numerics", "the global batch (ranks x per-rank batch x accumulation) is not the one the job was tuned at: a change of world size nobody compensated"},
      {"corrupt-checkpoint", "state", "a checkpoint shard is damaged, truncated or missing"},
      {"checkpoint-layout", "state", "a checkpoint's layout does not fit the job that loads it (sharded state saved at another world size or parallel layout)"},
      {"resume-without-state", "state", "a resume restored the weights but not the optimiser, RNG or data state"},
      {"checkpoint-cadence", "state", "checkpoints come far too often for what one costs, or far too rarely for how often hosts fail"},
      {"padding-waste", "input pipeline", "most of each batch is padding: compute spent on tokens that are not data"},
      {"out-of-memory", "memory", "the job needs more device memory than the device has"},
      {"device-oversubscription", "compute",
       "more compute streams than devices: ranks (or their threads) share a device or cores and wait for each "
       "other, so adding one adds nothing"},
      {"pipeline-bubble", "compute",
       "a pipeline's stages idle most of each step: too few micro-batches to fill the pipeline"},
      {"parallel-layout", "communication",
       "the model is split across the ranks in a way whose communication costs more than it buys: tensor "
       "parallelism a model that fits one device does not need, or groups laid over the slow links between hosts"},
      {"collective-timeout", "communication", "the collective timeout is wrong for the job (far too short or far too long)"},
      {"small-buckets", "communication", "gradient buckets are far too small: many latency-bound all-reduces per step"},
      {"comm-misconfig", "communication", "a node's communication settings are wrong (interface, address, transport)"},
      {"no-fault", "none", "nothing is wrong with the job: the alert was noise, and the right fix changes nothing"},
  };
  return causes;
}

const std::vector<std::string>& KnownCauses() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& c : CauseTaxonomy()) out.push_back(c.cause);
    return out;
  }();
  return names;
}

bool IsKnownCause(const std::string& cause) {
  for (const auto& c : CauseTaxonomy()) {
    if (c.cause == cause) return true;
  }
  return false;
}

std::string CauseClass(const std::string& cause) {
  for (const auto& c : CauseTaxonomy())
    if (c.cause == cause) return c.cause_class == "none" ? "" : c.cause_class;
  return "";
}

}  // namespace firedrill::faults
