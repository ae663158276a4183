// The Prometheus text exposition format (version 0.0.4), written by hand:
// metric families, each with its HELP and TYPE lines, then its samples.
// The naming rules a scrape is held to (one `firedrill_` prefix, base
// units, `_total` on counters, `_info` for metadata) are checked as the
// families are declared, so a bad name fails the unit tests, not a scrape.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace firedrill::web {

enum class MetricType { kGauge, kCounter };

using Labels = std::vector<std::pair<std::string, std::string>>;

// A label value or HELP text as the format writes it: backslash, newline
// and (in label values) the double quote escaped.
std::string EscapeLabelValue(const std::string& v);
std::string EscapeHelp(const std::string& v);
// A sample value: the shortest decimal that reads back as `v`; NaN, +Inf, -Inf.
std::string FormatSampleValue(double v);
// Whether `name` is a valid metric (or, with `label`, label) name.
bool ValidMetricName(const std::string& name, bool label = false);

class Exposition {
 public:
  // Declares a family (once; a second call with the same name and type adds
  // to it). Throws std::logic_error on a name that breaks the conventions:
  // no firedrill_ prefix, invalid characters, a counter without _total, a
  // gauge ending in _total.
  void Family(const std::string& name, MetricType type, const std::string& help);
  // A sample of family `name` (declared before). Label names are checked;
  // the same label set twice in one family throws.
  void Sample(const std::string& name, const Labels& labels, double value);
  // Declares and samples in one call.
  void Add(const std::string& name, MetricType type, const std::string& help, const Labels& labels,
           double value) {
    Family(name, type, help);
    Sample(name, labels, value);
  }
  // Every family in declaration order, HELP, TYPE, samples.
  std::string Text() const;
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  struct Fam {
    std::string name, help;
    MetricType type = MetricType::kGauge;
    std::vector<std::pair<std::string, double>> samples;  // rendered labels, value
  };
  std::vector<Fam> fams_;
  std::map<std::string, size_t> index_;
};

}  // namespace firedrill::web
