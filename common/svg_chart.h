// Charts as self-contained SVG elements, for the HTML reports (a session's
// score report, a team drill's postmortem): no script, no library, nothing
// fetched, so a report opens anywhere and prints as it looks.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace firedrill {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct ChartSpec {
  std::string title;    // above the plot ("" for none)
  std::string x_label;  // under the x axis
  std::string y_label;  // beside the y axis
  std::vector<ChartSeries> series;
  std::optional<double> reference;  // a dashed horizontal line (a baseline, a floor)
  std::string reference_label;
  bool y_from_zero = false;
  bool bars = false;  // each series' points as bars at their x instead of a line
  int width = 720, height = 260;
};

// An <svg> element (inline: it needs no namespace declaration in HTML5 but
// carries one, so it also opens alone). Text is escaped.
std::string SvgChart(const ChartSpec& spec);

// At most `max_points` of `points`, evenly spaced, the last one kept.
std::vector<std::pair<double, double>> ThinPoints(const std::vector<std::pair<double, double>>& points,
                                                  size_t max_points);

// "Nice" axis ticks (1, 2, 2.5, 5 x 10^k steps) covering [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int about);

}  // namespace firedrill
