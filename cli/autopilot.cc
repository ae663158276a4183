#include "cli/autopilot.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <thread>

#include "analysis/straggler.h"
#include "cli/client.h"
#include "cli/demo.h"
#include "cli/flight_recorder.h"
#include "cli/memory_fix.h"
#include "cli/metrics.h"
#include "cli/output.h"
#include "cli/plan.h"
#include "cli/probe.h"
#include "common/stats.h"
#include "parallel/mesh.h"

namespace firedrill::cli {

namespace {

struct Shares {
  double data = 0, compute = 0, comm = 0, padding = 0;
};

Shares RankShares(const v1::RankStatus& r) {
  Shares s;
  if (r.step_ms() <= 0) return s;
  s.data = r.data_ms() / r.step_ms();
  s.compute = (r.forward_ms() + r.backward_ms()) / r.step_ms();
  s.comm = r.comm_ms() / r.step_ms();
  s.padding = r.padding_fraction();
  return s;
}

std::string Pct(double x) { return Num(100 * x, 0) + "%"; }

void Set(v1::ApplyFixRequest* fix, const std::string& key, const std::string& value) {
  auto* s = fix->add_settings();
  s->set_key(key);
  s->set_value(value);
}

// The newest step any rank reported; -1 before the first.
int64_t NewestStep(const v1::SessionStatus& st) {
  int64_t newest = -1;
  for (const auto& r : st.ranks()) newest = std::max<int64_t>(newest, r.step());
  return newest;
}

// The failed ranks whose error `matches`, and (in `first`) the first such
// error.
std::vector<int> FailedWith(const v1::SessionStatus& st, std::string* first,
                            const std::function<bool(const std::string&)>& matches) {
  std::vector<int> out;
  for (const auto& r : st.ranks()) {
    if (r.state() != "failed" || !matches(r.message())) continue;
    out.push_back(r.rank());
    if (first->empty()) *first = r.message();
  }
  return out;
}

// "rank 1, 3".
std::string RanksText(const std::vector<int>& ranks) {
  std::string who;
  for (int r : ranks) who += (who.empty() ? "rank " : ", ") + std::to_string(r);
  return who;
}

}  // namespace

double BriefedMtbfS(const std::string& briefing) {
  const size_t at = briefing.find("MTBF");
  if (at == std::string::npos) return 0;
  size_t i = at + 4;
  while (i < briefing.size() && i < at + 16 && !std::isdigit(static_cast<unsigned char>(briefing[i]))) ++i;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(briefing.substr(i, 24), &used);
  } catch (const std::exception&) {
    return 0;
  }
  if (v <= 0) return 0;
  i += used;
  while (i < briefing.size() && briefing[i] == ' ') ++i;
  std::string unit;
  while (i < briefing.size() && std::isalpha(static_cast<unsigned char>(briefing[i]))) unit += briefing[i++];
  if (unit == "s" || unit == "seconds") return v;
  if (unit == "min" || unit == "minutes") return 60 * v;
  if (unit == "h" || unit == "hours") return 3600 * v;
  return 0;
}

int BriefedWorldSize(const std::string& briefing) {
  static const std::vector<std::string> kWords = {"one", "two",   "three", "four", "five",   "six",
                                                  "seven", "eight", "nine", "ten", "eleven", "twelve"};
  for (const char* noun : {" hosts", " nodes", " ranks"}) {
    for (size_t at = briefing.find(noun); at != std::string::npos; at = briefing.find(noun, at + 1)) {
      size_t begin = at;
      while (begin > 0 && std::isalnum(static_cast<unsigned char>(briefing[begin - 1]))) --begin;
      const std::string word = briefing.substr(begin, at - begin);
      if (word.empty()) continue;
      if (std::all_of(word.begin(), word.end(), [](unsigned char c) { return std::isdigit(c); }))
        return std::stoi(word.substr(0, 6));
      std::string lower = word;
      for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      for (size_t i = 0; i < kWords.size(); ++i)
        if (lower == kWords[i]) return static_cast<int>(i) + 1;
    }
  }
  return 0;
}

namespace {

// One look in a line: the job's step against its baseline's, each rank's
// step and busy time over the median's, and what the rules found.
std::string LookLine(const v1::SessionStatus& st, const std::vector<AutopilotFinding>& found) {
  std::vector<double> step;
  std::string ranks;
  for (const auto& r : st.ranks()) {
    if (r.window_steps() > 0 && r.step_ms() > 0) step.push_back(r.step_ms());
    ranks += " " + std::to_string(r.rank()) + ":" + Num(r.step_ms(), 1) + "/" + Num(r.busy_vs_median(), 2);
  }
  const double base = st.baseline().median_step_ms(), med = Median(step);
  std::string line = "step " + std::to_string(NewestStep(st)) + ", median step " + Num(med, 1) + " ms (" +
                     (base > 0 ? Num(med / base, 2) + "x the baseline's" : std::string("no baseline")) +
                     "); rank:step ms/busy vs median" + ranks + "; found:";
  if (found.empty()) line += " nothing";
  for (const auto& f : found) {
    line += " " + f.cause;
    for (int r : f.ranks) line += " " + std::to_string(r);
  }
  return line;
}

}  // namespace

AutopilotFinding Reason(const v1::SessionStatus& st) {
  auto all = ReasonAll(st);
  return all.empty() ? AutopilotFinding{} : all.front();
}

// The job's throughput now against its healthy baseline, in tokens where
// the job counts tokens.
double VsBaseline(const v1::SessionStatus& st) {
  const auto& run = st.run();
  const auto& b = st.baseline();
  if (b.tokens_per_s() > 0 && run.tokens_per_s() > 0) return run.tokens_per_s() / b.tokens_per_s();
  return b.throughput_samples_per_s() > 0 ? run.throughput_samples_per_s() / b.throughput_samples_per_s() : 0;
}

bool LooksHealthy(const v1::SessionStatus& st, std::string* why) {
  if (st.ranks_size() == 0) return false;
  double max_busy = 0;
  for (const auto& r : st.ranks()) {
    if (r.state() != "running" || r.window_steps() < 10 || Stalled(r)) return false;
    max_busy = std::max(max_busy, r.busy_vs_median());
  }
  // A busy-time spread that costs no throughput is noise on shared cores
  // (a straggler needs the job slowed: ReasonAll); 1.15 here kept a
  // healthy job's twelve looks in a row from coming for minutes.
  const double ratio = VsBaseline(st);
  if (ratio < 0.85 || max_busy > 1.3) return false;
  if (why) {
    *why = "every rank steps; the job runs at " + Num(ratio, 2) + "x its healthy baseline's throughput, the busiest "
           "rank is " + Num(max_busy, 2) + "x the median's busy time, and no phase stands out (data, compute, "
           "communication and padding as in the baseline). Nothing in the telemetry is wrong now: the alert "
           "was not about the job as it runs.";
  }
  return true;
}

std::vector<AutopilotFinding> ReasonAll(const v1::SessionStatus& st, const std::vector<AutopilotFinding>* held) {
  std::vector<AutopilotFinding> out;
  AutopilotFinding f;
  // 0. Ranks that failed: their own error says why; peers that failed with
  // timeouts only waited for them.
  std::string first_error;
  const std::vector<int> bad_iface = FailedWith(st, &first_error, [](const std::string& m) {
    return m.find("Unable to find address for") != std::string::npos || m.find("interface") != std::string::npos;
  });
  if (!bad_iface.empty()) {
    f.found = true;
    f.cause = "comm-misconfig";
    f.ranks = bad_iface;
    f.evidence = RanksText(bad_iface) + " could not create its network transport: \"" + first_error.substr(0, 300) +
                 "\". The interface it was told to bind does not exist on that node; the other ranks only "
                 "waited for it. Move the rank to a correctly configured node.";
    for (int r : bad_iface) f.fix.add_replace_host_ranks(r);
    out.push_back(f);
    return out;
  }
  // Ranks that ran out of device memory: the allocator's own message says
  // what it tried to allocate, the capacity and what was in use. The same
  // model and batch on every rank: the whole job's problem.
  std::string oom_error;
  const std::vector<int> oom = FailedWith(
      st, &oom_error, [](const std::string& m) { return m.find("CUDA out of memory") != std::string::npos; });
  if (!oom.empty()) {
    f.found = true;
    f.cause = "out-of-memory";
    f.evidence = RanksText(oom) + " ran out of device memory: \"" + oom_error.substr(0, 400) + "\"";
    const auto& model = st.job().model();
    if (model.kind() == "gpt-tiny" && !model.activation_checkpointing()) {
      f.evidence += ". The model, batch and context stay: recompute each block's activations in backward "
                    "(activation checkpointing) instead of keeping them, trading a second forward for memory.";
      Set(&f.fix, "model.activation_checkpointing", "true");
    }
    out.push_back(f);
    return out;
  }
  // A restart that died loading its checkpoint: the resume names the shard
  // and what is wrong with it (each rank loads its own). Which checkpoint to
  // go back to is for `ckpt list` to say (RunAutopilot).
  std::string load_error;
  const std::vector<int> bad_shard = FailedWith(st, &load_error, [](const std::string& m) {
    // Its bytes against the manifest (not a world size or config that
    // changed: that checkpoint is fine, the job is not the same).
    return m.find("resume from") != std::string::npos &&
           (m.find("mismatch (manifest ") != std::string::npos || m.find("missing shard") != std::string::npos ||
            m.find("no manifest.json") != std::string::npos || m.find("manifest (") != std::string::npos);
  });
  if (!bad_shard.empty()) {
    f.found = true;
    f.cause = "corrupt-checkpoint";
    f.ranks = bad_shard;
    f.evidence = RanksText(bad_shard) + " could not resume: \"" + load_error.substr(0, 300) +
                 "\". Its own shard of the checkpoint the restart took as the latest does not match that "
                 "checkpoint's manifest, so every restart dies the same way. Resume from the newest checkpoint "
                 "that verifies.";
    out.push_back(f);
    return out;
  }
  // A restart at another world size that died loading a checkpoint whose
  // optimiser state is partitioned by the old one: the checkpoint is fine,
  // the loader takes each rank's shard as its partition. A loader that
  // reshards from the manifest reads it at any world size.
  std::string layout_error;
  const std::vector<int> relaid = FailedWith(st, &layout_error, [](const std::string& m) {
    return m.find("resume from") != std::string::npos &&
           m.find("saved with a data-parallel world size of") != std::string::npos;
  });
  if (!relaid.empty()) {
    f.found = true;
    f.cause = "checkpoint-layout";
    f.evidence =
        RanksText(relaid) + " could not resume: \"" + layout_error.substr(0, 300) +
        "\". The job came back on " + std::to_string(st.ranks_size()) +
        " ranks; the checkpoint's optimiser state is partitioned across the ranks that wrote it, and "
        "checkpoint.load " +
        (st.job().checkpoint().load().empty() ? "(default)" : st.job().checkpoint().load()) +
        " reads rank r's partition from shard r. Load it resharded: each rank cuts its partition out of "
        "the chunks the manifest maps, at the world size the job has now.";
    Set(&f.fix, "checkpoint.load", "resharded");
    out.push_back(f);
    return out;
  }
  // A rank lost, or starting again (the launcher restarting the job): the
  // others' windows are of a run that is over, whatever they read. Their
  // timing is no evidence until the job runs again (night-restart seed 107
  // in CI: the survivors' last window, one rank 1.46x busy by scheduling
  // noise, agreed three looks in a row while the restart launched, and a
  // host lost to a restart was replaced as a straggler).
  for (const auto& r : st.ranks())
    if (r.state() == "lost" || r.state() == "starting") return out;
  std::vector<const v1::RankStatus*> live;
  for (const auto& r : st.ranks())
    if (r.window_steps() > 0 && r.step_ms() > 0) live.push_back(&r);
  if (live.empty()) return out;
  std::vector<double> data, comm, pad, step;
  for (const auto* r : live) {
    const Shares s = RankShares(*r);
    data.push_back(s.data);
    comm.push_back(s.comm);
    pad.push_back(s.padding);
    step.push_back(r->step_ms());
  }
  const double med_step = Median(step);
  const double base_step = st.baseline().median_step_ms();
  std::string context = "median step " + Num(med_step, 1) + " ms";
  if (base_step > 0) context += " vs " + Num(base_step, 1) + " ms in the healthy baseline (" + Num(med_step / base_step, 2) + "x)";
  context += ".\n";
  const auto& job = st.job();

  // 1. Numerics first: a job whose optimiser skips most of its steps is not
  // training, however fast it steps. GradScaler skips a step when the
  // unscaled gradients hold an inf/NaN; with a scale that never backs off,
  // that is every step.
  const v1::RankStatus* newest = live.front();
  for (const auto* r : live)
    if (r->step() > newest->step()) newest = r;
  const int64_t stepped = newest->step() + 1;
  if (stepped >= 20 && newest->skipped_total() * 2 >= stepped) {
    f = AutopilotFinding{};
    f.found = true;
    f.cause = "fp16-overflow";
    const std::string mode = job.loss_scale().mode().empty() ? "default" : job.loss_scale().mode();
    const std::string skipped =
        context + std::to_string(newest->skipped_total()) + " of " + std::to_string(stepped) +
        " optimiser steps were skipped for inf/NaN gradients, at a loss scale of " +
        ScaleText(newest->loss_scale()) + " (precision " +
        (job.precision().empty() ? "fp32" : job.precision()) + ", loss_scale.mode " + mode + ")";
    // An fp16 job that leaves the mode out gets GradScaler's dynamic scale.
    if (mode == "dynamic" || (mode == "default" && job.precision() == "fp16")) {
      // GradScaler halved the scale on every one of those steps: no scale
      // makes them fit, so the inf is not the scaled gradient's.
      f.evidence = skipped +
                   ": a dynamic scale halves itself on every overflow, and it has come down from "
                   "GradScaler's 65536 without a step fitting. What does not fit in fp16 is a value of "
                   "the forward pass, before any scale applies.";
      f.needs_activations = true;
    } else {
      f.evidence = skipped +
                   ": the scaled gradients do not fit in fp16 (largest value 65504), so no update "
                   "reaches the weights and the loss cannot move. A dynamic scale (GradScaler) halves "
                   "itself on every overflow until the gradients fit.";
      Set(&f.fix, "loss_scale.mode", "dynamic");
    }
    out.push_back(f);
    return out;
  }

  // 1b. Gradient accumulation without no_sync(): every gradient crosses the
  // network once per micro-batch instead of once per optimiser step. The
  // bytes a step all-reduces over the gradients' size say how many times.
  const int accum = std::max(1, job.grad_accum_steps());
  std::vector<double> crossings;
  for (const auto* r : live)
    if (r->mem_grads_bytes() > 0 && r->allreduce_bytes_per_step() > 0)
      crossings.push_back(r->allreduce_bytes_per_step() / static_cast<double>(r->mem_grads_bytes()));
  if (accum > 1 && !crossings.empty() && Median(crossings) >= 1.5) {
    const double times = Median(crossings);
    f = AutopilotFinding{};
    f.found = true;
    f.cause = "grad-accumulation-bug";
    f.evidence = context + "a step all-reduces " + Bytes(static_cast<int64_t>(newest->allreduce_bytes_per_step())) +
                 " in " + Num(newest->allreduces_per_step(), 0) + " all-reduces, where the gradients are " +
                 Bytes(newest->mem_grads_bytes()) + ": every gradient crosses the network " + Num(times, 1) +
                 " times per optimiser step, with " + std::to_string(accum) + " micro-batches per step (exposed "
                 "all-reduce wait " + Pct(Median(comm)) + " of the step). Accumulation needs one all-reduce per "
                 "bucket per step, after the last micro-batch: the others must run under no_sync() "
                 "(comm.accumulation_sync = " + (job.comm().accumulation_sync().empty() ? std::string("once")
                                                                                           : job.comm().accumulation_sync()) + ").";
    Set(&f.fix, "comm.accumulation_sync", "once");
    out.push_back(f);
    return out;
  }

  // 1b'. More compute threads on a host than CPUs its processes may run
  // on: each rank's intra-op pool as wide as the node, several ranks to the
  // node. Their threads wait for cores the others hold, and a rank more
  // adds nothing.
  {
    AutopilotFinding of;
    std::map<std::string, std::pair<int, int>> on_host;  // host -> (compute threads, CPUs)
    std::map<std::string, int> ranks_on;
    for (const auto* r : live) {
      auto& h = on_host[r->host()];
      h.first += std::max(1, r->compute_threads());
      h.second = std::max(h.second, r->cpus());
      ++ranks_on[r->host()];
    }
    for (const auto& [host, h] : on_host) {
      if (h.second <= 0 || h.first <= h.second || job.threads_per_rank() <= 1 || VsBaseline(st) >= 0.85)
        continue;
      const int per_rank = std::max(1, h.second / ranks_on[host]);
      if (per_rank >= job.threads_per_rank()) continue;
      of.found = true;
      of.cause = "device-oversubscription";
      of.evidence = context + host + " runs " + std::to_string(ranks_on[host]) + " ranks of " +
                    std::to_string(job.threads_per_rank()) + " compute threads each (threads_per_rank) on " +
                    std::to_string(h.second) + " CPUs, at " + Num(VsBaseline(st), 2) +
                    "x the healthy baseline's throughput: " + std::to_string(h.first) +
                    " threads take turns on the cores, and every parallel region waits for the slowest. One "
                    "compute stream per core: " +
                    std::to_string(per_rank) + " thread(s) a rank.";
      Set(&of.fix, "threads_per_rank", std::to_string(per_rank));
      out.push_back(of);
      return out;
    }
  }
  // 1c. A model-parallel layout that wastes the ranks. The job is slower
  // than its baseline, and the time goes where the layout puts it: a
  // pipeline's stages idle in its bubble, or tensor-parallel all-reduces
  // take the step.
  const int tp = std::max(1, job.parallel().tp()), pp = std::max(1, job.parallel().pp());
  const int micro_batches = std::max(1, job.grad_accum_steps());
  const double vs_baseline = VsBaseline(st);
  AutopilotFinding lf;
  // Tensor-parallel groups whose ranks sit on different hosts: their
  // all-reduces, inside every block, go over the links between hosts
  // instead of the ones inside a host. The hosts are the status's; the
  // groups the mesh's from the job's order.
  if (tp > 1 && vs_baseline > 0 && vs_baseline < 0.85) {
    std::map<std::string, int> per_host;
    for (const auto& r : st.ranks()) ++per_host[r.host()];
    int ranks_per_host = 0;
    bool even = !per_host.empty();
    for (const auto& [h, n] : per_host) {
      if (ranks_per_host == 0) ranks_per_host = n;
      even = even && n == ranks_per_host;
    }
    // Ranks in rank order on their hosts, as the status lists them.
    for (int i = 0; even && i < st.ranks_size(); ++i)
      even = st.ranks(i).rank() == i &&
             (i % ranks_per_host == 0 || st.ranks(i).host() == st.ranks(i - 1).host());
    auto mesh = parallel::Mesh::Create(job.world_size(), tp, pp, job.parallel().order());
    std::vector<double> shares;
    for (const auto* r : live) shares.push_back(r->tp_comm_ms() / r->step_ms());
    if (even && ranks_per_host > 1 && mesh.ok() && Median(shares) >= 0.2) {
      bool crosses = false;
      for (const auto& g : mesh->Groups(parallel::Dim::kTp))
        crosses = crosses || parallel::CrossesHosts(g, ranks_per_host);
      // The same order with tp innermost.
      std::string order = "tp";
      for (parallel::Dim d : mesh->order())
        if (d != parallel::Dim::kTp) order += std::string("-") + parallel::DimName(d);
      auto inside = parallel::Mesh::Create(job.world_size(), tp, pp, order);
      bool fixed = inside.ok();
      for (const auto& g : fixed ? inside->Groups(parallel::Dim::kTp) : std::vector<std::vector<int>>{})
        fixed = fixed && !parallel::CrossesHosts(g, ranks_per_host);
      if (crosses && fixed) {
        lf.found = true;
        lf.cause = "parallel-layout";
        lf.evidence = context + "Tensor-parallel all-reduces take " + Pct(Median(shares)) +
                      " of every rank's step (TP_COMM over STEP_MS), at " + Num(vs_baseline, 2) +
                      "x the healthy baseline's throughput, and with the mesh order " + mesh->order_text() +
                      " on hosts of " + std::to_string(ranks_per_host) +
                      " ranks tensor-parallel groups span hosts (`firedrill mesh`): each block's "
                      "all-reduces cross the links between hosts. With " +
                      order +
                      " each group's ranks are neighbours on one host; data-parallel and pipeline traffic, "
                      "once a step and once a micro-batch, cross instead.";
        Set(&lf.fix, "parallel.order", order);
        out.push_back(lf);
        return out;
      }
    }
  }
  if (pp > 1 && vs_baseline > 0 && vs_baseline < 0.95) {
    std::vector<double> bubbles;
    for (const auto* r : live) bubbles.push_back(r->pp_bubble_fraction());
    const double bubble = Median(bubbles);
    const double formula = static_cast<double>(pp - 1) / (micro_batches + pp - 1);
    // The change from the baseline's (a pipeline that always ran this way
    // idled as much before the incident).
    const double before = st.baseline().pp_bubble_fraction();
    // Below 0.85x of the baseline a bubble that grew is enough; up to 0.95x
    // it must have grown by a fifth of the step: a baseline measured once,
    // on a busy moment, can read 10% slow and hide the throughput's drop
    // (launcher-v2's e2e play: 0.89x, its bubble 24% -> 50%).
    const double grew = bubble - before;
    if (bubble >= 0.3 && grew >= (vs_baseline < 0.85 ? 0.15 : 0.2)) {
      lf.found = true;
      lf.cause = "pipeline-bubble";
      lf.evidence =
          context + "The ranks are a " + std::to_string(pp) + "-stage pipeline running " +
          std::to_string(micro_batches) + " micro-batch" + (micro_batches > 1 ? "es" : "") +
          " a step; each stage idles " + Pct(bubble) +
          " of the step (the median BUBBLE%), against (p-1)/(m+p-1) = " + Pct(formula) +
          " for p = " + std::to_string(pp) + ", m = " + std::to_string(micro_batches) +
          " (the healthy baseline's: " + Pct(before) + "), at " + Num(vs_baseline, 2) +
          "x the healthy baseline's throughput. More, smaller micro-batches for the same samples a step "
          "fill the pipeline.";
      // The smallest split of the micro-batch that brings the formula to a
      // fifth or less (m >= 4(p-1)): every further split adds a micro-batch's
      // fixed cost (a forward, a backward and a send each) for less bubble
      // saved, and on launcher-v2 2 x 8 measured 0.79-0.85x of 4 x 4 on one
      // machine (0.98x on another).
      const int b = job.data().batch_size();
      for (int k = 2; k <= b; ++k) {  // none for a micro-batch of 1: nothing left to split
        if (b % k != 0) continue;
        const int m = micro_batches * k;
        if (m < 4 * (pp - 1) && k < b) continue;
        Set(&lf.fix, "data.batch_size", std::to_string(b / k));
        Set(&lf.fix, "grad_accum_steps", std::to_string(m));
        lf.evidence += " Micro-batch " + std::to_string(b / k) + " x " + std::to_string(m) +
                       ": a bubble of " + Pct(static_cast<double>(pp - 1) / (m + pp - 1)) + ".";
        break;
      }
      out.push_back(lf);
      return out;
    }
  }
  if (tp > 1 && vs_baseline > 0 && vs_baseline < 0.8) {
    std::vector<double> shares;
    for (const auto* r : live) shares.push_back(r->tp_comm_ms() / r->step_ms());
    const double tp_share = Median(shares);
    // The same model with the tensor-parallel ranks as data-parallel
    // replicas instead, tp times as many: each accumulates tp times fewer
    // micro-batches, or takes a tp-th of the micro-batch, for the same
    // samples a step. Does it fit the device?
    const int b = job.data().batch_size();
    const bool fewer = micro_batches % tp == 0, smaller = !fewer && b % tp == 0;
    auto shape = ShapeOfJob(job);
    if (tp_share >= 0.25 && (fewer || smaller) && shape.ok()) {
      parallel::Workload w = WorkloadOfJob(job);
      if (fewer)
        w.micro_batches = micro_batches / tp;
      else
        w.micro_batch = b / tp;
      parallel::Strategy s;
      s.pp = pp;
      s.dp = std::max(1, job.world_size() / pp);
      const int64_t budget = static_cast<int64_t>(job.memory().device_budget_mb() * 1024 * 1024);
      const parallel::StrategyPlan plan = parallel::PlanStrategy(*shape, w, s, budget);
      if (plan.fits && (budget <= 0 || plan.worst.total() <= 0.85 * budget)) {
        lf.found = true;
        lf.cause = "parallel-layout";
        lf.evidence =
            context + "Tensor-parallel all-reduces take " + Pct(tp_share) +
            " of every rank's step (the median TP_COMM over STEP_MS), at " + Num(vs_baseline, 2) +
            "x the healthy baseline's throughput: each block's two all-reduces forward and two backward "
            "move a [batch, sequence, hidden] activation, on a model whose blocks take less time than "
            "that. `firedrill plan` puts the whole model on each rank at " +
            Bytes(plan.worst.total()) + (budget > 0 ? " of the device's " + Bytes(budget) : std::string()) +
            " (" + s.Name() + "): data parallelism sends only the gradients, once a step.";
        Set(&lf.fix, "parallel.tp", "1");
        if (fewer)
          Set(&lf.fix, "grad_accum_steps", std::to_string(micro_batches / tp));
        else
          Set(&lf.fix, "data.batch_size", std::to_string(b / tp));
        out.push_back(lf);
        return out;
      }
    }
  }

  // 2. Padding: most of what is computed is not data, and more of it than
  // in the healthy baseline (which ran the same data).
  const double med_pad = Median(pad);
  const double base_pad = st.baseline().padding_fraction();
  if (med_pad >= 0.3 && med_pad >= base_pad + 0.15 && job.data().sampler() != "length_bucketed") {
    f = AutopilotFinding{};
    f.found = true;
    f.cause = "padding-waste";
    f.evidence = context + "padding is " + Pct(med_pad) + " of every batch's tokens on the median rank; the loader draws "
                 "variable-length rows at random (data.sampler = " + (job.data().sampler().empty() ? "random" : job.data().sampler()) +
                 ") and pads each row to its batch's longest, so attention and MLP run on padding. Group rows of "
                 "similar length.";
    if (base_pad > 0) f.evidence += " (The healthy baseline padded " + Pct(base_pad) + ".)";
    Set(&f.fix, "data.sampler", "length_bucketed");
    out.push_back(f);
  }

  // 3. Input pipeline: the loop waits for batches.
  std::vector<int> starved;
  for (const auto* r : live)
    if (RankShares(*r).data >= 0.25) starved.push_back(r->rank());
  if (!starved.empty()) {
    f = AutopilotFinding{};
    f.found = true;
    f.cause = "data-loader-starvation";
    const int workers = std::max(1, job.data().num_workers());
    const int want = std::max(8, 4 * workers);
    std::string who;
    if (starved.size() < live.size()) {
      f.ranks = starved;
      for (int r : starved) who += (who.empty() ? "rank " : ", ") + std::to_string(r);
      who += " only";
    } else {
      who = "every rank";
    }
    std::vector<double> starved_share;
    for (const auto* r : live)
      if (std::find(starved.begin(), starved.end(), r->rank()) != starved.end()) starved_share.push_back(RankShares(*r).data);
    f.evidence = context + "waiting for data takes " + Pct(Median(starved_share)) + " of the step (" + who +
                 "), while forward+backward are unchanged; the loader runs " + std::to_string(workers) +
                 " worker(s) with a read-ahead of " + std::to_string(job.data().prefetch_depth() > 0 ? job.data().prefetch_depth() : 2) +
                 " batch(es): it cannot keep up with how long batches now take to read. More workers and a deeper "
                 "read-ahead hide the read latency.";
    Set(&f.fix, "data.num_workers", std::to_string(want));
    Set(&f.fix, "data.prefetch_depth", std::to_string(2 * want));
    out.push_back(f);
  }

  // 3b. Checkpoint writes take a fifth of the job's time or more: the
  // cadence against what a write costs and how often hosts fail (the
  // briefing's MTBF): Young's interval, sqrt(2 x write x MTBF), in the
  // baseline's steps (a cadence does not change a step). The CKPT column is
  // the writes spread over the window: a write is it times the steps
  // between writes, or the window's where writes are rarer (a window holds
  // one or none then: none says nothing). The job waits for its slowest
  // writer, the others then in the next all-reduce. A job that checkpoints
  // every 50 steps shows a write in some windows and is fine.
  const int every = job.checkpoint().every();
  double ckpt_max = 0, w = 0;
  for (const auto* r : live) {
    if (r->checkpoint_ms() <= ckpt_max) continue;
    ckpt_max = r->checkpoint_ms();
    w = ckpt_max * std::min(every, std::max(1, r->window_steps()));
  }
  const double write_share = every > 0 && base_step > 0 ? w / (every * base_step + w) : 0;
  if (write_share >= 0.2 && med_step >= 1.2 * base_step && ckpt_max >= 0.5 * (med_step - base_step)) {
    f = AutopilotFinding{};
    f.found = true;
    f.cause = "checkpoint-cadence";
    const double step = base_step;
    const double mtbf = BriefedMtbfS(st.session().briefing());
    // Without a failure rate to weigh it against: writes at 2% of the time.
    const double interval_s = mtbf > 0 ? std::sqrt(2 * (w / 1000) * mtbf) : (w / 1000) / 0.02;
    const int64_t best = std::max<int64_t>(1, std::llround(interval_s * 1000 / step));
    f.evidence = context + "checkpoint writes take " + Pct(write_share) + " of the job's time: one every " +
                 std::to_string(every) + " steps, each about " + Num(w, 0) + " ms on the slowest writer, against " +
                 Num(step, 1) + " ms a step without one (the baseline's). " +
                 (mtbf > 0 ? "With a host failure every " + Num(mtbf, 0) + " s (the briefing), Young's interval "
                             "sqrt(2 x write x MTBF) is " + Num(interval_s, 1) + " s"
                           : std::string("No failure rate is given; writes at 2% of the time are every ") +
                                 Num(interval_s, 1) + " s") +
                 ": about every " + std::to_string(best) + " steps.";
    Set(&f.fix, "checkpoint.every", std::to_string(best));
    out.push_back(f);
    return out;
  }

  // 4. Everyone waits in communication: small buckets are visible in the config.
  // Checked before stragglers: when communication dominates, busy time is
  // small and noisy, and a 1.2x skew in it means little.
  const double med_comm = Median(comm);
  const double bucket_mb = job.comm().bucket_mb() > 0 ? job.comm().bucket_mb() : 25.0;
  if (med_comm >= 0.2 && bucket_mb < 1.0) {
    f = AutopilotFinding{};
    f.found = true;
    f.cause = "small-buckets";
    f.evidence = context + "exposed all-reduce wait is " + Pct(med_comm) + " of the median rank's step, on every "
                 "rank alike (no rank computes slower, none waits on data); gradient buckets are capped at " + Num(bucket_mb, 3) + " MB, so a step makes one small all-reduce per "
                 "parameter, each paying a collective's fixed latency. PyTorch's default is 25 MB.";
    Set(&f.fix, "comm.bucket_mb", "25");
    out.push_back(f);
    return out;
  }
  // 5. One rank computes slower than the rest.
  // Busy time under ~2 ms is mostly scheduling noise on shared cores: a
  // ratio there means nothing. Above it, a comm-bound job's busy time of a
  // few ms still swings by a ms or two: scheduling noise read 1.22x, 1.27x
  // and 1.36x on one rank, 0.9-1.2 ms over the median, for three looks in a
  // row (night-restart seed 107 in CI, data-audit seed 8401 on an idle
  // machine), while the mildest straggler the drills inject
  // (thermal-throttle, 1.8x) read 1.83-2.71x, 7.6-14.3 ms over it, on seeds
  // 8401-8405. A straggler is 1.3x the median and 2.5 ms over it.
  std::vector<double> busy;
  for (const auto* r : live) busy.push_back(analysis::RankBusyMs(*r));
  std::string why;
  // A starved rank is busy waiting for data, not computing: the rule above
  // explained it.
  const bool computing = starved.empty() && Median(busy) >= 2.0;
  int slow = computing ? analysis::FindStraggler(st, 1.3, &why) : -1;
  // The rank the look before found a straggler keeps it on a lower bar
  // (1.2x the median's busy time, the job 1.05x its baseline's step): under
  // a burner, thermal-throttle's comm-bound job read 1.15-1.25x its
  // baseline's step with the straggler 1.7x busy, and a bar of 1.15 alone
  // reset the three looks' agreement for two minutes (seed 13; CI ran out
  // of its 180 s once). A rank must still pass the full bar to be found.
  // (A machine of several ranks: any of them.)
  std::vector<int> was;
  if (held)
    for (const auto& h : *held)
      if (h.cause == "straggler") was.insert(was.end(), h.ranks.begin(), h.ranks.end());
  const auto held_rank = [&](int r) { return std::find(was.begin(), was.end(), r) != was.end(); };
  if (slow < 0 && !was.empty() && computing) {
    slow = analysis::FindStraggler(st, 1.2, &why);
    if (!held_rank(slow)) slow = -1;
  }
  const double step_bar = held_rank(slow) ? 1.05 : 1.15;
  // A straggler is what slows the job: its extra compute over the median
  // rank's must account for a good part of how much longer the step got
  // than in the baseline. On shared cores a rank's busy time swings by a
  // millisecond or two; beside a slow interconnect (a 30 ms step of which
  // 4 ms compute) that swing is a 1.3x ratio that explains nothing
  // (new-rack-acceptance seed 72 in CI, one look in a run). No slowdown,
  // no straggler to replace.
  if (slow >= 0 && base_step > 0) {
    double slow_busy = 0;
    for (const auto* r : live)
      if (r->rank() == slow) slow_busy = analysis::RankBusyMs(*r);
    const double grew = med_step - base_step;
    if (med_step < step_bar * base_step || slow_busy - Median(busy) < std::max(2.5, 0.3 * grew)) slow = -1;
  }
  if (slow >= 0) {
    f = AutopilotFinding{};
    f.found = true;
    f.cause = "straggler";
    f.ranks = {slow};
    f.evidence = context + why;
    // A machine of several ranks computes slower as a whole: its other
    // ranks as slow as this one are the same culprit.
    std::string slow_host;
    for (const auto* r : live)
      if (r->rank() == slow) slow_host = r->host();
    const double med_busy = Median(busy);
    for (const auto* r : live) {
      const double bar = held_rank(r->rank()) ? 1.2 : 1.3;  // as above
      if (r->rank() == slow || r->host() != slow_host || analysis::RankBusyMs(*r) < bar * med_busy) continue;
      f.ranks.push_back(r->rank());
      f.evidence += " Rank " + std::to_string(r->rank()) + ", on the same host (" + slow_host + "), is " +
                    Num(analysis::RankBusyMs(*r) / med_busy, 2) + "x the median busy time too.";
    }
    std::sort(f.ranks.begin(), f.ranks.end());
    f.fix.add_replace_host_ranks(slow);
    out.push_back(f);
  }
  if (!out.empty()) return out;

  // 6. Every rank waits in communication, buckets are sane, compute is
  // balanced (no straggler above) and the job is well off its baseline: the
  // interconnect. Which link, only a probe that isolates pairs can say.
  const double min_comm = *std::min_element(comm.begin(), comm.end());
  if (min_comm >= 0.25 && base_step > 0 && med_step >= 1.4 * base_step) {
    f = AutopilotFinding{};
    f.found = true;
    f.cause = "slow-link";
    f.needs_probes = true;
    f.evidence = context + "exposed all-reduce wait is at least " + Pct(min_comm) + " of the step on every rank "
                 "alike, buckets are " + Num(bucket_mb, 1) + " MB, and no rank computes slower or waits on data: "
                 "the collectives themselves got slower.";
    out.push_back(f);
  }
  return out;
}

AutopilotFinding ReasonProbes(const AutopilotFinding& before, const v1::RunProbeResponse& allreduce,
                              const v1::RunProbeResponse& p2p) {
  AutopilotFinding f = before;
  f.needs_probes = false;
  const P2pAnalysis a = AnalyzeP2p(p2p);
  double big_busbw = 0;  // the largest size's: bandwidth-bound
  if (allreduce.rows_size() > 0) big_busbw = allreduce.rows(allreduce.rows_size() - 1).busbw_gbps();
  f.evidence += " probe allreduce: " + Num(big_busbw, 3) + " GB/s bus bandwidth at " +
                std::to_string(allreduce.rows_size() > 0 ? allreduce.rows(allreduce.rows_size() - 1).bytes() : 0) +
                " B (average " + Num(allreduce.avg_busbw_gbps(), 3) + "). probe p2p: median pair " +
                Num(a.median_gbps, 3) + " GB/s, upper quartile " + Num(a.upper_quartile_gbps, 3) + " GB/s";
  if (a.slow_ranks.size() == 1) {
    const int r = a.slow_ranks[0];
    double worst = 0, best = 0;
    bool first = true;
    for (const auto& p : p2p.pairs()) {
      if (p.src() != r && p.dst() != r) continue;
      worst = first ? p.bw_gbps() : std::min(worst, p.bw_gbps());
      best = first ? p.bw_gbps() : std::max(best, p.bw_gbps());
      first = false;
    }
    f.ranks = {r};
    f.evidence += "; every pair with rank " + std::to_string(r) + " (" +
                  (r < p2p.hosts_size() ? p2p.hosts(r) : std::string("?")) + ") runs at " + Num(worst, 3) + "-" +
                  Num(best, 3) + " GB/s, in both directions, while the pairs without it are fast: that host's "
                  "link is degraded, and the ring runs at its speed. Move the rank off the host.";
    f.fix.add_replace_host_ranks(r);
  } else {
    f.found = false;
    f.evidence += "; no single rank's pairs stand out, so it is not one host's link.";
  }
  return f;
}

bool LooksHung(const v1::SessionStatus& st) {
  int running = 0, silent = 0;
  for (const auto& r : st.ranks()) {
    if (r.state() != "running") continue;
    ++running;
    if (Stalled(r)) ++silent;
  }
  return running > 0 && silent == running;
}

AutopilotFinding ReasonHang(const v1::SessionStatus& st, const v1::FlightRecorderResponse& fr) {
  AutopilotFinding f;
  const analysis::FrAnalysis a = analysis::AnalyzeFlightRecords(fr);
  if (!a.stuck) return f;
  double quiet = 0;
  for (const auto& r : st.ranks()) quiet = std::max(quiet, r.since_last_step_s());
  f.found = true;
  f.cause = "collective-hang";
  f.ranks = a.odd_ranks;
  f.evidence = "no rank has reported a step for " + Num(quiet) + " s, and no error: the job hangs (comm.timeout_s = " +
               Num(st.job().comm().timeout_s() > 0 ? st.job().comm().timeout_s() : 30) +
               " s). Flight recorders: " + a.summary;
  const auto& d = st.job().data();
  if (a.desync && d.dataset_size() > 0 && !d.drop_last()) {
    f.evidence += " The data is a finite dataset of " + std::to_string(d.dataset_size()) +
                  " samples sharded across ranks without padding and without drop_last, so ranks can run a "
                  "different number of steps per epoch; drop the ragged last batch, and make a hang fail fast.";
    auto* s = f.fix.add_settings();
    s->set_key("data.drop_last");
    s->set_value("true");
    s = f.fix.add_settings();
    s->set_key("comm.timeout_s");
    s->set_value("60");
  }
  return f;
}

std::string TraceEvidence(const v1::TraceResponse& trace) {
  std::vector<double> per_step, bytes, ms;
  int64_t lo = INT64_MAX, hi = -1;
  for (const auto& r : trace.ranks()) {
    for (const auto& s : r.steps()) {
      lo = std::min(lo, s.step());
      hi = std::max(hi, s.step());
      int n = 0;
      for (const auto& sp : s.spans()) {
        if (sp.name() != "allreduce") continue;
        ++n;
        bytes.push_back(static_cast<double>(sp.bytes()));
        ms.push_back(sp.dur_ms());
      }
      per_step.push_back(n);
    }
  }
  if (per_step.empty() || bytes.empty()) return "";
  return "The trace of steps " + std::to_string(lo) + "-" + std::to_string(hi) + " shows " + Num(Median(per_step), 0) +
         " all-reduce(s) per step, of " + Bytes(static_cast<int64_t>(Median(bytes))) + " each, taking " +
         Num(Median(ms), 2) + " ms each (medians over ranks and steps).";
}

std::string MetricsEvidence(const v1::MetricsResponse& m) {
  const SeriesPoints loss = JobSeries(m, "loss"), norm = JobSeries(m, "grad_norm");
  if (loss.values.size() < 2) return "";
  int bad = 0;
  for (double v : norm.values) bad += std::isfinite(v) ? 0 : 1;
  const double a = loss.values.front(), b = loss.values.back();
  return "The metrics of the " + m.run() + " run: loss " + Sig(a) + " at step " + std::to_string(loss.steps.front()) +
         " and " + Sig(b) + " at step " + std::to_string(loss.steps.back()) + " (" +
         (std::isfinite(a) && a != 0 ? Num(100 * (b - a) / a, 1) + "%" : std::string("not finite")) +
         "); the gradient norm is inf/NaN at " + std::to_string(bad) + " of " + std::to_string(norm.values.size()) +
         " steps.";
}

CurveFinding ReasonCurves(const v1::MetricsResponse& main, const v1::MetricsResponse& baseline,
                          const v1::JobSpec& job, int briefed_world) {
  CurveFinding out;
  const SeriesPoints a = JobSeries(main, "loss"), b = JobSeries(baseline, "loss");
  // The steps both runs hold (either may be thinned), after the first ten:
  // both start from the same weights, so the first steps say little.
  std::vector<double> mine, theirs;
  for (size_t i = 0, j = 0; i < a.steps.size() && j < b.steps.size();) {
    if (a.steps[i] < b.steps[j]) ++i;
    else if (b.steps[j] < a.steps[i]) ++j;
    else {
      if (a.steps[i] >= 10) {
        mine.push_back(a.values[i]);
        theirs.push_back(b.values[j]);
      }
      ++i, ++j;
    }
  }
  if (mine.size() < 30) return out;
  double m = 0, t = 0;
  for (size_t k = 0; k < mine.size(); ++k) m += mine[k] / mine.size(), t += theirs[k] / theirs.size();
  if (!(t > 0) || !std::isfinite(t)) return out;  // nothing healthy to hold it to
  // Where the main run's loss peaked early (or first stopped being a
  // number), against where it started.
  size_t peak = 0;
  for (size_t k = 0; k < a.steps.size() && a.steps[k] < 50; ++k) {
    if (!std::isfinite(a.values[k])) {
      peak = k;
      break;
    }
    if (a.values[k] > a.values[peak]) peak = k;
  }
  const bool finite = std::isfinite(m);
  // The same launch command at the world size the briefing states: its
  // global batch, against the one this job's steps average. A loss well
  // off the baseline's with fewer samples a step than the recipe's is the
  // batch, whatever else a 1.5x gap would be blamed on.
  const int world = std::max(1, job.world_size()), accum = std::max(1, job.grad_accum_steps());
  const SeriesPoints gb_now = JobSeries(main, "global_batch");
  const int64_t global_now = gb_now.values.empty() ? 0 : static_cast<int64_t>(gb_now.values.back());
  const bool batch_moved = briefed_world > 0 && briefed_world != world && global_now > 0 && finite && m >= 1.2 * t;
  out.diverged = !finite || m >= 1.5 * t || batch_moved;
  if (!out.diverged) return out;
  out.evidence = "The main run's loss over the " + std::to_string(mine.size()) +
                 " steps from 10 that the healthy baseline also ran averages " +
                 (finite ? Sig(m) : std::string("inf/NaN")) + " against the baseline's " + Sig(t) +
                 (finite ? " (" + Num(m / t, 2) + "x)" : std::string()) +
                 ", on the same seed, data and initial weights; it starts at " + Sig(a.values.front()) +
                 (std::isfinite(a.values[peak]) ? " and peaks at " + Sig(a.values[peak]) + " at step "
                                                : " and is not a number from step ") +
                 std::to_string(a.steps[peak]) + ".";
  if (batch_moved) {
    const int64_t global_then = global_now / world * briefed_world;
    out.evidence += " The job averages " + std::to_string(global_now) + " samples a step (" +
                    std::to_string(job.data().batch_size()) + " per rank x " + std::to_string(accum) +
                    " micro-batch(es) x " + std::to_string(world) + " ranks); the same launch command on the " +
                    std::to_string(briefed_world) + " hosts of the briefing averaged " + std::to_string(global_then) +
                    ", at the same learning rate (" + Sig(job.optim().lr()) + ")";
    AutopilotFinding& f = out.finding;
    if (global_then % global_now != 0 && global_now % global_then != 0) {
      out.evidence += ".";
      return out;
    }
    f.found = true;
    f.cause = "global-batch-change";
    f.evidence = out.evidence + ": each step's gradient is an average over " +
                 Num(static_cast<double>(global_now) / global_then, 2) +
                 "x the samples the rate was tuned for.";
    // The samples the missing ranks computed, as micro-batches on these;
    // else as a bigger per-rank batch.
    if ((static_cast<int64_t>(accum) * global_then) % global_now == 0) {
      Set(&f.fix, "grad_accum_steps", std::to_string(static_cast<int64_t>(accum) * global_then / global_now));
    } else {
      Set(&f.fix, "data.batch_size",
          std::to_string(static_cast<int64_t>(job.data().batch_size()) * global_then / global_now));
    }
    return out;
  }
  // The gradient at the first step both runs hold, from the same weights
  // and data: a loop that sums its micro-batch losses instead of averaging
  // them has K times the healthy one.
  const SeriesPoints gm = JobSeries(main, "grad_norm"), gh = JobSeries(baseline, "grad_norm");
  if (accum > 1 && !gm.steps.empty() && !gh.steps.empty() && gm.steps[0] == gh.steps[0] && gh.values[0] > 0 &&
      std::isfinite(gm.values[0])) {
    const double ratio = gm.values[0] / gh.values[0];
    out.evidence += " At step " + std::to_string(gm.steps[0]) + " the gradient norm is " + Sig(gm.values[0]) +
                    " against the baseline's " + Sig(gh.values[0]) + " (" + Num(ratio, 2) + "x), with " +
                    std::to_string(accum) + " micro-batches per step";
    if (std::abs(ratio / accum - 1) < 0.1) {
      AutopilotFinding& f = out.finding;
      f.found = true;
      f.cause = "grad-accumulation-bug";
      f.evidence = out.evidence + ": the gradient is the micro-batches' sum, not their mean. Each micro-batch's "
                   "loss must be divided by the accumulation steps before backward (optim.accumulation_loss = " +
                   (job.optim().accumulation_loss().empty() ? std::string("mean") : job.optim().accumulation_loss()) +
                   "); summed, SGD takes steps " + std::to_string(accum) + " times too long.";
      Set(&f.fix, "optim.accumulation_loss", "mean");
      return out;
    }
    out.evidence += ".";
  }
  const SeriesPoints lr = JobSeries(main, "lr");
  const auto& o = job.optim();
  const double trained = lr.values.empty() ? 0 : lr.values.back();
  if (!(o.lr() > 0) || !(trained > 0)) return out;
  out.evidence += " The job trains at a learning rate of " + Sig(trained) + ", " + Num(trained / o.lr(), 1) +
                  "x optim.lr (" + Sig(o.lr()) + ")";
  // The batch the rule scales by: the global batch the trainer reports
  // (micro-batches and ranks included) over the one optim.lr was tuned at.
  const SeriesPoints gb = JobSeries(main, "global_batch");
  const int64_t global = gb.values.empty() ? 0 : static_cast<int64_t>(gb.values.back());
  const int ref = o.reference_global_batch();
  const double k = ref > 0 ? static_cast<double>(global) / ref : 0;
  if (o.lr_scaling() != "linear" || k < 4) {
    out.evidence += ".";
    return out;
  }
  out.evidence += ": optim.lr_scaling = linear, from optim.reference_global_batch = " + std::to_string(ref) +
                  " to a global batch of " + std::to_string(global) + ", " + Num(k, 0) + " times as big";
  const bool adam = o.kind() == "adamw";
  if (!adam && o.warmup_steps() >= 100) {
    // The rule SGD is meant to have, with the warm-up it needs: not this.
    out.evidence += ", with a warm-up of " + std::to_string(o.warmup_steps()) + " steps.";
    return out;
  }
  AutopilotFinding& f = out.finding;
  f.found = true;
  f.cause = "lr-divergence";
  if (adam) {
    f.evidence = out.evidence + ". The linear rule is SGD's; an AdamW update is about the learning rate in size "
                 "whatever the gradient's scale, and the rule that keeps its dynamics as the batch grows is the "
                 "square root (" + Num(std::sqrt(k), 1) + "x here).";
    Set(&f.fix, "optim.lr_scaling", "sqrt");
  } else {
    // SGD: the linear rule, with the warm-up it needs (Goyal et al.).
    f.evidence = out.evidence + ", with " + std::to_string(o.warmup_steps()) + " warm-up steps: the linear rule "
                 "needs a warm-up from a small learning rate while the early gradients change fast.";
    Set(&f.fix, "optim.warmup_steps", "100");
  }
  return out;
}

AutopilotFinding ReasonActivations(const AutopilotFinding& before, const v1::RunProbeResponse& r) {
  AutopilotFinding f = before;
  f.found = false;
  f.needs_activations = false;
  f.fix.clear_settings();
  double input_max = 0;
  std::string input_dtype;
  for (const auto& a : r.activations()) {
    if (a.name() == "input" || a.name() == "embeddings") {
      input_max = a.abs_max();
      input_dtype = a.dtype();
    }
    if (a.inf() + a.nan() == 0) continue;
    // The first point that holds one: the op before it made it.
    const std::string& n = a.name();
    std::string layer;
    if (n.rfind("layers.", 0) == 0) layer = n.substr(0, n.find('.', 7));
    if (n.rfind("head", 0) == 0) layer = "head";
    f.evidence += " probe activations: the first point of the forward pass that holds an inf or a NaN is " +
                  n + " (" + a.dtype() + ": " + std::to_string(a.inf()) + " inf, " + std::to_string(a.nan()) +
                  " NaN, on " + std::to_string(a.ranks_nonfinite()) + " of " +
                  std::to_string(r.world_size()) + " ranks)";
    if (!input_dtype.empty())
      f.evidence += "; the model's input (" + input_dtype + ") reaches " + Num(input_max) +
                    (input_max > 65504 ? ", beyond fp16's 65504" : "");
    if (layer.empty()) {
      f.evidence += ". That is not a layer's output: no layer to keep in fp32.";
      return f;
    }
    f.evidence += ". Run " + layer +
                  " in fp32 (model.keep_fp32), as autocast(enabled=False) around it would: "
                  "its input and output keep fp32's range, and every other layer stays in fp16.";
    f.found = true;
    Set(&f.fix, "model.keep_fp32", layer);
    return f;
  }
  f.evidence += " probe activations: no point of the forward pass holds an inf or a NaN on the last batch.";
  return f;
}

AutopilotFinding ReasonChecksums(const v1::RunProbeResponse& r) {
  AutopilotFinding f;
  std::map<int, int> odd_tensors;  // rank -> tensors where it holds a minority hash
  std::string apart;
  int differ = 0;
  for (const auto& t : r.checksums()) {
    if (t.distinct() <= 1) continue;
    ++differ;
    std::map<std::string, int> votes;
    for (const auto& h : t.sha256()) ++votes[h];
    std::string most;
    int most_n = 0;
    for (const auto& [h, n] : votes)
      if (n > most_n) most = h, most_n = n;
    if (most_n * 2 <= t.sha256_size()) continue;  // no majority: no side to call wrong
    for (int rank = 0; rank < t.sha256_size(); ++rank)
      if (t.sha256(rank) != most) ++odd_tensors[rank];
    if (apart.size() < 200) apart += (apart.empty() ? "" : ", ") + t.name();
  }
  if (differ == 0 || odd_tensors.empty()) return f;
  f.found = true;
  f.cause = "silent-divergence";
  std::string ranks;
  for (const auto& [rank, n] : odd_tensors) {
    f.ranks.push_back(rank);
    f.fix.add_replace_host_ranks(rank);
    ranks += (ranks.empty() ? "" : ",") + std::to_string(rank);
  }
  f.evidence = "probe checksum after step " + std::to_string(r.step()) + ": " + std::to_string(differ) + " of " +
               std::to_string(r.checksums_size()) + " parameter tensors are not the same on every rank (" + apart +
               "); rank(s) " + ranks + " hold other bytes than the rest. Gradients are all-reduced, parameters "
               "never are, so nothing brings a replica back once it is off: the host corrupted it";
  return f;
}

int64_t FirstRestartStep(const v1::SessionStatus& st) {
  for (const auto& e : st.events()) {
    if (e.kind() != "job_restarted") continue;
    const std::string key = "resuming from latest (step-";
    const size_t at = e.message().find(key);
    if (at == std::string::npos) continue;  // a restart from somewhere else: the next one may say
    return std::atoll(e.message().c_str() + at + key.size());
  }
  return -1;
}

AutopilotFinding ReasonResume(const v1::RunProbeResponse& resume, const v1::ListCheckpointsResponse& list,
                              int64_t restart_step) {
  AutopilotFinding f;
  const v1::ResumeProbe& p = resume.resume();
  if (p.same() || p.parts_size() == 0) return f;
  std::string differ;
  for (const auto& part : p.parts())
    if (part.differ() > 0) differ += (differ.empty() ? "" : ", ") + part.part();
  f.found = true;
  f.cause = "resume-without-state";
  f.evidence = "probe resume from " + p.from_dir() + ": after a save at step " + std::to_string(p.saved_at()) +
               " and a resume (checkpoint.restore: " + p.restore() + "), the state at step " +
               std::to_string(p.to_step()) + " differs from the same steps run straight in: " + differ +
               ". The job restarted from step " + std::to_string(restart_step);
  Set(&f.fix, "checkpoint.restore", "all");
  std::string dir;
  for (const auto& c : list.checkpoints())  // newest first
    if (c.valid() && c.step() <= restart_step) {
      dir = c.dir();
      break;
    }
  Set(&f.fix, "checkpoint.resume_from", dir);
  f.evidence += dir.empty() ? "; no checkpoint from before it is left, so from scratch"
                            : "; the newest checkpoint written before it: " + dir;
  return f;
}

std::string NewestValidCheckpoint(const v1::ListCheckpointsResponse& list, std::string* why) {
  for (const auto& c : list.checkpoints()) {  // newest first
    const std::string step = "step " + std::to_string(c.step());
    if (!c.valid()) {
      *why += (why->empty() ? "" : "; ") + step + " invalid (" + c.reason() + ")";
      continue;
    }
    *why += (why->empty() ? "" : "; ") + step + " valid, " + std::to_string(c.steps_lost()) + " steps lost";
    return c.dir();
  }
  return "";
}

std::string RollbackPoint(const std::vector<v1::VerifyCheckpointResponse>& verified, std::string* why) {
  for (const auto& c : verified) {
    int differ = 0;
    for (const auto& t : c.replicas()) differ += t.distinct() > 1 ? 1 : 0;
    const std::string step = "step " + std::to_string(c.step());
    if (!c.valid()) {
      *why += (why->empty() ? "" : "; ") + step + " invalid";
      continue;
    }
    if (c.replicas_size() == 0) {
      *why += (why->empty() ? "" : "; ") + step + ": its replicas were not compared";
      continue;
    }
    if (differ > 0) {
      *why += (why->empty() ? "" : "; ") + step + ": " + std::to_string(differ) + " of " +
              std::to_string(c.replicas_size()) + " model tensors differ between the ranks' shards";
      continue;
    }
    *why += (why->empty() ? "" : "; ") + step + ": all " + std::to_string(c.replicas_size()) +
            " model tensors the same in every shard";
    return c.dir();
  }
  return "";
}

int RunAutopilot(CliContext& ctx, const std::string& scenario, int64_t seed) {
  DrillClient client(ctx.controller, std::chrono::seconds(10), ctx.tls_ca);
  if (Status st = UseToken(ctx, &client); !st.ok()) {
    *ctx.err << "error: " << st.message() << "\n";
    return 1;
  }
  auto info = client.StartSession(scenario, seed);
  if (!info.ok()) {
    *ctx.err << "error: " << info.status().message() << "\n";
    return 1;
  }
  return PilotSession(ctx, info->session_id());
}

int PilotSession(CliContext& ctx, const std::string& id) {
  std::ostream& out = *ctx.out;
  DrillClient client(ctx.controller, std::chrono::seconds(10), ctx.tls_ca);
  if (Status token = UseToken(ctx, &client); !token.ok()) {
    *ctx.err << "error: " << token.message() << "\n";
    return 1;
  }
  auto st = client.GetStatus(id);
  if (!st.ok()) {
    *ctx.err << "error: " << st.status().message() << "\n";
    return 1;
  }
  const std::string state = st->session().state();
  if (state != "created" && state != "baseline" && state != "running") {
    *ctx.err << "error: session " << id << " is " << state
             << ": the autopilot plays a session before its diagnosis and fix\n";
    return 1;
  }
  out << "autopilot: session " << id << " (" << st->session().scenario_id() << ", seed "
      << st->session().seed() << ")\n";
  st = WaitWhile(client, id, {"created", "baseline"}, "", 300);
  if (!st.ok() || st->session().state() != "running") {
    *ctx.err << "error: the session did not reach the running state"
             << (st.ok() ? " (" + st->session().state() + ")" : ": " + st.status().message()) << "\n";
    return 1;
  }
  out << "baseline: " << Num(st->baseline().throughput_samples_per_s()) << " samples/s, median step "
      << Num(st->baseline().median_step_ms(), 1) << " ms\n";

  // The same findings on three looks in a row, so one noisy window cannot
  // decide; faults may start late, so keep looking for a while. A job that
  // shows nothing wrong for long enough is healthy, and that is the finding.
  std::vector<AutopilotFinding> findings;
  int agree = 0, healthy_looks = 0;
  int64_t agree_from = 0;  // the newest step when the current findings first showed
  std::string healthy_why;
  int64_t last_newest = -2;
  const auto running_since = std::chrono::steady_clock::now();
  const auto deadline = running_since + std::chrono::seconds(180);
  auto same = [](const std::vector<AutopilotFinding>& a, const std::vector<AutopilotFinding>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].cause != b[i].cause || a[i].ranks != b[i].ranks) return false;
    return true;
  };
  bool healthy = false;
  std::deque<std::string> looks;  // what the last looks saw, for a run that ends without a finding
  bool replicas_checked = false;
  AutopilotFinding replicas_apart;  // found: the replicas differ (ReasonChecksums)
  // The launcher restarted the job and it trains again: whether the
  // restart carried its state through is the next question, whatever the
  // telemetry's windows say meanwhile (they mix the runs before and after).
  bool restarted_running = false;
  std::chrono::steady_clock::time_point running_again{};
  // Fast and even is not the same as learning: once the main run has run
  // the baseline's steps, its loss beside the baseline's over them (same
  // seed, data and initial weights). A loss far off the baseline's is
  // measured over hundreds of steps, not one window: it needs no three
  // looks, and it is asked before any throughput finding is acted on, as an
  // engineer asks whether the job learns before asking whether it is fast.
  v1::GetMetricsRequest curves_req;
  curves_req.set_session_id(id);
  curves_req.set_run("baseline");
  auto base_curves = client.GetMetrics(curves_req);
  int64_t baseline_steps = 0;
  if (base_curves.ok())
    for (const auto& r : base_curves->ranks())
      if (!r.rows().empty()) baseline_steps = std::max<int64_t>(baseline_steps, r.rows().rbegin()->step() + 1);
  CurveFinding curves;
  bool curves_checked = !base_curves.ok() || baseline_steps == 0;  // nothing to compare with
  auto check_curves = [&](const v1::JobSpec& job) {
    curves_req.set_run("main");
    curves_req.set_to_step(baseline_steps);
    auto main = client.GetMetrics(curves_req);
    if (!main.ok()) return;  // asked again at the next look
    curves_checked = true;
    curves = ReasonCurves(*main, *base_curves, job, BriefedWorldSize(st->session().briefing()));
  };
  // Once the curves have found something, a few more looks (8 s) let a
  // second fault beside it settle.
  std::chrono::steady_clock::time_point curves_grace{};
  // Agreement needs three looks and two whole status windows of new steps
  // since the findings first showed (a fault that starts late, or a slow
  // job, has not shown everything in the first window).
  int64_t newest = -1;
  bool stepping = true;  // a hung or failed job has no new windows to wait for
  auto settled = [&] { return agree >= 3 && (!stepping || newest - agree_from >= 40); };
  auto graced = [&] { return curves.finding.found && std::chrono::steady_clock::now() >= curves_grace; };
  while (std::chrono::steady_clock::now() < deadline && !settled() && !healthy && !graced()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    st = client.GetStatus(id);
    if (!st.ok()) break;
    if (st->session().state() != "running") break;
    bool full = st->ranks_size() > 0, failed = false;
    for (const auto& r : st->ranks()) {
      full = full && r.window_steps() >= 10;
      failed = failed || r.state() == "failed";
    }
    const bool restarted = FirstRestartStep(*st) > 0;
    if (restarted && full && !failed && !LooksHung(*st)) {
      if (running_again == std::chrono::steady_clock::time_point{}) running_again = std::chrono::steady_clock::now();
      if (std::chrono::steady_clock::now() - running_again > std::chrono::seconds(10)) {
        restarted_running = true;
        break;
      }
    }
    if (!full && !failed) continue;
    // Half a minute without a settled finding: before looking longer at
    // numbers that do not agree, compare the replicas (once).
    if (!replicas_checked && !failed && std::chrono::steady_clock::now() - running_since > std::chrono::seconds(30)) {
      replicas_checked = true;
      v1::RunProbeRequest pr;
      pr.set_session_id(id);
      pr.mutable_spec()->set_op("checksum");
      if (auto sums = client.RunProbe(pr); sums.ok()) replicas_apart = ReasonChecksums(*sums);
      if (replicas_apart.found) break;
    }
    // A job that stopped moving first: its last window's phase times are
    // stale and say nothing about why. Until it has been still long enough
    // to call it hung, a look at an unchanged window is no new evidence.
    newest = NewestStep(*st);
    if (!curves_checked && newest >= baseline_steps) {
      check_curves(st->job());
      if (curves.finding.found) curves_grace = std::chrono::steady_clock::now() + std::chrono::seconds(8);
    }
    const bool moved = newest != last_newest;
    last_newest = newest;
    std::vector<AutopilotFinding> now;
    if (!LooksHung(*st) && !failed && !moved) continue;
    // Restarted and stepping again: the windows mix the run before the
    // restart with the one after, on cores that just launched four
    // processes, and the question is what the restart carried through
    // (above, after 10 s). No timing finding may settle meanwhile
    // (night-restart seed 107 under load: a comm-bound job 1.56x its
    // baseline right after its restart settled as a slow link).
    if (restarted && !LooksHung(*st) && !failed) {
      agree = 0;
      findings.clear();
      continue;
    }
    stepping = !LooksHung(*st) && !failed;
    if (LooksHung(*st)) {
      auto fr = client.GetFlightRecorder(id);
      if (fr.ok()) {
        AutopilotFinding h = ReasonHang(*st, *fr);
        if (h.found) now.push_back(h);
      }
    } else {
      now = ReasonAll(*st, &findings);
    }
    looks.push_back(LookLine(*st, now));
    if (looks.size() > 8) looks.pop_front();
    if (!now.empty() && same(now, findings)) {
      ++agree;
    } else {
      agree = now.empty() ? 0 : 1;
      agree_from = newest;
    }
    findings = now;
    // Nothing found, and the numbers say healthy: twelve looks in a row
    // (8 s), after 20 s of watching, so that a fault has had time to show.
    healthy_looks = now.empty() && LooksHealthy(*st, &healthy_why) ? healthy_looks + 1 : 0;
    healthy = healthy_looks >= 12 && std::chrono::steady_clock::now() - running_since > std::chrono::seconds(20);
  }
  if (!st.ok()) {
    *ctx.err << "error: " << st.status().message() << "\n";
    return 1;
  }
  // A finding that settled before the main run reached the baseline's
  // length: let it run there first (a stepping job; at most 60 s), so the
  // curves are asked before anything is acted on.
  for (const auto wait_until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       !curves_checked && stepping && st.ok() && st->session().state() == "running" &&
       std::chrono::steady_clock::now() < wait_until;) {
    if (NewestStep(*st) >= baseline_steps) {
      check_curves(st->job());
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    st = client.GetStatus(id);
  }
  if (!st.ok()) {
    *ctx.err << "error: " << st.status().message() << "\n";
    return 1;
  }
  if (curves.finding.found) {
    // What else settled stays (two faults at once), except an interconnect
    // suspicion that no host explains yet: on shared cores a comm-bound
    // job's window swings, and a loss 1.5x or more its baseline's is this
    // job's problem whatever its speed.
    std::vector<AutopilotFinding> kept;
    if (settled())
      for (const auto& f : findings)
        if (!f.needs_probes) kept.push_back(f);
    kept.push_back(curves.finding);
    findings = kept;
    healthy = false;
  } else if (curves.diverged && healthy) {
    out << "\nevidence: " << curves.evidence
        << "\nautopilot: the loss is off the healthy baseline's and nothing in the settings explains it; "
           "ending the session\n";
    (void)client.EndSession(id, std::chrono::seconds(60));
    return 1;
  } else if (!settled() && !healthy && !replicas_apart.found && !restarted_running) {
    out << "autopilot: no consistent finding in the telemetry; ending the session\n"
        << "the last looks (newest last):\n";
    for (const auto& l : looks) out << "  " << l << "\n";
    (void)client.EndSession(id, std::chrono::seconds(60));
    return 1;
  }
  PrintStatus(*st, out);
  if (healthy || replicas_apart.found) {
    // Fast, even and learning as it should: the replicas may still have
    // gone apart, which no throughput or loss shows. Compare them.
    v1::RunProbeRequest pr;
    pr.set_session_id(id);
    pr.mutable_spec()->set_op("checksum");
    if (auto sums = client.RunProbe(pr); sums.ok()) {
      AutopilotFinding d = ReasonChecksums(*sums);
      if (d.found) {
        out << "\n";
        PrintProbe(*sums, out);
        // Roll back to the newest checkpoint whose replicas agree.
        std::vector<v1::VerifyCheckpointResponse> verified;
        if (auto list = client.ListCheckpoints(id); list.ok()) {
          for (const auto& c : list->checkpoints()) {  // newest first: stop at the first that agrees
            auto v = client.VerifyCheckpoint(id, c.step());
            if (!v.ok()) continue;
            verified.push_back(*v);
            std::string unused;
            if (!RollbackPoint({*v}, &unused).empty()) break;
          }
          std::string why;
          const std::string dir = RollbackPoint(verified, &why);
          Set(&d.fix, "checkpoint.resume_from", dir);
          d.evidence += ". Checkpoints, newest first: " + why +
                        (dir.empty() ? "; none agrees, so from scratch" : "; resume from " + dir);
        }
        healthy = false;
        findings = {d};
      }
    }
  }
  // A job that restarted and runs as it did: did the restart carry the
  // whole state through? A save and resume against the same steps straight.
  if (const int64_t restart = FirstRestartStep(*st); (healthy || restarted_running) && restart > 0) {
    v1::RunProbeRequest pr;
    pr.set_session_id(id);
    pr.mutable_spec()->set_op("resume");
    auto probe = client.RunProbe(pr);
    auto list = client.ListCheckpoints(id);
    if (!probe.ok()) out << "\nautopilot: probe resume failed: " << probe.status().message() << "\n";
    if (!list.ok()) out << "\nautopilot: ckpt list failed: " << list.status().message() << "\n";
    if (probe.ok() && list.ok()) {
      out << "\n";
      PrintProbe(*probe, out);
      AutopilotFinding d = ReasonResume(*probe, *list, restart);
      if (d.found) {
        healthy = false;
        findings = {d};
      } else if (restarted_running && findings.empty()) {
        healthy = true;  // a host went down, and the restart carried everything through
        healthy_why = "the job restarted from step " + std::to_string(restart) +
                      " and its save and resume are exact (probe resume: every part the same)";
      }
    }
    if (restarted_running && findings.empty() && !healthy) {
      out << "autopilot: the job restarted and nothing says what its restart did; ending the session\n";
      (void)client.EndSession(id, std::chrono::seconds(60));
      return 1;
    }
  }
  if (healthy) {
    AutopilotFinding none;
    none.found = true;
    none.cause = "no-fault";
    none.evidence = healthy_why;
    none.fix.set_no_change(true);
    findings = {none};
  }
  for (auto& finding : findings) {
    if (finding.cause != "corrupt-checkpoint") continue;
    // Back to the newest checkpoint that verifies, as a resume checks it.
    auto list = client.ListCheckpoints(id);
    if (!list.ok()) continue;
    std::string why;
    const std::string dir = NewestValidCheckpoint(*list, &why);
    Set(&finding.fix, "checkpoint.resume_from", dir);
    finding.evidence += " Checkpoints, newest first: " + why +
                        (dir.empty() ? "; none verifies, so from scratch" : "; resume from " + dir);
  }
  for (auto& finding : findings) {
    if (finding.cause != "small-buckets" && finding.cause != "slow-link") continue;
    // Many small collectives or a few slow ones: the timeline tells them apart.
    v1::GetTraceRequest tr;
    tr.set_session_id(id);
    if (auto trace = client.GetTrace(tr); trace.ok()) {
      const std::string seen = TraceEvidence(*trace);
      if (!seen.empty()) finding.evidence += " " + seen;
    }
  }
  for (auto& finding : findings) {
    if (finding.cause != "fp16-overflow") continue;
    // The curves say whether anything is learnt: the loss over the run.
    v1::GetMetricsRequest mr;
    mr.set_session_id(id);
    if (auto m = client.GetMetrics(mr); m.ok()) finding.evidence += " " + MetricsEvidence(*m);
  }
  for (auto& finding : findings) {
    if (!finding.needs_activations) continue;
    // Which value of the forward pass does not fit: each layer's output.
    v1::RunProbeRequest pr;
    pr.set_session_id(id);
    pr.mutable_spec()->set_op("activations");
    auto acts = client.RunProbe(pr);
    if (!acts.ok()) {
      *ctx.err << "error: probe: " << acts.status().message() << "\n";
      (void)client.EndSession(id, std::chrono::seconds(60));
      return 1;
    }
    out << "\n";
    PrintProbe(*acts, out);
    finding = ReasonActivations(finding, *acts);
    if (!finding.found) {
      out << "\nevidence: " << finding.evidence
          << "\nautopilot: no layer's output holds the overflow; ending the session\n";
      (void)client.EndSession(id, std::chrono::seconds(60));
      return 1;
    }
  }
  for (auto& finding : findings) {
    if (!finding.needs_probes) continue;
    // What a learner would run next: the ring's bandwidth, then each pair.
    v1::RunProbeRequest pr;
    pr.set_session_id(id);
    pr.mutable_spec()->set_op("allreduce");
    pr.mutable_spec()->set_min_bytes(1 << 10);
    pr.mutable_spec()->set_max_bytes(4 << 20);
    auto ar = client.RunProbe(pr);
    pr.mutable_spec()->set_op("p2p");
    pr.mutable_spec()->set_min_bytes(0);
    pr.mutable_spec()->set_max_bytes(1 << 20);
    auto p2p = ar.ok() ? client.RunProbe(pr) : ar;
    if (!p2p.ok()) {
      *ctx.err << "error: probe: " << p2p.status().message() << "\n";
      (void)client.EndSession(id, std::chrono::seconds(60));
      return 1;
    }
    out << "\n";
    PrintProbe(*ar, out);
    PrintProbe(*p2p, out);
    finding = ReasonProbes(finding, *ar, *p2p);
    if (!finding.found) {
      out << "\nevidence: " << finding.evidence << "\nautopilot: the probes do not point at a host; ending the session\n";
      (void)client.EndSession(id, std::chrono::seconds(60));
      return 1;
    }
  }
  // A job that does not fit: which remedy, from `firedrill plan`'s
  // predictions and the workload settings the brief lets a fix change.
  for (auto& finding : findings) {
    if (finding.cause != "out-of-memory") continue;
    std::vector<std::string> may;
    if (auto brief = client.GetScenario(st->session().scenario_id()); brief.ok())
      may.assign(brief->may_change().begin(), brief->may_change().end());
    finding = PlanMemoryFix(finding, st->job(), may);
  }
  v1::ApplyFixRequest fix;
  for (const auto& finding : findings) {
    out << "\nevidence: " << finding.evidence << "\n";
    std::string ranks;
    for (int r : finding.ranks) ranks += " " + std::to_string(r);
    out << "diagnosis: " << finding.cause << (ranks.empty() ? " (whole job)" : " on rank" + ranks) << "\n";
    for (int r : finding.fix.replace_host_ranks()) fix.add_replace_host_ranks(r);
    for (const auto& kv : finding.fix.settings()) *fix.add_settings() = kv;
    if (finding.fix.no_change()) fix.set_no_change(true);
  }
  v1::SubmitDiagnosisRequest d;
  d.set_session_id(id);
  std::string note;
  for (const auto& finding : findings) {
    v1::Finding* x = d.add_findings();
    x->set_cause(finding.cause);
    for (int r : finding.ranks) x->add_culprit_ranks(r);
    note += (note.empty() ? "" : " ") + finding.evidence;
  }
  d.set_note("autopilot: " + note);
  if (auto dr = client.SubmitDiagnosis(d); !dr.ok()) {
    *ctx.err << "error: " << dr.status().message() << "\n";
    return 1;
  }
  fix.set_session_id(id);
  out << "fix:";
  for (int r : fix.replace_host_ranks()) out << " --replace-host " << r;
  for (const auto& s : fix.settings()) out << " --set " << s.key() << "=" << s.value();
  if (fix.no_change()) out << " --no-change";
  out << "\n";
  if (auto fr = client.ApplyFix(fix); !fr.ok()) {
    *ctx.err << "error: " << fr.status().message() << "\n";
    return 1;
  }
  auto done = WaitWhile(client, id, {"running", "fixing", "verifying"}, "", 600);
  if (!done.ok()) {
    *ctx.err << "error: " << done.status().message() << "\n";
    return 1;
  }
  PrintVerification(done->verification(), out);
  auto score = client.GetScore(id);
  if (!score.ok()) {
    *ctx.err << "error: " << score.status().message() << "\n";
    return 1;
  }
  if (ctx.json) out << ToJson(*score) << "\n";
  else PrintScore(*score, out);
  return done->verification().passed() ? 0 : 1;
}

}  // namespace firedrill::cli
