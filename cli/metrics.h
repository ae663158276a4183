// `firedrill metrics`: the training signals of a run as curves, the way a
// team reads a TensorBoard or W&B panel: loss, gradient norm, loss scale,
// skipped optimiser steps, learning rate and throughput, step by step, for
// every rank. Terminal plots (one per series), `--json` and `--csv`.
// Measurements only: every series is drawn the same way for every drill,
// and nothing here says what a curve means.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "firedrill/v1/controller.pb.h"

namespace firedrill::cli {

// The series `--series` accepts, in the order they are drawn by default.
const std::vector<std::string>& MetricSeriesNames();
// "loss,lr" -> {"loss", "lr"}; empty -> every series. A name that is none
// is InvalidArgument with a "did you mean".
StatusOr<std::vector<std::string>> ParseSeries(const std::string& csv);
// One row's value of a series: "skipped" is the running count of skipped
// optimiser steps, "throughput" samples/s (tokens/s for a token model).
double SeriesValue(const v1::MetricsRow& row, const std::string& series, bool tokens);
// Whether the job counts tokens (any row has tokens/s).
bool CountsTokens(const v1::MetricsResponse& m);

// The job's value of a series at each step: the mean over ranks for
// per-rank signals (loss, grad norm, throughput, step time), rank 0's for
// job-wide ones (loss scale, skipped, lr, global batch). Steps in order;
// a non-finite value on any rank makes that step's value non-finite.
struct SeriesPoints {
  std::vector<int64_t> steps;
  std::vector<double> values;
};
SeriesPoints JobSeries(const v1::MetricsResponse& m, const std::string& series);

// An ASCII chart of `p` in `width` columns and `height` rows: each column is
// the mean of its steps' finite values; a column holding a non-finite value
// is marked 'x' on the top row. `log2` draws the y axis in powers of two
// (for the loss scale). Lines end in '\n'.
std::string Plot(const SeriesPoints& p, int width, int height, bool log2);

void PrintMetrics(const v1::MetricsResponse& m, const std::vector<std::string>& series, int rank,
                  std::ostream& out);
// One object: {"session_id", "run", "stride", "series": [...], "ranks": [{"rank", "host",
// "steps": [...], "<series>": [...]}]}; non-finite values are null.
std::string MetricsJson(const v1::MetricsResponse& m, const std::vector<std::string>& series, int rank);
// Long form, one line per rank and step: step,rank,<series...>; non-finite
// values as inf/-inf/nan.
std::string MetricsCsv(const v1::MetricsResponse& m, const std::vector<std::string>& series, int rank);

}  // namespace firedrill::cli
