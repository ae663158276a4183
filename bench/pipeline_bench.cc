// The pipeline bubble as measured against (p-1)/(m+p-1): p stages of a
// gpt-tiny (ranks as threads, one intra-op thread each, a real Gloo group,
// the trainer's own RunStageStep) run `steps` optimiser steps of m
// micro-batches under GPipe and 1F1B, for each (p, m). A stage's bubble is
// 1 - its forward and backward compute / the pipeline's wall time (from the
// first stage's start to the last micro-batch's end on any stage); the
// table prints each stage's median over the steps after a warm-up step,
// their mean, the formula, and the most micro-batches a stage held.
// Stages are balanced by construction (`--blocks` per stage; the embedding
// and the head add a little to the first and last). A machine needs a core
// per stage for the formula's premise (stages that run side by side);
// with fewer, stages share cores and the bubble shrinks (printed anyway).
//
//   build/bin/pipeline_bench --pairs 2:1,2:2,2:4,2:8 --steps 6
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include "agent/comm/process_group.h"
#include "agent/gpt.h"
#include "agent/pipeline.h"
#include "common/stats.h"

using namespace firedrill;
using namespace firedrill::agent;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  int steps = 6;
  int blocks = 2;  // per stage
  int d_model = 128;
  int batch = 8;
  int seq = 64;
};

struct StageRun {
  std::string error;
  std::vector<Clock::time_point> starts;  // per step
  std::vector<StageStep> steps;
};

StageRun RunStage(int stage, int p, int m, PipelineSchedule sched, const Options& o,
                  std::promise<int>* port_out, std::shared_future<int> port_in) {
  StageRun out;
  at::set_num_threads(1);
  comm::GroupOptions go;
  go.rank = stage;
  go.world_size = p;
  go.timeout = std::chrono::milliseconds(60000);
  auto pg = stage == 0 ? comm::ProcessGroup::HostStore(go, "127.0.0.1")
                       : comm::ProcessGroup::JoinStore(go, "127.0.0.1", port_in.get());
  if (stage == 0) port_out->set_value(pg.ok() ? (*pg)->store_port() : 0);
  if (!pg.ok()) {
    out.error = pg.status().message();
    return out;
  }
  if (Status st = (*pg)->Connect(); !st.ok()) {
    out.error = st.message();
    return out;
  }
  GptConfig c;
  c.vocab_size = 256;
  c.seq_len = o.seq;
  c.d_model = o.d_model;
  c.heads = 4;
  c.layers = o.blocks * p;
  c.first_block = stage * o.blocks;
  c.stage_blocks = o.blocks;
  auto model = BuildGpt(c, 1);
  if (!model.ok()) {
    out.error = model.status().message();
    return out;
  }
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  std::vector<MicroBatch> micro;
  for (int i = 0; i < m; ++i) {
    at::Tensor t = at::randint(0, 256, {o.batch, o.seq + 1}, gen, at::TensorOptions().dtype(at::kLong));
    micro.push_back({t.narrow(1, 0, o.seq).contiguous(), t.narrow(1, 1, o.seq).contiguous(), at::Tensor()});
  }
  auto links = GroupStageLinks(pg->get());
  const auto order = StageSchedule(sched, stage, p, m);
  for (int s = 0; s < o.steps; ++s) {
    // Every stage starts the step together, as after the previous step's
    // optimiser and gradient all-reduce.
    if (Status st = (*pg)->Barrier(s); !st.ok()) {
      out.error = st.message();
      return out;
    }
    const auto t0 = Clock::now();
    auto r = RunStageStep(**model, order, stage, p, micro, *links, s, t0);
    if (!r.ok()) {
      out.error = r.status().message();
      return out;
    }
    for (auto& prm : (*model)->parameters()) prm.mutable_grad() = at::Tensor();
    out.starts.push_back(t0);
    out.steps.push_back(std::move(r).value());
  }
  // Nobody leaves (taking rank 0's store with it) while a peer still flushes.
  if (Status st = (*pg)->Barrier(o.steps); !st.ok()) out.error = st.message();
  return out;
}

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pipeline bubble: measured against (p-1)/(m+p-1)"};
  Options o;
  std::string pairs = "2:1,2:2,2:4,2:8";
  app.add_option("--pairs", pairs, "P:M pairs, comma-separated")->capture_default_str();
  app.add_option("--steps", o.steps, "steps per (p, m, schedule); the first is a warm-up")
      ->capture_default_str();
  app.add_option("--blocks", o.blocks, "transformer blocks per stage")->capture_default_str();
  app.add_option("--d-model", o.d_model, "hidden size")->capture_default_str();
  app.add_option("--batch", o.batch, "micro-batch size")->capture_default_str();
  app.add_option("--seq", o.seq, "sequence length")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::printf(
      "cores %u; gpt-tiny d_model %d, %d blocks/stage, micro-batch %d x %d tokens; median of %d steps\n\n",
      std::thread::hardware_concurrency(), o.d_model, o.blocks, o.batch, o.seq, o.steps - 1);
  std::printf("%-3s %-3s %-6s %-28s %-8s %-8s %-8s %s\n", "P", "M", "SCHED", "BUBBLE PER STAGE", "MEAN",
              "FORMULA", "RATIO", "MAX IN FLIGHT");
  std::stringstream ss(pairs);
  for (std::string pm; std::getline(ss, pm, ',');) {
    const auto colon = pm.find(':');
    if (colon == std::string::npos) {
      std::fprintf(stderr, "--pairs: '%s' is not P:M\n", pm.c_str());
      return 2;
    }
    const int p = std::stoi(pm.substr(0, colon)), m = std::stoi(pm.substr(colon + 1));
    for (PipelineSchedule sched : {PipelineSchedule::kGpipe, PipelineSchedule::kOneFOneB}) {
      std::promise<int> port;
      std::shared_future<int> port_f = port.get_future().share();
      std::vector<std::future<StageRun>> futures;
      for (int s = 0; s < p; ++s)
        futures.push_back(
            std::async(std::launch::async, RunStage, s, p, m, sched, o, s == 0 ? &port : nullptr, port_f));
      std::vector<StageRun> runs;
      for (auto& f : futures) runs.push_back(f.get());
      for (int s = 0; s < p; ++s) {
        if (!runs[s].error.empty()) {
          std::fprintf(stderr, "p %d m %d stage %d: %s\n", p, m, s, runs[s].error.c_str());
          return 1;
        }
      }
      std::string per_stage, in_flight;
      double mean = 0;
      for (int s = 0; s < p; ++s) {
        std::vector<double> bubbles;
        for (int k = 1; k < o.steps; ++k) {
          Clock::time_point start = runs[0].starts[k], end = start;
          for (int t = 0; t < p; ++t) {
            start = std::min(start, runs[t].starts[k]);
            const auto& last = runs[t].steps[k].slices.back();
            end = std::max(end, runs[t].starts[k] + std::chrono::microseconds(static_cast<int64_t>(
                                                        (last.start_ms + last.dur_ms) * 1000)));
          }
          bubbles.push_back(1.0 - runs[s].steps[k].compute_ms / Ms(start, end));
        }
        const double b = Median(bubbles);
        mean += b / p;
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%.3f", s ? " " : "", b);
        per_stage += buf;
        in_flight += (s ? " " : "") + std::to_string(runs[s].steps.back().max_in_flight);
      }
      const double formula = IdealBubbleFraction(p, m);
      std::printf("%-3d %-3d %-6s %-28s %-8.3f %-8.3f %-8.2f %s\n", p, m, PipelineScheduleName(sched),
                  per_stage.c_str(), mean, formula, formula > 0 ? mean / formula : 0.0, in_flight.c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
