#include "cli/trace.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>

namespace firedrill::cli {

namespace {

using Json = nlohmann::json;

constexpr int kStepTid = 0, kComputeTid = 1, kCommTid = 2;

Json Meta(const char* what, int pid, int tid, const std::string& name) {
  Json e = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

Json Slice(const std::string& name, int pid, int tid, double ts_us, double dur_us, Json args) {
  return {{"name", name}, {"ph", "X"}, {"pid", pid}, {"tid", tid}, {"ts", ts_us}, {"dur", std::max(dur_us, 0.0)},
          {"args", std::move(args)}};
}

bool ParseInt(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && *out >= 0;
}

}  // namespace

Status ParseStepRange(const std::string& text, v1::GetTraceRequest* req) {
  if (text.empty()) return Status::Ok();
  const auto colon = text.find(':');
  const std::string bad = "--steps '" + text + "': expected FROM:TO (TO exclusive) or FROM:, e.g. 100:120";
  if (colon == std::string::npos) return InvalidArgument(bad);
  int64_t from = 0, to = 0;
  if (!ParseInt(text.substr(0, colon), &from)) return InvalidArgument(bad);
  const std::string rest = text.substr(colon + 1);
  if (!rest.empty() && (!ParseInt(rest, &to) || to <= from)) return InvalidArgument(bad);
  req->set_from_step(from);
  req->set_to_step(to);
  if (from == 0 && to == 0) req->set_to_step(std::numeric_limits<int64_t>::max());
  return Status::Ok();
}

std::string ChromeTraceJson(const v1::TraceResponse& trace) {
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const auto& r : trace.ranks())
    for (const auto& s : r.steps()) t0 = std::min(t0, s.start_unix_ns());
  if (t0 == std::numeric_limits<int64_t>::max()) t0 = 0;

  Json events = Json::array();
  for (const auto& r : trace.ranks()) {
    const int pid = r.rank();
    // A model-parallel rank says where it sits; pipeline stages sort in
    // stage order, so a schedule reads top to bottom as in the papers.
    const v1::MeshPlace* place = nullptr;
    for (const auto& s : r.steps())
      if (s.has_mesh()) place = &s.mesh();
    std::string name = "rank " + std::to_string(r.rank()) + " (" + r.host() + ")";
    int sort_index = r.rank();
    if (place != nullptr) {
      name += (place->pp_size() > 1 ? " stage " + std::to_string(place->pp()) + "," : std::string()) +
              " tp " + std::to_string(place->tp()) + " dp " + std::to_string(place->dp());
      sort_index = place->pp() * trace.ranks_size() + r.rank();
    }
    const bool pipeline = place != nullptr && place->pp_size() > 1;
    events.push_back(Meta("process_name", pid, -1, name));
    // Trace Event Format: process_sort_index takes an integer sort_index.
    events.push_back(
        {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"args", {{"sort_index", sort_index}}}});
    events.push_back(Meta("thread_name", pid, kStepTid, "step"));
    events.push_back(Meta("thread_name", pid, kComputeTid, "compute (training thread)"));
    events.push_back(Meta("thread_name", pid, kCommTid, "comm (gradient all-reduce)"));
    for (const auto& s : r.steps()) {
      const double step_us = static_cast<double>(s.start_unix_ns() - t0) / 1000.0;
      Json args = {{"step", s.step()},
                   {"loss", s.loss()},
                   {"samples_per_s", s.samples_per_s()},
                   {"exposed_comm_ms", s.comm_ms()},
                   {"collective_seq", s.collective_seq()}};
      if (s.tokens_per_s() > 0) {
        args["tokens_per_s"] = s.tokens_per_s();
        args["padding_fraction"] = s.padding_fraction();
      }
      if (s.has_mesh()) {
        args["tp_comm_ms"] = s.tp_comm_ms();
        if (s.mesh().pp_size() > 1) {
          args["pp_wait_ms"] = s.pp_wait_ms();
          args["pp_bubble_fraction"] = s.pp_bubble_fraction();
        }
      }
      if (s.loss_scaling() || s.loss_scale() > 0) {
        args["loss_scale"] = s.loss_scale();
        args["skipped"] = s.skipped();
      }
      events.push_back(Slice("step " + std::to_string(s.step()), pid, kStepTid, step_us, s.step_ms() * 1000.0, args));
      for (const auto& sp : s.spans()) {
        const double ts = step_us + sp.start_ms() * 1000.0, dur = sp.dur_ms() * 1000.0;
        Json a = {{"step", s.step()}};
        if (sp.name() == "allreduce") {
          a["seq"] = sp.seq();
          a["bytes"] = sp.bytes();
          a["bucket"] = sp.bucket();
          events.push_back(Slice("allreduce bucket " + std::to_string(sp.bucket()) + " (seq " +
                                     std::to_string(sp.seq()) + ")",
                                 pid, kCommTid, ts, dur, a));
        } else {
          if (sp.micro() >= 0) a["micro_batch"] = sp.micro();
          // A pipeline's slices name their micro-batch: "F3", "B3".
          const bool fb = pipeline && sp.micro() >= 0 && (sp.name() == "forward" || sp.name() == "backward");
          events.push_back(Slice(
              fb ? std::string(sp.name() == "forward" ? "F" : "B") + std::to_string(sp.micro()) : sp.name(),
              pid, kComputeTid, ts, dur, a));
        }
      }
    }
  }
  Json out = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  out["otherData"] = {{"session", trace.session_id()}, {"run", trace.run()}, {"producer", "firedrill trace"}};
  return out.dump();
}

}  // namespace firedrill::cli
