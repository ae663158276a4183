#include "cli/plan.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cli/output.h"
#include "common/format.h"

namespace firedrill::cli {

using parallel::GptShape;
using parallel::StrategyPlan;
using parallel::Workload;

struct PlanCommand {
  CLI::App* cmd = nullptr;
  int world = 0;
  double budget_mb = -1;
  GptShape shape;
  Workload work;
  std::string optimizer = "adamw";
};

std::shared_ptr<PlanCommand> AddPlanCommand(CLI::App& app) {
  auto c = std::make_shared<PlanCommand>();
  c->cmd = app.add_subcommand(
      "plan",
      "what fits: per parallel strategy, the predicted memory per rank and bytes sent per step, and why "
      "a strategy does not fit (the session's job, or a gpt-tiny shape given here)");
  c->cmd->add_option("--world", c->world, "ranks (default: the job's world size)")
      ->check(CLI::Range(1, 4096));
  c->cmd
      ->add_option("--budget-mb", c->budget_mb, "device memory per rank, MiB (default: the job's; 0 = none)")
      ->check(CLI::NonNegativeNumber);
  c->cmd->add_option("--hidden", c->shape.d_model, "a shape of its own instead of the job's: d_model")
      ->check(CLI::Range(1, 1 << 20));
  c->cmd->add_option("--layers", c->shape.layers, "with --hidden: blocks")->capture_default_str();
  c->cmd->add_option("--heads", c->shape.heads, "with --hidden: attention heads")->capture_default_str();
  c->cmd->add_option("--seq-len", c->shape.seq, "with --hidden: tokens per sequence")->capture_default_str();
  c->cmd->add_option("--vocab", c->shape.vocab, "with --hidden: vocabulary")->capture_default_str();
  c->cmd->add_option("--mlp-ratio", c->shape.mlp_ratio, "with --hidden: MLP width / d_model")
      ->capture_default_str();
  // The workload's own: they change the session's job's too (what if).
  c->cmd->add_option("--micro-batch", c->work.micro_batch, "sequences per micro-batch (default: the job's)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  c->cmd->add_option("--micro-batches", c->work.micro_batches, "micro-batches per step (default: the job's)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  c->cmd->add_option("--optimizer", c->optimizer, "adamw | sgd (with momentum) (default: the job's)")
      ->capture_default_str()
      ->check(CLI::IsMember({"adamw", "sgd"}));
  c->cmd->add_flag("--checkpointing", c->work.activation_checkpointing,
                   "activation checkpointing (default: the job's)");
  return c;
}

StatusOr<GptShape> ShapeOfJob(const v1::JobSpec& job) {
  const auto& m = job.model();
  if (m.kind() != "gpt-tiny")
    return InvalidArgument("plan models gpt-tiny's memory; this job trains a " + m.kind() +
                           " (give a shape: firedrill plan --hidden H --layers L --heads A --seq-len S)");
  GptShape g;
  g.vocab = m.vocab_size() > 0 ? m.vocab_size() : 256;
  g.seq = m.seq_len();
  g.d_model = m.hidden();
  g.layers = m.layers();
  g.heads = m.heads();
  g.mlp_ratio = m.mlp_ratio() > 0 ? m.mlp_ratio() : 4;
  return g;
}

Workload WorkloadOfJob(const v1::JobSpec& job) {
  Workload w;
  w.micro_batch = job.data().batch_size();
  w.micro_batches = std::max(1, job.grad_accum_steps());
  w.optimizer = job.optim().kind();
  w.momentum = job.optim().momentum() > 0;
  w.activation_checkpointing = job.model().activation_checkpointing();
  w.activation_bytes = job.precision().empty() || job.precision() == "fp32" ? 4 : 2;
  return w;
}

void PrintPlan(const GptShape& g, const Workload& w, int world, int64_t budget, std::ostream& out) {
  const int64_t n = parallel::ParamCount(g);
  out << "plan: gpt-tiny, " << g.layers << " blocks, d_model " << g.d_model << ", " << g.heads << " heads, "
      << g.seq << " tokens, vocabulary " << g.vocab << ": " << n << " parameters (" << Bytes(4 * n)
      << " in fp32)\n";
  out << "      micro-batch " << w.micro_batch << " x " << w.micro_batches << " per step, " << w.optimizer
      << (w.activation_checkpointing ? ", activation checkpointing" : "") << ", " << world
      << " ranks, device budget " << (budget > 0 ? Bytes(budget) : std::string("none")) << "\n\n";
  Table t({"STRATEGY", "PARAMS/RANK", "WEIGHTS", "GRADS", "OPTIM", "ACTIVATIONS", "IN FLIGHT", "TOTAL/RANK",
           "SENT/STEP DP", "TP", "PP", "BUBBLE", "FITS"});
  std::vector<StrategyPlan> plans;
  for (const auto& s : parallel::CandidateStrategies(world, g))
    plans.push_back(parallel::PlanStrategy(g, w, s, budget));
  for (const auto& p : plans) {
    const auto& r = p.worst;
    if (p.stages.empty()) continue;
    t.Add({p.strategy.Name(), std::to_string(r.params), Bytes(r.param_bytes), Bytes(r.grad_bytes),
           Bytes(r.optimizer_bytes), Bytes(r.activation_bytes), std::to_string(r.in_flight), Bytes(r.total()),
           Bytes(p.traffic.dp), Bytes(p.traffic.tp), Bytes(p.traffic.pp),
           p.strategy.pp > 1 ? Num(100 * p.bubble, 1) + "%" : "-", p.fits ? "yes" : "no"});
  }
  t.Print(out);
  out << "(per rank, the pipeline stage that needs the most; weights, gradients and the optimiser's state in "
         "fp32; "
         "activations as this trainer keeps them for backward (`probe memory` sets them beside a "
         "measurement); "
         "bytes sent as a ring sends them; BUBBLE = (p-1)/(m+p-1) of a step's time when stages take equal "
         "time)\n";
  bool header = false;
  for (const auto& p : plans) {
    for (const auto& why : p.why_not) {
      if (!header) out << "\nwhy not:\n";
      header = true;
      out << "  " << p.strategy.Name() << ": " << why;
      if (p.fits || p.stages.empty()) {
        out << "\n";
        continue;
      }
      out << " (" << Bytes(p.worst.total()) << " > " << Bytes(budget) << ")\n";
    }
  }
  // Strategies a world size allows but the model's shape does not.
  for (int tp = 2; tp <= world; ++tp) {
    if (world % tp != 0 || (g.heads % tp == 0 && (g.mlp_ratio * g.d_model) % tp == 0)) continue;
    if (!header) out << "\nwhy not:\n";
    header = true;
    out << "  TP" << tp << ": does not divide the " << g.heads << " heads and the MLP width "
        << g.mlp_ratio * g.d_model << "\n";
  }
}

namespace {

int Plan(CliContext& ctx, const GptShape& g, const Workload& w, int world, int64_t budget) {
  if (ctx.json) {
    nlohmann::json j;
    j["params"] = parallel::ParamCount(g);
    j["world"] = world;
    j["budget_bytes"] = budget;
    j["strategies"] = nlohmann::json::array();
    for (const auto& s : parallel::CandidateStrategies(world, g)) {
      const StrategyPlan p = parallel::PlanStrategy(g, w, s, budget);
      nlohmann::json stages = nlohmann::json::array();
      for (const auto& r : p.stages)
        stages.push_back({{"stage", r.stage},
                          {"params", r.params},
                          {"param_bytes", r.param_bytes},
                          {"grad_bytes", r.grad_bytes},
                          {"optimizer_bytes", r.optimizer_bytes},
                          {"activation_bytes", r.activation_bytes},
                          {"in_flight", r.in_flight},
                          {"total_bytes", r.total()}});
      j["strategies"].push_back(
          {{"name", s.Name()},
           {"dp", s.dp},
           {"tp", s.tp},
           {"pp", s.pp},
           {"zero_stage", s.zero_stage},
           {"stages", stages},
           {"sent_bytes_per_step", {{"dp", p.traffic.dp}, {"tp", p.traffic.tp}, {"pp", p.traffic.pp}}},
           {"bubble", p.bubble},
           {"fits", p.fits},
           {"why_not", p.why_not}});
    }
    *ctx.out << j.dump() << "\n";
    return 0;
  }
  PrintPlan(g, w, world, budget, *ctx.out);
  return 0;
}

int64_t BudgetBytes(double mb) { return static_cast<int64_t>(mb * 1024 * 1024); }

}  // namespace

std::optional<int> RunPlanOffline(PlanCommand& c, CliContext& ctx) {
  if (!c.cmd->parsed() || c.cmd->count("--hidden") == 0) return std::nullopt;
  if (c.world == 0)
    return Fail(ctx, InvalidArgument("plan --hidden: give --world too (no job to take it from)"));
  if (c.shape.layers < 1 || c.shape.heads < 1 || c.shape.seq < 1 || c.shape.vocab < 2 ||
      c.shape.mlp_ratio < 1 || c.shape.d_model % c.shape.heads != 0)
    return Fail(ctx,
                InvalidArgument("plan: --layers, --heads, --seq-len, --vocab and --mlp-ratio must be >= 1 "
                                "and --heads must divide --hidden"));
  c.work.optimizer = c.optimizer;
  return Plan(ctx, c.shape, c.work, c.world, BudgetBytes(std::max(0.0, c.budget_mb)));
}

std::optional<int> RunPlanCommand(PlanCommand& c, CliContext& ctx, DrillClient& client) {
  if (!c.cmd->parsed()) return std::nullopt;
  auto id = CurrentSession(ctx);
  if (!id.ok()) return Fail(ctx, id.status());
  auto st = client.GetStatus(*id);
  if (!st.ok()) return Fail(ctx, st.status());
  auto g = ShapeOfJob(st->job());
  if (!g.ok()) return Fail(ctx, g.status());
  const int world = c.world > 0 ? c.world : st->job().world_size();
  const double mb = c.budget_mb >= 0 ? c.budget_mb : st->job().memory().device_budget_mb();
  Workload w = WorkloadOfJob(st->job());
  if (c.cmd->count("--micro-batch") > 0) w.micro_batch = c.work.micro_batch;
  if (c.cmd->count("--micro-batches") > 0) w.micro_batches = c.work.micro_batches;
  if (c.cmd->count("--optimizer") > 0) {
    // SGD as the job runs it where it is the job's; with momentum otherwise.
    if (c.optimizer != w.optimizer) w.momentum = true;
    w.optimizer = c.optimizer;
  }
  if (c.cmd->count("--checkpointing") > 0) w.activation_checkpointing = true;
  return Plan(ctx, *g, w, world, BudgetBytes(mb));
}

void PrintMemoryProbe(const v1::SessionStatus& st, std::ostream& out) {
  const v1::JobSpec& job = st.job();
  auto shape = ShapeOfJob(job);
  const Workload w = WorkloadOfJob(job);
  const int64_t budget = BudgetBytes(job.memory().device_budget_mb());
  out << "memory per rank, measured by the tracking allocator over the last step each rank reported";
  out << (budget > 0 ? "; device budget " + Bytes(budget) : std::string("; no device budget")) << "\n\n";
  Table t({"RANK", "WEIGHTS", "GRADS", "OPTIM", "ACTIVATIONS", "PER MICRO-BATCH", "OTHER", "STEP PEAK",
           "OF BUDGET"});
  bool any = false;
  for (const auto& r : st.ranks()) {
    if (r.window_steps() == 0 || r.mem_peak_bytes() == 0) {
      t.Add({std::to_string(r.rank()), "-", "-", "-", "-", "-", "-", "-", "-"});
      continue;
    }
    any = true;
    int in_flight = 1;
    if (shape.ok() && r.has_mesh() && r.mesh().pp_size() > 1) {
      const int m = w.micro_batches, p = r.mesh().pp_size();
      in_flight = r.mesh().schedule() == "gpipe" ? m : std::min(m, p - r.mesh().pp());
    }
    const int64_t held = r.mem_params_bytes() + r.mem_grads_bytes() + r.mem_optim_bytes();
    const int64_t other = std::max<int64_t>(0, r.mem_peak_bytes() - held - r.mem_activation_peak_bytes());
    t.Add({std::to_string(r.rank()), Bytes(r.mem_params_bytes()), Bytes(r.mem_grads_bytes()),
           Bytes(r.mem_optim_bytes()), Bytes(r.mem_activation_peak_bytes()),
           Bytes(r.mem_activation_peak_bytes() / in_flight) +
               (in_flight > 1 ? " x" + std::to_string(in_flight) : ""),
           Bytes(other), Bytes(r.mem_peak_bytes()),
           budget > 0 ? Num(100.0 * r.mem_peak_bytes() / budget, 1) + "%" : "-"});
  }
  t.Print(out);
  out << "(WEIGHTS, GRADS, OPTIM: the tensors held (fp32); ACTIVATIONS: the step's peak above what was live "
         "when "
         "it began, over its forward and backward; OTHER: the rest of the step's peak (the optimiser's "
         "temporaries, prefetched batches))\n";
  if (!any) return;
  if (!shape.ok()) {
    out << "\nno prediction: " << shape.status().message() << "\n";
    return;
  }
  const GptShape& g = *shape;
  parallel::Strategy s;
  for (const auto& r : st.ranks()) {
    if (!r.has_mesh()) continue;
    s.tp = r.mesh().tp_size();
    s.pp = r.mesh().pp_size();
    s.dp = r.mesh().dp_size();
    s.gpipe = r.mesh().schedule() == "gpipe";
  }
  if (!st.ranks().empty() && s.tp * s.pp == 1) s.dp = job.world_size();
  s.zero_stage = job.optim().zero_stage();
  const StrategyPlan p = parallel::PlanStrategy(g, w, s, budget);
  out << "\npredicted for " << s.Name()
      << " (parallel/memory_model.h; `firedrill plan` for the other strategies):\n";
  Table pt({"STAGE", "WEIGHTS", "GRADS", "OPTIM", "ACTIVATIONS", "IN FLIGHT",
            "MEASURED/PREDICTED (ACTIVATIONS)", "TEXTBOOK ACTIVATIONS", "MEASURED/TEXTBOOK"});
  for (const auto& rm : p.stages) {
    // The measurement of a rank of this stage.
    const v1::RankStatus* m = nullptr;
    for (const auto& r : st.ranks())
      if (r.mem_activation_peak_bytes() > 0 && (!r.has_mesh() || r.mesh().pp() == rm.stage)) m = &r;
    int64_t first = 0, blocks = 0;
    parallel::StageBlocks(g.layers, rm.stage, s.pp, &first, &blocks);
    const double textbook =
        rm.in_flight * blocks * parallel::TextbookActivationBytesPerLayer(g, w.micro_batch, s.tp);
    const double measured = m != nullptr ? static_cast<double>(m->mem_activation_peak_bytes()) : 0;
    pt.Add({std::to_string(rm.stage), Bytes(rm.param_bytes), Bytes(rm.grad_bytes), Bytes(rm.optimizer_bytes),
            Bytes(rm.activation_bytes), std::to_string(rm.in_flight),
            measured > 0 ? Num(measured / rm.activation_bytes, 2) : "-",
            Bytes(static_cast<int64_t>(textbook)), measured > 0 ? Num(measured / textbook, 2) : "-"});
  }
  pt.Print(out);
  out << "(textbook: s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes per layer and micro-batch, s*b*h*(34 + 5*a*s/h) "
         "without tensor parallelism (Korthikanti et al. 2022): 2-byte "
         "activations with dropout masks, blocks only; 16 bytes per parameter for mixed-precision Adam. This "
         "trainer keeps fp32 activations, no dropout, and the head's vocabulary-wide log-softmax: "
         "runbooks/memory.md explains the gap)\n";
}

int CmdProbeMemory(CliContext& ctx, DrillClient& client, const std::string& id) {
  auto st = client.GetStatus(id);
  if (!st.ok()) return Fail(ctx, st.status());
  if (ctx.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : st->ranks())
      j.push_back({{"rank", r.rank()},
                   {"params_bytes", r.mem_params_bytes()},
                   {"grads_bytes", r.mem_grads_bytes()},
                   {"optimizer_bytes", r.mem_optim_bytes()},
                   {"activation_peak_bytes", r.mem_activation_peak_bytes()},
                   {"step_peak_bytes", r.mem_peak_bytes()}});
    *ctx.out << nlohmann::json{{"ranks", j},
                               {"budget_bytes", BudgetBytes(st->job().memory().device_budget_mb())}}
                    .dump()
             << "\n";
    return 0;
  }
  PrintMemoryProbe(*st, *ctx.out);
  return 0;
}

}  // namespace firedrill::cli
