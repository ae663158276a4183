#include "common/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/text.h"

namespace firedrill {

namespace {

const char* const kPalette[] = {"#2563eb", "#c2410c", "#15803d", "#7c3aed",
                                "#b91c1c", "#0e7490", "#a16207", "#be185d"};

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A tick label: few digits, no trailing noise.
std::string TickText(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e6 || a < 1e-3)) {
    std::snprintf(buf, sizeof buf, "%.2g", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.*f", a >= 100 || std::floor(v) == v ? 0 : a >= 10 ? 1 : 2, v);
  }
  return buf;
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int about) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, about);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(t == 0 ? 0 : t);
  return ticks;
}

std::vector<std::pair<double, double>> ThinPoints(const std::vector<std::pair<double, double>>& points,
                                                  size_t max_points) {
  if (points.size() <= max_points || max_points < 2) return points;
  std::vector<std::pair<double, double>> out;
  out.reserve(max_points);
  const double stride = static_cast<double>(points.size() - 1) / static_cast<double>(max_points - 1);
  for (size_t i = 0; i < max_points; ++i)
    out.push_back(points[static_cast<size_t>(std::llround(i * stride))]);
  return out;
}

std::string SvgChart(const ChartSpec& spec) {
  const int W = spec.width, H = spec.height, L = 64, R = 16, T = spec.title.empty() ? 10 : 28, B = 52;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << W << " " << H << "\" width=\"" << W
    << "\" height=\"" << H << "\" font-family=\"system-ui, sans-serif\" font-size=\"11\" role=\"img\">";
  if (!spec.title.empty())
    o << "<text x=\"" << L << "\" y=\"16\" font-size=\"13\" font-weight=\"600\" fill=\"#1d2330\">"
      << EscapeHtml(spec.title) << "</text>";
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& s : spec.series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (!std::isfinite(x0)) {
    o << "<text x=\"" << L << "\" y=\"" << H / 2 << "\" fill=\"#6b7385\">no data</text></svg>";
    return o.str();
  }
  if (spec.reference) y0 = std::min(y0, *spec.reference), y1 = std::max(y1, *spec.reference);
  if (spec.y_from_zero || spec.bars) y0 = std::min(0.0, y0);
  if (y1 == y0) y1 = y0 + (std::fabs(y0) > 0 ? std::fabs(y0) * 0.1 : 1);
  const double pad = (y1 - y0) * 0.05;
  y1 += pad;
  if (!(spec.y_from_zero || spec.bars)) y0 -= pad;
  if (spec.bars) x0 -= 0.5, x1 += 0.5;
  if (x1 == x0) x1 = x0 + 1;
  auto X = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto Y = [&](double y) { return T + (1 - (y - y0) / (y1 - y0)) * (H - T - B); };
  for (double t : NiceTicks(y0, y1, 4)) {
    o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << Num(Y(t)) << "\" y2=\"" << Num(Y(t))
      << "\" stroke=\"#eceef2\"/><text x=\"" << L - 6 << "\" y=\"" << Num(Y(t) + 4)
      << "\" text-anchor=\"end\" fill=\"#6b7385\">" << TickText(t) << "</text>";
  }
  // Bars stand at their own x (pairs, items): one label each.
  std::vector<double> xticks;
  if (spec.bars) {
    for (const auto& s : spec.series)
      for (const auto& p : s.points) xticks.push_back(p.first);
    std::sort(xticks.begin(), xticks.end());
    xticks.erase(std::unique(xticks.begin(), xticks.end()), xticks.end());
  } else {
    xticks = NiceTicks(x0, x1, 6);
  }
  for (double t : xticks)
    o << "<text x=\"" << Num(X(t)) << "\" y=\"" << H - B + 16 << "\" text-anchor=\"middle\" fill=\"#6b7385\">"
      << TickText(t) << "</text>";
  o << "<line x1=\"" << L << "\" x2=\"" << L << "\" y1=\"" << T << "\" y2=\"" << H - B
    << "\" stroke=\"#b8bfcc\"/><line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << H - B << "\" y2=\""
    << H - B << "\" stroke=\"#b8bfcc\"/>";
  if (!spec.x_label.empty())
    o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - B + 30
      << "\" text-anchor=\"middle\" fill=\"#6b7385\">" << EscapeHtml(spec.x_label) << "</text>";
  if (!spec.y_label.empty())
    o << "<text transform=\"translate(12 " << (T + H - B) / 2 << ") rotate(-90)\" text-anchor=\"middle\" "
      << "fill=\"#6b7385\">" << EscapeHtml(spec.y_label) << "</text>";
  const size_t n = spec.series.size();
  int legend_x = L;
  for (size_t i = 0; i < n; ++i) {
    const auto& s = spec.series[i];
    const char* color = kPalette[i % (sizeof kPalette / sizeof *kPalette)];
    if (spec.bars) {
      const double slot = (W - L - R) / (x1 - x0) * 0.8, w = slot / std::max<size_t>(1, n);
      for (const auto& [x, y] : s.points) {
        if (!std::isfinite(y)) continue;
        const double left = X(x) - slot / 2 + w * i, top = std::min(Y(y), Y(0)), h = std::fabs(Y(0) - Y(y));
        o << "<rect x=\"" << Num(left) << "\" y=\"" << Num(top) << "\" width=\"" << Num(w) << "\" height=\""
          << Num(h) << "\" fill=\"" << color << "\"><title>" << EscapeHtml(s.name) << " " << TickText(x)
          << ": " << TickText(y) << "</title></rect>";
      }
    } else {
      o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
      for (const auto& [x, y] : ThinPoints(s.points, 800))
        if (std::isfinite(x) && std::isfinite(y)) o << Num(X(x)) << "," << Num(Y(y)) << " ";
      o << "\"><title>" << EscapeHtml(s.name) << "</title></polyline>";
    }
    // The legend, left to right under the axis label, each entry as wide
    // as its name.
    const int lx = legend_x, ly = H - 6;
    legend_x += 24 + static_cast<int>(s.name.size()) * 7;
    o << "<rect x=\"" << lx << "\" y=\"" << ly - 9 << "\" width=\"10\" height=\"10\" fill=\"" << color
      << "\"/><text x=\"" << lx + 14 << "\" y=\"" << ly << "\" fill=\"#1d2330\">" << EscapeHtml(s.name)
      << "</text>";
  }
  // Over the series, so that bars do not hide it.
  if (spec.reference) {
    o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << Num(Y(*spec.reference)) << "\" y2=\""
      << Num(Y(*spec.reference)) << "\" stroke=\"#6b7385\" stroke-dasharray=\"5 3\"/>";
    if (!spec.reference_label.empty())
      o << "<text x=\"" << W - R - 4 << "\" y=\"" << Num(Y(*spec.reference) - 4)
        << "\" text-anchor=\"end\" fill=\"#6b7385\">" << EscapeHtml(spec.reference_label) << "</text>";
  }
  o << "</svg>";
  return o.str();
}

}  // namespace firedrill
