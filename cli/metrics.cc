#include "cli/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "common/format.h"
#include "common/suggest.h"

namespace firedrill::cli {

namespace {

struct SeriesInfo {
  const char* name;
  const char* title;
  bool per_rank;  // a mean over ranks (else rank 0's: the job's one value)
  bool slowest = false;  // per_rank: the largest over ranks instead of the mean
};

const std::vector<SeriesInfo>& Infos() {
  static const std::vector<SeriesInfo> infos = {
      {"loss", "loss (mean over ranks)", true},
      {"grad_norm", "gradient norm (global L2 of the averaged, unscaled gradients; mean over ranks)", true},
      {"loss_scale", "loss scale (log2 axis)", false},
      {"skipped", "optimiser steps skipped so far (inf/NaN gradients)", false},
      {"lr", "learning rate", false},
      {"throughput", "throughput per rank (mean over ranks)", true},
      {"step_ms", "step time, ms (mean over ranks)", true},
      {"global_batch", "global batch (samples per optimiser step)", false},
      {"samples", "samples consumed so far (the data loaders' position, over every rank)", false},
      {"ckpt_ms", "checkpoint written after the step, ms (0: none; the slowest rank's, which the job waits for)", true,
       true},
  };
  return infos;
}

const SeriesInfo& InfoOf(const std::string& name) {
  for (const auto& i : Infos())
    if (name == i.name) return i;
  return Infos().front();
}

std::string AxisLabel(double y, bool log2) {
  if (!log2) return Sig(y);
  char buf[32];
  std::snprintf(buf, sizeof buf, "2^%.1f", y);
  std::string s = buf;
  if (s.size() > 4 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

// The rows of one rank, or of every rank.
v1::MetricsResponse OnlyRank(const v1::MetricsResponse& m, int rank) {
  if (rank < 0) return m;
  v1::MetricsResponse out = m;
  out.clear_ranks();
  for (const auto& r : m.ranks())
    if (r.rank() == rank) *out.add_ranks() = r;
  return out;
}

// A healthy run carries no settings (the controller says which it left out).
bool Hidden(const v1::MetricsResponse& m, const std::string& series) {
  return std::find(m.withheld().begin(), m.withheld().end(), series) != m.withheld().end();
}

std::vector<std::string> Visible(const v1::MetricsResponse& m, const std::vector<std::string>& series) {
  std::vector<std::string> out;
  for (const auto& s : series)
    if (!Hidden(m, s)) out.push_back(s);
  return out;
}

}  // namespace

const std::vector<std::string>& MetricSeriesNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& i : Infos()) out.push_back(i.name);
    return out;
  }();
  return names;
}

StatusOr<std::vector<std::string>> ParseSeries(const std::string& csv) {
  const std::vector<std::string>& known = MetricSeriesNames();
  if (csv.empty()) return std::vector<std::string>(known.begin(), known.begin() + 6);
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= csv.size()) {
    size_t comma = csv.find(',', start);
    if (comma == std::string::npos) comma = csv.size();
    const std::string name = csv.substr(start, comma - start);
    start = comma + 1;
    if (name.empty()) continue;
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string all;
      for (const auto& k : known) all += (all.empty() ? "" : ", ") + k;
      return InvalidArgument("--series: unknown series '" + name + "'" + DidYouMean(name, known) +
                             "; series: " + all);
    }
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  if (out.empty()) return InvalidArgument("--series: name at least one series (e.g. --series loss,grad_norm)");
  return out;
}

bool CountsTokens(const v1::MetricsResponse& m) {
  for (const auto& r : m.ranks())
    for (const auto& row : r.rows())
      if (row.tokens_per_s() > 0) return true;
  return false;
}

double SeriesValue(const v1::MetricsRow& row, const std::string& series, bool tokens) {
  if (series == "loss") return row.loss();
  if (series == "grad_norm") return row.grad_norm();
  if (series == "loss_scale") return row.loss_scale();
  if (series == "skipped") return static_cast<double>(row.skipped_total());
  if (series == "lr") return row.lr();
  if (series == "throughput") return tokens ? row.tokens_per_s() : row.samples_per_s();
  if (series == "step_ms") return row.step_ms();
  if (series == "global_batch") return static_cast<double>(row.global_batch());
  if (series == "samples") return static_cast<double>(row.consumed_samples());
  if (series == "ckpt_ms") return row.checkpoint_ms();
  return NAN;
}

SeriesPoints JobSeries(const v1::MetricsResponse& m, const std::string& series) {
  const bool tokens = CountsTokens(m);
  const bool per_rank = InfoOf(series).per_rank, slowest = InfoOf(series).slowest;
  // step -> (sum, count, any non-finite); the largest, count 1, where slowest
  std::map<int64_t, std::pair<double, int>> acc;
  std::map<int64_t, bool> bad;
  for (const auto& r : m.ranks()) {
    if (!per_rank && r.rank() != m.ranks(0).rank()) continue;
    for (const auto& row : r.rows()) {
      const double v = SeriesValue(row, series, tokens);
      auto& a = acc[row.step()];
      if (std::isfinite(v) && slowest) {
        a.first = a.second > 0 ? std::max(a.first, v) : v;
        a.second = 1;
      } else if (std::isfinite(v)) {
        a.first += v;
        a.second += 1;
      } else {
        bad[row.step()] = true;
      }
    }
  }
  SeriesPoints p;
  for (const auto& [step, a] : acc) {
    p.steps.push_back(step);
    p.values.push_back(bad.count(step) ? INFINITY : a.first / a.second);
  }
  return p;
}

std::string Plot(const SeriesPoints& p, int width, int height, bool log2) {
  const int n = static_cast<int>(p.values.size());
  if (n == 0) return "  (no steps)\n";
  width = std::max(width, 2);
  height = std::max(height, 2);
  const int cols = std::min(width, n);
  std::vector<double> col(cols, NAN);
  std::vector<bool> bad(cols, false);
  double lo = INFINITY, hi = -INFINITY;
  for (int c = 0; c < cols; ++c) {
    const int a = static_cast<int>(static_cast<int64_t>(c) * n / cols);
    const int b = static_cast<int>(static_cast<int64_t>(c + 1) * n / cols);
    double sum = 0;
    int k = 0;
    for (int i = a; i < b; ++i) {
      const double v = p.values[i];
      if (!std::isfinite(v)) {
        bad[c] = true;
        continue;
      }
      if (log2 && v <= 0) continue;
      sum += log2 ? std::log2(v) : v;
      ++k;
    }
    if (k == 0) continue;
    col[c] = sum / k;
    lo = std::min(lo, col[c]);
    hi = std::max(hi, col[c]);
  }
  std::vector<std::string> grid(height, std::string(cols, ' '));
  const bool any = std::isfinite(lo);
  for (int c = 0; c < cols; ++c) {
    if (std::isfinite(col[c])) {
      const int row = hi > lo ? static_cast<int>(std::lround((hi - col[c]) / (hi - lo) * (height - 1))) : height / 2;
      grid[row][c] = '*';
    }
    if (bad[c]) grid[0][c] = 'x';
  }
  std::vector<std::string> labels(height);
  if (any) {
    labels[0] = AxisLabel(hi, log2);
    labels[height - 1] = AxisLabel(lo, log2);
    if (height > 2 && hi > lo) labels[height / 2] = AxisLabel(hi - (hi - lo) * (height / 2) / (height - 1), log2);
    if (hi == lo) labels[height / 2] = AxisLabel(hi, log2);
  }
  size_t margin = 0;
  for (const auto& l : labels) margin = std::max(margin, l.size());
  std::string out;
  for (int r = 0; r < height; ++r) {
    std::string l = labels[r];
    out += "  " + std::string(margin - l.size(), ' ') + l + " |" + grid[r] + "\n";
  }
  const std::string first = std::to_string(p.steps.front()), last = std::to_string(p.steps.back());
  out += "  " + std::string(margin, ' ') + " +" + std::string(cols, '-') + "\n";
  std::string axis = "step " + first;
  const size_t room = static_cast<size_t>(cols) + 2;
  if (axis.size() + last.size() + 1 < room) axis += std::string(room - axis.size() - last.size(), ' ') + last;
  else axis += " .. " + last;
  out += "  " + std::string(margin, ' ') + axis + "\n";
  return out;
}

void PrintMetrics(const v1::MetricsResponse& full, const std::vector<std::string>& series, int rank,
                  std::ostream& out) {
  const v1::MetricsResponse m = OnlyRank(full, rank);
  int64_t lo = INT64_MAX, hi = -1;
  for (const auto& r : m.ranks())
    for (const auto& row : r.rows()) {
      lo = std::min(lo, row.step());
      hi = std::max(hi, row.step());
    }
  out << "metrics of the " << m.run() << " run";
  if (hi < 0) {
    out << ": no steps in that range\n";
    return;
  }
  out << ": steps " << lo << ".." << hi << ", " << (rank >= 0 ? "rank " + std::to_string(rank) : std::to_string(m.ranks_size()) + " ranks");
  if (m.stride() > 1) out << " (one in every " << m.stride() << " steps: --steps A:B or --max-points for more)";
  out << "\n";
  if (!m.withheld().empty()) {
    out << "(a healthy run shows what it measured, not its settings; left out:";
    for (const auto& w : m.withheld()) out << " " << w;
    out << ")\n";
  }
  const bool tokens = CountsTokens(m);
  for (const auto& name : series) {
    if (Hidden(m, name)) continue;
    const SeriesInfo& info = InfoOf(name);
    const SeriesPoints p = JobSeries(m, name);
    std::string title = info.title;
    if (name == "throughput") title += tokens ? ", real tokens/s" : ", samples/s";
    out << "\n" << name << ": " << title << "\n";
    if (p.values.empty()) {
      out << "  (no steps)\n";
      continue;
    }
    int bad = 0;
    double mn = INFINITY, mx = -INFINITY;
    for (double v : p.values) {
      if (!std::isfinite(v)) {
        ++bad;
        continue;
      }
      mn = std::min(mn, v);
      mx = std::max(mx, v);
    }
    if (name == "loss_scale" && mx == 0 && bad == 0) {
      bool scaling = false;
      for (const auto& r : m.ranks())
        for (const auto& row : r.rows()) scaling = scaling || row.loss_scaling();
      if (!scaling) {
        out << "  0 at every step: loss scaling is off\n";
        continue;
      }
    }
    out << "  first " << Sig(p.values.front()) << " (step " << p.steps.front() << "), last " << Sig(p.values.back())
        << " (step " << p.steps.back() << ")";
    if (std::isfinite(mn)) out << ", min " << Sig(mn) << ", max " << Sig(mx);
    out << "; " << bad << " of " << p.values.size() << " steps not finite (inf/NaN)\n";
    out << Plot(p, 60, 8, name == "loss_scale");
    if (bad > 0) out << "  (x: a step with an inf/NaN value)\n";
    if (info.per_rank && m.ranks_size() > 1) {
      out << "  last step, by rank:";
      for (const auto& r : m.ranks()) {
        if (r.rows().empty()) continue;
        out << "  " << r.rank() << ": " << Sig(SeriesValue(r.rows(r.rows_size() - 1), name, tokens));
      }
      out << "\n";
    }
  }
}

std::string MetricsJson(const v1::MetricsResponse& full, const std::vector<std::string>& asked, int rank) {
  const v1::MetricsResponse m = OnlyRank(full, rank);
  const std::vector<std::string> series = Visible(m, asked);
  const bool tokens = CountsTokens(m);
  nlohmann::json j;
  j["session_id"] = m.session_id();
  j["run"] = m.run();
  j["stride"] = m.stride();
  j["series"] = series;
  j["ranks"] = nlohmann::json::array();
  for (const auto& r : m.ranks()) {
    nlohmann::json jr;
    jr["rank"] = r.rank();
    jr["host"] = r.host();
    std::vector<int64_t> steps;
    for (const auto& row : r.rows()) steps.push_back(row.step());
    jr["steps"] = steps;
    for (const auto& name : series) {
      nlohmann::json values = nlohmann::json::array();
      for (const auto& row : r.rows()) {
        const double v = SeriesValue(row, name, tokens);
        if (std::isfinite(v)) values.push_back(v);
        else values.push_back(nullptr);
      }
      jr[name] = values;
    }
    j["ranks"].push_back(jr);
  }
  return j.dump();
}

std::string MetricsCsv(const v1::MetricsResponse& full, const std::vector<std::string>& asked, int rank) {
  const v1::MetricsResponse m = OnlyRank(full, rank);
  const std::vector<std::string> series = Visible(m, asked);
  const bool tokens = CountsTokens(m);
  std::string out = "step,rank";
  for (const auto& name : series) out += "," + name;
  out += "\n";
  // Step order across ranks, so a plot of the file needs no sort.
  struct Line {
    int64_t step;
    int rank;
    const v1::MetricsRow* row;
  };
  std::vector<Line> rows;
  for (const auto& r : m.ranks())
    for (const auto& row : r.rows()) rows.push_back({row.step(), r.rank(), &row});
  std::stable_sort(rows.begin(), rows.end(), [](const Line& a, const Line& b) { return a.step < b.step; });
  char buf[48];
  for (const Line& l : rows) {
    out += std::to_string(l.step) + "," + std::to_string(l.rank);
    for (const auto& name : series) {
      std::snprintf(buf, sizeof buf, ",%.9g", SeriesValue(*l.row, name, tokens));
      out += buf;
    }
    out += "\n";
  }
  return out;
}

}  // namespace firedrill::cli
