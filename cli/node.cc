#include "cli/node.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace firedrill::cli {

namespace {

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string Limit(const NodeView& v) {
  if (!v.cgroup) return "unknown (" + v.cgroup_error + ")";
  if (v.quota_us <= 0 || v.period_us <= 0) return "none";
  return Fmt("%.2f CPU", double(v.quota_us) / double(v.period_us)) + " (quota " + std::to_string(v.quota_us) +
         " us per " + std::to_string(v.period_us) + " us period)";
}

void Row(std::ostream& out, int indent, const std::string& key, const std::string& value) {
  std::string k(indent, ' ');
  k += key;
  if (k.size() < 44) k.resize(44, ' ');
  out << k << ": " << value << "\n";
}

}  // namespace

std::vector<NodeView> NodeViews(const v1::TraceResponse& trace, int rank) {
  std::vector<NodeView> views;
  for (const auto& r : trace.ranks()) {
    if (rank >= 0 && r.rank() != rank) continue;
    NodeView v;
    v.rank = r.rank();
    v.host = r.host();
    const int n = r.steps_size();
    v.steps = n;
    if (n == 0) {
      views.push_back(v);
      continue;
    }
    const v1::StepReport& first = r.steps(0);
    const v1::StepReport& last = r.steps(n - 1);
    v.first_step = first.step();
    v.last_step = last.step();
    v.cpus = last.cpus();
    v.compute_threads = last.compute_threads();
    v.cgroup = last.cpu().available();
    v.cgroup_error = last.cpu().error();
    v.quota_us = last.cpu().quota_us();
    v.period_us = last.cpu().period_us();
    // Cumulative counters, summed step by step from the window's first
    // step's end: a thread that moved to another cgroup (a quota taking
    // hold, or let go) reads another cgroup's counters from then on, so a
    // step whose counters went down counts nothing and one that started
    // from a fresh cgroup counts from its zero.
    if (n > 1 && v.cgroup) {
      int64_t throttled_ns = 0;
      for (int i = 1; i < n; ++i) {
        const auto& a = r.steps(i - 1).cpu();
        const auto& b = r.steps(i).cpu();
        if (!a.available() || !b.available()) continue;
        const bool moved = b.nr_periods() < a.nr_periods();
        v.periods += moved ? 0 : b.nr_periods() - a.nr_periods();
        v.throttled_periods += moved ? 0 : std::max<int64_t>(0, b.nr_throttled() - a.nr_throttled());
        throttled_ns += moved ? 0 : std::max<int64_t>(0, b.throttled_ns() - a.throttled_ns());
      }
      v.throttled_ms_per_step = throttled_ns / 1e6 / (n - 1);
    }
    for (const auto& s : r.steps()) {
      v.step_ms += s.step_ms() / n;
      v.cpu_ms += s.thread_cpu_ns() / 1e6 / n;
      v.wait_ms += s.thread_wait_ns() / 1e6 / n;
      v.comm_wait_ms += s.comm_ms() / n;
    }
    v.off_cpu_ms = std::max(0.0, v.step_ms - v.cpu_ms - v.wait_ms);
    views.push_back(v);
  }
  return views;
}

void PrintNode(const v1::TraceResponse& trace, const std::vector<NodeView>& views, std::ostream& out) {
  out << "==============firedrill node==============\n";
  Row(out, 0, "Run", trace.run());
  for (const NodeView& v : views) {
    out << "\nRank " << v.rank << " (host " << v.host << ")\n";
    if (v.steps == 0) {
      Row(out, 4, "Steps", "none reported yet");
      continue;
    }
    Row(out, 4, "Steps", std::to_string(v.first_step) + ".." + std::to_string(v.last_step) + " (" +
                             std::to_string(v.steps) + ")");
    Row(out, 4, "CPUs it may run on (nproc)", v.cpus > 0 ? std::to_string(v.cpus) : "unknown");
    Row(out, 4, "Compute threads (OMP_NUM_THREADS)",
        v.compute_threads > 0 ? std::to_string(v.compute_threads) : "unknown");
    Row(out, 4, "CPU bandwidth limit (cgroup cpu)", Limit(v));
    out << "    Throttling (cpu.stat, over the steps)\n";
    if (!v.cgroup || v.steps < 2) {
      Row(out, 8, "Throttled periods", "n/a");
    } else {
      Row(out, 8, "Throttled periods", std::to_string(v.throttled_periods) + " of " + std::to_string(v.periods));
      Row(out, 8, "Throttled time", Fmt("%.1f ms per step", v.throttled_ms_per_step));
    }
    out << "    Training thread, per step (mean)\n";
    Row(out, 8, "Step (wall)", Fmt("%.1f ms", v.step_ms));
    Row(out, 8, "On a CPU", Fmt("%.1f ms", v.cpu_ms) + Fmt(" (%.0f%%)", v.step_ms > 0 ? 100 * v.cpu_ms / v.step_ms : 0));
    Row(out, 8, "Runnable, waiting for a CPU", Fmt("%.1f ms", v.wait_ms));
    Row(out, 8, "Off CPU (blocked or sleeping)", Fmt("%.1f ms", v.off_cpu_ms));
    // The transports poll as they wait, so this wait is partly on a CPU.
    Row(out, 8, "Waiting for the all-reduce (exposed)", Fmt("%.1f ms", v.comm_wait_ms));
  }
}

std::string NodeJson(const v1::TraceResponse& trace, const std::vector<NodeView>& views) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const NodeView& v : views) {
    nlohmann::json j = {{"rank", v.rank},
                        {"host", v.host},
                        {"steps", v.steps},
                        {"first_step", v.first_step},
                        {"last_step", v.last_step},
                        {"cpus", v.cpus},
                        {"compute_threads", v.compute_threads},
                        {"cgroup_readable", v.cgroup},
                        {"quota_us", v.quota_us},
                        {"period_us", v.period_us},
                        {"periods", v.periods},
                        {"throttled_periods", v.throttled_periods},
                        {"throttled_ms_per_step", v.throttled_ms_per_step},
                        {"step_ms", v.step_ms},
                        {"on_cpu_ms", v.cpu_ms},
                        {"waiting_for_cpu_ms", v.wait_ms},
                        {"off_cpu_ms", v.off_cpu_ms},
                        {"allreduce_wait_ms", v.comm_wait_ms}};
    if (!v.cgroup) j["cgroup_error"] = v.cgroup_error;
    ranks.push_back(j);
  }
  return nlohmann::json{{"run", trace.run()}, {"ranks", ranks}}.dump();
}

}  // namespace firedrill::cli
