#include "cli/probe.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

#include "cli/output.h"
#include "collectives/collective.h"
#include "common/format.h"
#include "common/stats.h"

namespace firedrill::cli {

StatusOr<int64_t> ParseSize(const std::string& text) {
  if (text.empty()) return InvalidArgument("empty size; use e.g. 8, 64K, 16M, 1G");
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == 0 || pos + 1 < text.size())
    return InvalidArgument("bad size '" + text + "'; use e.g. 8, 64K, 16M, 1G");
  int64_t mult = 1;
  if (pos < text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text[pos]))) {
      case 'K': mult = int64_t{1} << 10; break;
      case 'M': mult = int64_t{1} << 20; break;
      case 'G': mult = int64_t{1} << 30; break;
      default: return InvalidArgument("bad size suffix in '" + text + "'; use K, M or G");
    }
  }
  // Checked before multiplying: the controller caps sizes at 256 MiB anyway.
  if (pos > 12 || std::stoll(text.substr(0, pos)) > (int64_t{1} << 40) / mult)
    return InvalidArgument("size '" + text + "' is too large");
  return std::stoll(text.substr(0, pos)) * mult;
}

namespace {

std::string Time(double us) {
  char b[32];
  std::snprintf(b, sizeof b, us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
  return b;
}

const char* Collective(const std::string& op) {
  const collectives::Collective* c = collectives::Find(op);
  return c && *c->nccl_test ? c->nccl_test : "sendrecv";
}

void PrintRanks(const v1::RunProbeResponse& r, std::ostream& out) {
  out << "#\n# Using devices\n";
  char line[160];
  for (int i = 0; i < r.hosts_size(); ++i) {
    std::snprintf(line, sizeof line, "#  Rank %2d Group  0 on %10s device cpu (%s over TCP)\n", i,
                  r.hosts(i).c_str(), r.transport().c_str());
    out << line;
  }
  out << "#\n";
}

void PrintMatrix(const v1::RunProbeResponse& r, std::ostream& out) {
  const auto& s = r.spec();
  out << "# firedrill probe p2p: unidirectional bandwidth between each ordered pair of ranks, alone\n"
      << "# message " << s.max_bytes() << " B, warmup iters: " << s.warmup_iters() << " iters: " << s.iters()
      << ", after step " << r.step() << "\n";
  PrintRanks(r, out);
  const int n = r.world_size();
  std::map<std::pair<int, int>, const v1::ProbePair*> at;
  int64_t wrong = 0;
  for (const auto& p : r.pairs()) {
    at[{p.src(), p.dst()}] = &p;
    wrong += p.wrong();
  }
  out << "# Unidirectional P2P=Enabled Bandwidth Matrix (GB/s), row = sender, column = receiver\n";
  char cell[32];
  out << "   D\\D";
  for (int d = 0; d < n; ++d) {
    std::snprintf(cell, sizeof cell, " %7d", d);
    out << cell;
  }
  out << "\n";
  for (int src = 0; src < n; ++src) {
    std::snprintf(cell, sizeof cell, "%6d", src);
    out << cell;
    for (int dst = 0; dst < n; ++dst) {
      auto it = at.find({src, dst});
      if (src == dst || it == at.end()) std::snprintf(cell, sizeof cell, " %7s", "-");
      else std::snprintf(cell, sizeof cell, " %7.2f", it->second->bw_gbps());
      out << cell;
    }
    out << "\n";
  }
  const P2pAnalysis a = AnalyzeP2p(r);
  char line[160];
  std::snprintf(line, sizeof line, "# Out of bounds values : %lld %s\n", static_cast<long long>(wrong),
                wrong == 0 ? "OK" : "FAILED");
  out << line;
  if (a.slow_src >= 0) {
    std::snprintf(line, sizeof line,
                  "# Pair bandwidth       : median %.3f, upper quartile %.3f GB/s; slowest %d -> %d at %.3f GB/s\n",
                  a.median_gbps, a.upper_quartile_gbps, a.slow_src, a.slow_dst, a.slow_gbps);
    out << line;
  }
  out << "#\n";
}

}  // namespace

// Each parameter tensor's hash on every rank, shortened to 8 hex digits
// (as `git log --oneline` shortens commits), and how many differ.
void PrintChecksums(const v1::RunProbeResponse& r, std::ostream& out) {
  out << "# firedrill probe checksum: SHA-256 of every parameter tensor (fp32 values) on each of the job's "
      << r.world_size() << " ranks, after step " << r.step() << "\n";
  PrintRanks(r, out);
  std::vector<std::string> header = {"TENSOR", "NUMEL"};
  for (int i = 0; i < r.world_size(); ++i) header.push_back("RANK " + std::to_string(i));
  header.push_back("DISTINCT");
  Table t(header);
  int same = 0;
  for (const auto& p : r.checksums()) {
    std::vector<std::string> row = {p.name(), std::to_string(p.numel())};
    for (const auto& h : p.sha256()) row.push_back(h.empty() ? "-" : h.substr(0, 8));
    row.push_back(std::to_string(p.distinct()));
    t.Add(std::move(row));
    same += p.distinct() == 1 ? 1 : 0;
  }
  t.Print(out);
  bool sharded = false;  // a model-parallel job: rows per shard, hashes of its replicas only
  for (const auto& p : r.checksums())
    for (const auto& h : p.sha256()) sharded |= h.empty();
  out << "# " << same << " of " << r.checksums_size() << " tensors hash the same on every rank"
      << (sharded ? " that holds them (a shard's data-parallel replicas; `firedrill mesh`)" : "") << "\n";
}

namespace {

void PrintActivations(const v1::RunProbeResponse& r, std::ostream& out) {
  out << "# firedrill probe activations: the model's forward pass again on each of the job's "
      << r.world_size() << " ranks' last batch (step " << r.step()
      << "), without gradients; each named point as stored, "
      << "magnitudes over every rank\n";
  PrintRanks(r, out);
  out << "# largest finite magnitude: float16 65504, bfloat16 and float32 3.4e+38; smallest normal: float16 "
         "6.1e-05 (subnormal down to 6.0e-08), bfloat16 and float32 1.2e-38\n";
  Table t({"POINT", "DTYPE", "NUMEL", "ABS MIN", "ABS MAX", "INF", "NAN", "RANKS WITH INF/NAN"});
  for (const auto& a : r.activations()) {
    // No finite element at all: there is no magnitude to show (not 0).
    const bool none = a.inf() + a.nan() >= a.numel();
    auto sci = [none](double v) {
      if (none) return std::string("-");
      char b[32];
      std::snprintf(b, sizeof b, "%.2e", v);
      return std::string(b);
    };
    t.Add({a.name(), a.dtype(), std::to_string(a.numel()), sci(a.abs_min()), sci(a.abs_max()),
           std::to_string(a.inf()), std::to_string(a.nan()), std::to_string(a.ranks_nonfinite())});
  }
  t.Print(out);
  out << "# ABS MIN: the smallest non-zero finite magnitude; ABS MAX: the largest finite one (-: no element "
         "is "
         "finite)\n";
}

// The two runs' checkpoints of the same step, part by part.
void PrintResume(const v1::RunProbeResponse& r, std::ostream& out) {
  const v1::ResumeProbe& p = r.resume();
  const int64_t k = p.to_step() - p.saved_at();
  out << "# firedrill probe resume: from " << p.from_dir() << ", the job as deployed (its config) on "
      << r.world_size() << " ranks: " << (p.to_step() - r.step()) << " steps straight to step " << p.to_step()
      << ", against the same steps with a checkpoint at step " << p.saved_at() << " and a resume from it for the last "
      << k << " (checkpoint.restore: " << p.restore() << "); " << Num(p.seconds(), 1) << " s\n";
  if (!p.resume_log().empty()) out << "# the resume logged: " << p.resume_log() << "\n";
  std::string differ;
  auto table = [&](const google::protobuf::RepeatedPtrField<v1::ResumeProbePart>& parts, const char* left,
                   const char* right) {
    Table t({"PART", "ENTRIES", "DIFFER", "RANKS", std::string(left) + " vs " + right});
    differ.clear();
    for (const auto& part : parts) {
      std::string ranks;
      for (int rank : part.ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(rank);
      const std::string what = PartDiffText(part.differ(), part.missing(), part.max_abs_diff(), part.straight_value(),
                                            part.resumed_value());
      t.Add({part.part(), std::to_string(part.entries()), std::to_string(part.differ()), ranks.empty() ? "-" : ranks, what});
      if (part.differ() > 0) differ += (differ.empty() ? "" : ", ") + part.part();
    }
    t.Print(out);
  };
  if (p.at_resume_size() > 0) {
    out << "# step " << p.saved_at() << ": the checkpoint against the state the resumed run held before its first step\n";
    table(p.at_resume(), "SAVED", "LOADED");
    out << (differ.empty() ? "# the resume put back every part as saved\n" : "# the resume did not put back: " + differ + "\n");
    out << "# step " << p.to_step() << ": " << k << " steps later, the straight run against the resumed one\n";
  }
  table(p.parts(), "STRAIGHT", "RESUMED");
  if (p.same())
    out << "# at step " << p.to_step() << " the resumed run holds bitwise the same state as the straight one, every part on every rank\n";
  else
    out << "# at step " << p.to_step() << " the resumed run differs from the straight one in: " << differ << "\n";
}

}  // namespace

static void PrintScaling(const v1::RunProbeResponse& r, std::ostream& out) {
  out << "# firedrill probe scaling: the job's model trained data-parallel on its first 1, 2, 4, ... of "
      << r.world_size() << " ranks in turn (the others idle), after step " << r.step()
      << "; each rank's last "
      << "batch, forward and backward, the gradients all-reduced in one buffer, no optimiser step; "
      << r.spec().iters() << " timed steps after " << r.spec().warmup_iters() << "\n";
  PrintRanks(r, out);
  Table t({"RANKS", "STEP_MS", "COMM_MS", "SAMPLES/S", "PER RANK", "EFFICIENCY", "MFU%"});
  for (const auto& s : r.scaling())
    t.Add({std::to_string(s.ranks()), Num(s.step_ms(), 1), Num(s.comm_ms(), 1), Num(s.samples_per_s()),
           Num(s.ranks() > 0 ? s.samples_per_s() / s.ranks() : 0), Num(100 * s.efficiency(), 0) + "%",
           s.mfu() > 0 ? Num(100 * s.mfu(), 1) : "-"});
  t.Print(out);
  out << "# STEP_MS: the slowest taking part (they all-reduce every step); EFFICIENCY: samples/s over RANKS "
         "x "
         "one rank's; MFU%: model FLOPs per second over the rank's measured matmul peak (a slowed host's "
         "quota "
         "is lifted while a probe runs)\n";
}

void PrintProbe(const v1::RunProbeResponse& r, std::ostream& out) {
  if (r.spec().op() == "scaling") {
    PrintScaling(r, out);
    return;
  }
  if (r.spec().op() == "resume") {
    PrintResume(r, out);
    return;
  }
  if (r.spec().op() == "p2p") {
    PrintMatrix(r, out);
    return;
  }
  if (r.spec().op() == "checksum") {
    PrintChecksums(r, out);
    return;
  }
  if (r.spec().op() == "activations") {
    PrintActivations(r, out);
    return;
  }
  const auto& s = r.spec();
  const collectives::Collective* c = collectives::Find(s.op());
  const bool in_place = c && r.world_size() > 0 && c->buffers(s.max_bytes(), r.world_size()).out == 0;
  char line[256];
  std::snprintf(line, sizeof line,
                "# firedrill probe: %s over the job's %d ranks, after step %lld\n"
                "# nThread 1 nGpus 1 minBytes %lld maxBytes %lld step: %d(factor) warmup iters: %d iters: %d "
                "agg iters: 1 validation: 1 graph: 0\n",
                Collective(s.op()), r.world_size(), static_cast<long long>(r.step()),
                static_cast<long long>(s.min_bytes()), static_cast<long long>(s.max_bytes()), s.factor(),
                s.warmup_iters(), s.iters());
  out << line;
  PrintRanks(r, out);
  // Gloo's all-reduce works in place; its all-gather and firedrill's
  // reduce-scatter write a separate buffer: one column group, named for
  // what it is.
  std::snprintf(line, sizeof line, "# %61s%s\n", "", in_place ? "in-place" : "out-of-place");
  out << line;
  out << "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
      << "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       \n";
  int64_t wrong = 0;
  for (const auto& row : r.rows()) {
    std::snprintf(line, sizeof line, "%12lld  %12lld  %8s  %6s  %6d  %s  %6.2f  %6.2f  %5lld\n",
                  static_cast<long long>(row.bytes()), static_cast<long long>(row.count()), row.type().c_str(),
                  row.redop().c_str(), row.root(), Time(row.time_us()).c_str(), row.algbw_gbps(),
                  row.busbw_gbps(), static_cast<long long>(row.wrong()));
    out << line;
    wrong += row.wrong();
  }
  std::snprintf(line, sizeof line, "# Out of bounds values : %lld %s\n# Avg bus bandwidth    : %g \n#\n",
                static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED", r.avg_busbw_gbps());
  out << line;
}

P2pAnalysis AnalyzeP2p(const v1::RunProbeResponse& r) {
  P2pAnalysis a;
  std::vector<double> bw;
  for (const auto& p : r.pairs()) {
    if (p.bw_gbps() <= 0) continue;
    bw.push_back(p.bw_gbps());
    if (a.slow_src < 0 || p.bw_gbps() < a.slow_gbps) {
      a.slow_src = p.src();
      a.slow_dst = p.dst();
      a.slow_gbps = p.bw_gbps();
    }
  }
  if (bw.empty()) return a;
  a.median_gbps = Median(bw);
  std::sort(bw.begin(), bw.end());
  a.upper_quartile_gbps = bw[std::min(bw.size() - 1, bw.size() * 3 / 4)];
  for (int rank = 0; rank < r.world_size(); ++rank) {
    int pairs = 0, slow = 0;
    for (const auto& p : r.pairs()) {
      if (p.src() != rank && p.dst() != rank) continue;
      ++pairs;
      slow += p.bw_gbps() > 0 && p.bw_gbps() < a.upper_quartile_gbps / 2;
    }
    if (pairs > 0 && slow == pairs) a.slow_ranks.push_back(rank);
  }
  return a;
}

}  // namespace firedrill::cli
