#include "controller/web_metrics.h"

namespace firedrill::controller {

using web::Labels;
using web::MetricType;

void ControllerCounters::CountRpc(const std::string& method, const std::string& code) {
  std::lock_guard<std::mutex> lock(mu_);
  ++rpcs_[{method, code}];
}

void ControllerCounters::CountVerification(const std::string& result) {
  std::lock_guard<std::mutex> lock(mu_);
  ++verifications_[result];
}

std::map<std::pair<std::string, std::string>, uint64_t> ControllerCounters::Rpcs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rpcs_;
}

std::map<std::string, uint64_t> ControllerCounters::Verifications() const {
  std::lock_guard<std::mutex> lock(mu_);
  return verifications_;
}

namespace {

constexpr MetricType kGauge = MetricType::kGauge;
constexpr MetricType kCounter = MetricType::kCounter;

// One table: each family's name, type and help, in the order a scrape
// lists them (the README's metrics list is this table).
struct FamilySpec {
  const char* name;
  MetricType type;
  const char* help;
};

const FamilySpec kSessionFamilies[] = {
    {"firedrill_session_info", kGauge, "A live session (value 1): its scenario and state."},
    {"firedrill_session_elapsed_seconds", kGauge, "Seconds since the session's drill run started."},
    {"firedrill_session_time_budget_seconds", kGauge, "The session's time budget for the rubric."},
    {"firedrill_run_info", kGauge,
     "The job run in progress or last run (value 1): baseline, main or verify, and its state."},
    {"firedrill_run_steps", kGauge, "Steps the run has completed."},
    {"firedrill_run_planned_steps", kGauge, "Steps the run was started for."},
    {"firedrill_run_samples_per_second", kGauge,
     "The whole job's throughput over the status window, from its median step."},
    {"firedrill_run_tokens_per_second", kGauge,
     "The whole job's real (non-padding) tokens per second; token models only."},
    {"firedrill_run_pipeline_bubble_ratio", kGauge,
     "Pipeline-parallel jobs: a stage's idle share of the schedule (0-1)."},
    {"firedrill_baseline_samples_per_second", kGauge,
     "The healthy baseline's throughput, measured before the drill."},
    {"firedrill_baseline_tokens_per_second", kGauge,
     "The healthy baseline's real tokens per second; token models only."},
    {"firedrill_rank_info", kGauge, "A rank of the session's job (value 1): its host and state."},
    {"firedrill_rank_step", kGauge, "The newest step the rank reported."},
    {"firedrill_rank_window_steps", kGauge, "Steps the rank's window means below are taken over."},
    {"firedrill_rank_step_seconds", kGauge, "Mean step time over the window."},
    {"firedrill_rank_phase_seconds", kGauge,
     "Mean time per step in each phase: data, forward, backward, exposed collective wait (comm), optimizer."},
    {"firedrill_rank_collective_seconds", kGauge,
     "Mean collective time per step, including the part hidden under backward."},
    {"firedrill_rank_checkpoint_seconds", kGauge,
     "Mean checkpoint-writing time per step (writes spread over the window)."},
    {"firedrill_rank_samples_per_second", kGauge, "The rank's samples per second over the window."},
    {"firedrill_rank_tokens_per_second", kGauge,
     "The rank's real (non-padding) tokens per second; token models only."},
    {"firedrill_rank_padding_ratio", kGauge, "Share of the rank's tokens that were padding (0-1)."},
    {"firedrill_rank_model_flops_per_second", kGauge,
     "Model FLOPs (forward and backward) of real samples or tokens per second."},
    {"firedrill_rank_mfu_ratio", kGauge,
     "Model FLOPs utilization: model FLOPs per second over the rank's measured peak (0-1)."},
    {"firedrill_rank_loss", kGauge, "The training loss at the newest step."},
    {"firedrill_rank_grad_norm", kGauge, "The gradient norm at the newest step."},
    {"firedrill_rank_loss_scale", kGauge,
     "The dynamic loss scale at the newest step, where loss scaling is on."},
    {"firedrill_rank_skipped_steps_total", kCounter,
     "Optimizer steps skipped for inf/NaN gradients in this run."},
    {"firedrill_rank_memory_peak_bytes", kGauge,
     "Whole-step peak of tracked allocations at the newest step."},
    {"firedrill_rank_memory_bytes", kGauge,
     "Tracked memory at the newest step by kind: activation peak, parameters, gradients, optimizer state."},
    {"firedrill_rank_allreduces_per_step", kGauge, "Mean gradient all-reduces per optimizer step."},
    {"firedrill_rank_allreduce_bytes_per_step", kGauge,
     "Mean bytes those all-reduces carried per optimizer step."},
    {"firedrill_rank_seconds_since_last_step", kGauge,
     "Running ranks: seconds since their newest step report."},
};

const FamilySpec kControllerFamilies[] = {
    {"firedrill_build_info", kGauge, "This controller's build (value 1)."},
    {"firedrill_controller_uptime_seconds", kGauge, "Seconds since the controller started."},
    {"firedrill_sessions", kGauge, "Sessions the controller holds, by state."},
    {"firedrill_rpcs_total", kCounter, "Public API calls answered, by method and gRPC status code."},
    {"firedrill_agent_registrations_total", kCounter,
     "Agents that presented themselves, by result (accepted or refused)."},
    {"firedrill_agents_connected", kGauge, "Agents connected now."},
    {"firedrill_verifications_total", kCounter,
     "Fix verifications that ended, by result (passed or failed)."},
    {"firedrill_http_requests_total", kCounter, "HTTP requests answered."},
    {"firedrill_http_connections", kGauge, "HTTP connections open now."},
};

template <size_t N>
void Declare(const FamilySpec (&specs)[N], web::Exposition* out) {
  for (const auto& f : specs) out->Family(f.name, f.type, f.help);
}

}  // namespace

void DeclareSessionFamilies(web::Exposition* out) { Declare(kSessionFamilies, out); }

void AddSessionSamples(const v1::SessionStatus& st, web::Exposition* out) {
  DeclareSessionFamilies(out);
  const std::string& id = st.session().session_id();
  const Labels s = {{"session", id}};
  out->Sample("firedrill_session_info",
              {{"session", id}, {"scenario", st.session().scenario_id()}, {"state", st.session().state()}},
              1);
  out->Sample("firedrill_session_elapsed_seconds", s, st.elapsed_s());
  if (st.time_budget_s() > 0) out->Sample("firedrill_session_time_budget_seconds", s, st.time_budget_s());
  const v1::RunSummary& run = st.run();
  if (!run.kind().empty()) {
    out->Sample("firedrill_run_info", {{"session", id}, {"run", run.kind()}, {"state", run.state()}}, 1);
    out->Sample("firedrill_run_steps", s, static_cast<double>(run.steps_done()));
    out->Sample("firedrill_run_planned_steps", s, static_cast<double>(run.steps_total()));
    out->Sample("firedrill_run_samples_per_second", s, run.throughput_samples_per_s());
    if (run.tokens_per_s() > 0) out->Sample("firedrill_run_tokens_per_second", s, run.tokens_per_s());
    if (run.pp_bubble_fraction() > 0)
      out->Sample("firedrill_run_pipeline_bubble_ratio", s, run.pp_bubble_fraction());
  }
  if (st.baseline().throughput_samples_per_s() > 0) {
    out->Sample("firedrill_baseline_samples_per_second", s, st.baseline().throughput_samples_per_s());
    if (st.baseline().tokens_per_s() > 0)
      out->Sample("firedrill_baseline_tokens_per_second", s, st.baseline().tokens_per_s());
  }
  for (const v1::RankStatus& r : st.ranks()) {
    const std::string rank = std::to_string(r.rank());
    out->Sample("firedrill_rank_info",
                {{"session", id}, {"rank", rank}, {"host", r.host()}, {"state", r.state()}}, 1);
    const Labels l = {{"session", id}, {"rank", rank}};
    out->Sample("firedrill_rank_step", l, static_cast<double>(r.step()));
    out->Sample("firedrill_rank_window_steps", l, r.window_steps());
    if (r.window_steps() <= 0) continue;  // no window yet: no means to show
    out->Sample("firedrill_rank_step_seconds", l, r.step_ms() / 1e3);
    const std::pair<const char*, double> phases[] = {{"data", r.data_ms()},
                                                     {"forward", r.forward_ms()},
                                                     {"backward", r.backward_ms()},
                                                     {"comm", r.comm_ms()},
                                                     {"optimizer", r.optim_ms()}};
    for (const auto& [phase, ms] : phases)
      out->Sample("firedrill_rank_phase_seconds", {{"session", id}, {"rank", rank}, {"phase", phase}},
                  ms / 1e3);
    out->Sample("firedrill_rank_collective_seconds", l, r.comm_total_ms() / 1e3);
    out->Sample("firedrill_rank_checkpoint_seconds", l, r.checkpoint_ms() / 1e3);
    out->Sample("firedrill_rank_samples_per_second", l, r.samples_per_s());
    if (r.tokens_per_s() > 0) {
      out->Sample("firedrill_rank_tokens_per_second", l, r.tokens_per_s());
      out->Sample("firedrill_rank_padding_ratio", l, r.padding_fraction());
    }
    if (r.peak_flops_per_s() > 0) {
      out->Sample("firedrill_rank_model_flops_per_second", l, r.model_flops_per_s());
      out->Sample("firedrill_rank_mfu_ratio", l, r.mfu());
    }
    out->Sample("firedrill_rank_loss", l, r.loss());
    out->Sample("firedrill_rank_grad_norm", l, r.grad_norm());
    if (r.loss_scaling()) out->Sample("firedrill_rank_loss_scale", l, r.loss_scale());
    out->Sample("firedrill_rank_skipped_steps_total", l, static_cast<double>(r.skipped_total()));
    if (r.mem_peak_bytes() > 0) {
      out->Sample("firedrill_rank_memory_peak_bytes", l, static_cast<double>(r.mem_peak_bytes()));
      const std::pair<const char*, int64_t> kinds[] = {{"activation_peak", r.mem_activation_peak_bytes()},
                                                       {"params", r.mem_params_bytes()},
                                                       {"grads", r.mem_grads_bytes()},
                                                       {"optimizer", r.mem_optim_bytes()}};
      for (const auto& [kind, bytes] : kinds)
        out->Sample("firedrill_rank_memory_bytes", {{"session", id}, {"rank", rank}, {"kind", kind}},
                    static_cast<double>(bytes));
    }
    out->Sample("firedrill_rank_allreduces_per_step", l, r.allreduces_per_step());
    out->Sample("firedrill_rank_allreduce_bytes_per_step", l, r.allreduce_bytes_per_step());
    if (r.state() == "running")
      out->Sample("firedrill_rank_seconds_since_last_step", l, r.since_last_step_s());
  }
}

void AddControllerSamples(const ControllerSnapshot& c, web::Exposition* out) {
  Declare(kControllerFamilies, out);
  out->Sample("firedrill_build_info", {{"version", c.version}}, 1);
  out->Sample("firedrill_controller_uptime_seconds", {}, c.uptime_s);
  for (const auto& [state, n] : c.sessions_by_state) out->Sample("firedrill_sessions", {{"state", state}}, n);
  for (const auto& [key, n] : c.rpcs)
    out->Sample("firedrill_rpcs_total", {{"method", key.first}, {"code", key.second}},
                static_cast<double>(n));
  out->Sample("firedrill_agent_registrations_total", {{"result", "accepted"}},
              static_cast<double>(c.agents_accepted));
  out->Sample("firedrill_agent_registrations_total", {{"result", "refused"}},
              static_cast<double>(c.agents_refused));
  out->Sample("firedrill_agents_connected", {}, c.agents_connected);
  for (const char* result : {"passed", "failed"}) {
    auto it = c.verifications.find(result);
    out->Sample("firedrill_verifications_total", {{"result", result}},
                static_cast<double>(it == c.verifications.end() ? 0 : it->second));
  }
  out->Sample("firedrill_http_requests_total", {}, static_cast<double>(c.http_requests));
  out->Sample("firedrill_http_connections", {}, c.http_connections);
}

}  // namespace firedrill::controller
