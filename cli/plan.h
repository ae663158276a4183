// `firedrill plan`: what fits, from a model's shape, a device budget and a
// world size: per strategy (DP, ZeRO-1, TP, PP and combinations) the
// predicted memory per rank and bytes sent per step, and why a strategy
// cannot run or does not fit (parallel/memory_model.h). The session's job,
// or a shape given on the command line.
//
// `firedrill probe memory`: each rank's memory as the tracking allocator
// measured it (parameters, gradients, optimiser state, activations at the
// peak, the rest of the step's peak, the budget), beside the same model's
// prediction and the textbook's, with their ratios.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <ostream>

#include "cli/commands.h"
#include "parallel/memory_model.h"

namespace firedrill::cli {

struct PlanCommand;

std::shared_ptr<PlanCommand> AddPlanCommand(CLI::App& app);
// Offline when the shape is given (--hidden); nullopt when `plan` was not
// the command or needs the session's job.
std::optional<int> RunPlanOffline(PlanCommand& cmd, CliContext& ctx);
std::optional<int> RunPlanCommand(PlanCommand& cmd, CliContext& ctx, DrillClient& client);

// gpt-tiny's shape and the workload as the job sets them; InvalidArgument
// for a job that is not gpt-tiny.
StatusOr<parallel::GptShape> ShapeOfJob(const v1::JobSpec& job);
parallel::Workload WorkloadOfJob(const v1::JobSpec& job);

void PrintPlan(const parallel::GptShape& g, const parallel::Workload& w, int world, int64_t budget,
               std::ostream& out);
void PrintMemoryProbe(const v1::SessionStatus& st, std::ostream& out);
int CmdProbeMemory(CliContext& ctx, DrillClient& client, const std::string& id);

}  // namespace firedrill::cli
