// The autopilot's remedy for a job that does not fit its devices, chosen
// the way an engineer with `firedrill plan` would: every remedy a learner
// has (partitioning the optimiser state, splitting the micro-batch and
// accumulating, recomputing activations, a model-parallel layout),
// predicted by the memory model plan prints (parallel/memory_model.h), the
// cheapest in step time first, and the first that fits the device with
// room to spare. Every remedy keeps the global batch (a layout with fewer
// data-parallel replicas accumulates more micro-batches). Pure: the brief
// says which workload settings the owners let a fix change.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cli/autopilot.h"

namespace firedrill::cli {

struct MemoryRemedy {
  std::string
      name;  // "ZeRO-1", "micro-batch 4 x 2", "activation checkpointing", "PP2 x DP2, 4 micro-batches"
  std::vector<std::pair<std::string, std::string>> settings;  // what `fix --set` gets
  int64_t predicted_bytes = 0;                                // per rank, the stage that needs the most
  double cost = 1;  // the step's time against the job's own, as plan's arithmetic has it
};

// Each remedy the job and the brief allow, cheapest first (InvalidArgument
// for a model the memory model does not describe).
StatusOr<std::vector<MemoryRemedy>> MemoryRemedies(const v1::JobSpec& job,
                                                   const std::vector<std::string>& may_change);

// `oom` (an out-of-memory finding) with the fix the first remedy predicted
// to need at most `headroom` of the device gives, and the predictions in its
// evidence; `oom` unchanged where there is no prediction or no remedy fits.
AutopilotFinding PlanMemoryFix(const AutopilotFinding& oom, const v1::JobSpec& job,
                               const std::vector<std::string>& may_change, double headroom = 0.85);

}  // namespace firedrill::cli
