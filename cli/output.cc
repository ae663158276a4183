#include "cli/output.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <iterator>
#include <map>
#include <utility>

#include "scenario/job_keys.h"

namespace firedrill::cli {

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width;
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  }
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

namespace {
std::string Json(const google::protobuf::Message& msg, bool whitespace) {
  google::protobuf::util::JsonPrintOptions opt;
  opt.add_whitespace = whitespace;
  opt.always_print_primitive_fields = true;
  opt.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(msg, &out, opt);
  return out;
}
}  // namespace

std::string ToJson(const google::protobuf::Message& msg) { return Json(msg, true); }
std::string ToJsonLine(const google::protobuf::Message& msg) { return Json(msg, false); }

void PrintScenarios(const v1::ListScenariosResponse& r, std::ostream& out) {
  Table t({"ID", "TITLE", "BAND", "RANKS"});
  for (const auto& s : r.scenarios()) t.Add({s.id(), s.title(), s.band(), std::to_string(s.world_size())});
  t.Print(out);
}

void PrintScenarioDetail(const v1::ScenarioDetail& d, std::ostream& out) {
  out << d.id() << ": " << d.title() << " (" << d.band() << ", " << d.world_size() << " ranks)\n\n"
      << d.briefing() << "\n"
      << "time: points for speed run out " << d.time_budget_s() << " s after the fault shows; the session ends "
      << d.time_limit_s() << " s after the job starts\n"
      << "hints: " << d.hints() << " (" << d.hint_cost() << " points each); each revision of the diagnosis after the "
      << "first costs " << d.revision_cost() << "; each collateral action (replacing a healthy host, restarting from "
      << "scratch, deleting checkpoints) costs " << d.collateral_cost() << "\n";
  std::string may;
  for (const auto& k : d.may_change()) may += (may.empty() ? "" : ", ") + k;
  out << "a fix may change: operational settings (loader, buckets, sampler, timeouts, interfaces, checkpoint cadence, "
         "threads) and hosts"
      << (may.empty() ? "" : "; of the workload, only " + may) << "\n";
  const auto& t = d.tools();
  std::string tools = "status, top, config";
  if (!t.has_trace() || t.trace()) tools += ", trace";
  if (!t.has_logs() || t.logs()) tools += ", logs";
  if (!t.has_node() || t.node()) tools += ", node";
  if (!t.has_metrics() || t.metrics()) tools += ", metrics";
  if (!t.has_checkpoints() || t.checkpoints()) tools += ", ckpt";
  if (!t.has_flight_recorder() || t.flight_recorder()) tools += ", fr";
  if (!t.has_probes() || t.probes()) tools += ", probe";
  if (t.slow_rank_flag()) tools += ", the slow-rank flag (SLOW in status)";
  out << "tools: " << tools << "\n";
}

void PrintSessions(const v1::ListSessionsResponse& r, std::ostream& out) {
  Table t({"SESSION", "SCENARIO", "STATE", "SEED", "SCORE"});
  for (const auto& s : r.sessions()) {
    const std::string score = s.state() == "scored" || s.state() == "ended"
                                  ? std::to_string(s.total_score()) + "/" + std::to_string(s.max_score())
                                  : "-";
    t.Add({s.session_id(), s.scenario_id(), s.state(), std::to_string(s.seed()), score});
  }
  t.Print(out);
}

void PrintStatus(const v1::SessionStatus& st, std::ostream& out) {
  const auto& s = st.session();
  out << "session " << s.session_id() << "  " << s.scenario_id() << "  state " << s.state();
  if (st.elapsed_s() > 0) out << "  elapsed " << Num(st.elapsed_s()) << " s";
  if (st.time_limit_s() > 0 && s.state() == "running")
    out << " (ends by itself at " << Num(st.time_limit_s()) << " s)";
  out << "\n";
  if (!s.end_reason().empty()) out << s.state() << ": " << s.end_reason() << "\n";
  const auto& run = st.run();
  if (!run.kind().empty()) {
    out << run.kind() << " run: " << run.state() << ", step " << run.steps_done()
        << (run.steps_total() > 0 ? "/" + std::to_string(run.steps_total()) : "")
        << ", " << Num(run.throughput_samples_per_s()) << " samples/s (last window";
    if (run.clock_samples_per_s() > 0) out << "; " << Num(run.clock_samples_per_s()) << " by the clock";
    out << ")";
    const auto& base = st.baseline();
    if (base.throughput_samples_per_s() > 0) {
      out << ", healthy baseline " << Num(base.throughput_samples_per_s()) << " samples/s ("
          << Num(run.throughput_samples_per_s() / base.throughput_samples_per_s(), 2) << "x";
      if (run.clock_samples_per_s() > 0 && base.clock_samples_per_s() > 0)
        out << "; " << Num(run.clock_samples_per_s() / base.clock_samples_per_s(), 2) << "x by the clock";
      out << ")";
    }
    out << ", global batch " << st.global_batch() << "\n";
  }
  const auto& b = st.baseline();
  if (b.throughput_samples_per_s() > 0) {
    out << "healthy baseline (measured before the drill): step " << Num(b.median_step_ms(), 1) << " ms; data "
        << Num(b.data_ms(), 1) << ", fwd+bwd " << Num(b.compute_ms(), 1) << ", comm " << Num(b.comm_ms(), 1)
        << " ms per rank";
    if (b.tokens_per_s() > 0) out << "; " << Num(b.tokens_per_s()) << " tokens/s";
    if (b.padding_fraction() > 0) out << "; padding " << Num(100 * b.padding_fraction(), 1) << "%";
    out << "\n";
  }
  // The optimiser's view of the job, the same line in every drill: what a
  // training log prints beside the loss, the ranks' reported settings with
  // the deployed config's batch split. Not while a healthy run (the
  // baseline) runs: the controller withholds its settings, which beside the
  // deployed config would show what a fault changed.
  const v1::RankStatus* latest = nullptr;
  for (const auto& r : st.ranks())
    if (r.window_steps() > 0 && (latest == nullptr || r.step() > latest->step())) latest = &r;
  if (latest != nullptr && latest->global_batch() > 0) {
    const auto& job = st.job();
    const int accum = std::max(1, job.grad_accum_steps());
    out << "training: global batch " << latest->global_batch() << " (" << job.data().batch_size()
        << " per rank x " << accum << " micro-batch" << (accum > 1 ? "es" : "") << " x ";
    if (latest->has_mesh()) {
      const auto& m = latest->mesh();
      out << m.dp_size() << " data-parallel replica" << (m.dp_size() > 1 ? "s" : "") << " of tp "
          << m.tp_size() << " x pp " << m.pp_size() << " ranks, order " << m.order();
      if (m.pp_size() > 1) out << ", " << m.schedule() << " schedule";
    } else {
      out << job.world_size() << " ranks";
    }
    out << "), lr " << Sig(latest->lr()) << ", ";
    if (latest->loss_scaling() || latest->loss_scale() > 0) {
      out << "loss scale " << ScaleText(latest->loss_scale()) << " (" << latest->skipped_total() << " of "
          << latest->step() + 1 << " optimiser steps skipped so far)";
    } else {
      out << "no loss scaling (" << latest->skipped_total() << " optimiser steps skipped)";
    }
    out << "\n";
  }
  // What DDP's communication logging would say: the gradient all-reduces a
  // step makes and what they carry, beside the size of the gradients.
  if (latest != nullptr && latest->allreduces_per_step() > 0) {
    out << "gradient all-reduce: " << Num(latest->allreduces_per_step(), 1) << " per optimiser step, carrying "
        << Bytes(static_cast<int64_t>(latest->allreduce_bytes_per_step())) << " per step";
    if (latest->mem_grads_bytes() > 0) out << " (the gradients are " << Bytes(latest->mem_grads_bytes()) << ")";
    out << "\n";
  }
  out << "\n";
  // Columns for telemetry that not every job has: shown only when some rank
  // reports it, so a plain job's table stays as narrow as before.
  bool tokens = false, padding = false, mem = false, mesh = false, pipeline = false;
  for (const auto& r : st.ranks()) {
    if (r.window_steps() == 0) continue;
    tokens |= r.tokens_per_s() > 0;
    padding |= r.padding_fraction() > 0;
    mem |= r.mem_peak_bytes() > 0;
    mesh |= r.has_mesh();
  }
  // Every model-parallel job gets the same columns, a pipeline or not: a
  // column only pipelines had would say which layout a drill is about
  // before its numbers do.
  pipeline = mesh;
  std::vector<std::string> header = {"RANK", "HOST"};
  if (mesh) header.push_back("TP/DP/PP");
  header.insert(header.end(), {"STATE", "STEP", "STEP_MS", "SAMPLES/S"});
  if (tokens) header.push_back("TOKENS/S");
  if (padding) header.push_back("PAD%");
  header.insert(header.end(), {"MFU%", "DATA", "FWD", "BWD", "COMM"});
  if (mesh) header.push_back("TP_COMM");
  if (pipeline) header.insert(header.end(), {"PP_WAIT", "BUBBLE%"});
  header.insert(header.end(), {"OPT", "CKPT", "LOSS"});
  if (mem) header.push_back("MEM_PEAK");
  header.insert(header.end(), {"BUSY/MED", ""});
  Table t(header);
  for (const auto& r : st.ranks()) {
    std::string state = r.state();
    if (Stalled(r))
      state += " (no step for " + Num(r.since_last_step_s()) + " s)";
    std::vector<std::string> row = {std::to_string(r.rank()), r.host()};
    if (mesh)
      row.push_back(r.has_mesh() ? std::to_string(r.mesh().tp()) + "/" + std::to_string(r.mesh().dp()) + "/" +
                                       std::to_string(r.mesh().pp())
                                 : "-");
    row.push_back(state);
    if (r.window_steps() == 0) {
      row.resize(header.size() - 1, "-");
      row.push_back("");
      t.Add(std::move(row));
      continue;
    }
    row.insert(row.end(), {std::to_string(r.step()), Num(r.step_ms(), 1), Num(r.samples_per_s())});
    if (tokens) row.push_back(Num(r.tokens_per_s()));
    if (padding) row.push_back(Num(100 * r.padding_fraction(), 1));
    row.insert(row.end(), {r.mfu() > 0 ? Num(100 * r.mfu(), 1) : "-", Num(r.data_ms(), 1),
                           Num(r.forward_ms(), 1), Num(r.backward_ms(), 1), Num(r.comm_ms(), 1)});
    if (mesh) row.push_back(Num(r.tp_comm_ms(), 1));
    if (pipeline) {
      const bool staged = r.mesh().pp_size() > 1;
      row.insert(row.end(), {staged ? Num(r.pp_wait_ms(), 1) : "-",
                             staged ? Num(100 * r.pp_bubble_fraction(), 1) : "-"});
    }
    row.insert(row.end(), {Num(r.optim_ms(), 1), Num(r.checkpoint_ms(), 1), Num(r.loss(), 3)});
    if (mem) row.push_back(r.mem_peak_bytes() > 0 ? Bytes(r.mem_peak_bytes()) : "-");
    row.insert(row.end(), {Num(r.busy_vs_median(), 2), r.slow() ? "SLOW" : ""});
    t.Add(std::move(row));
  }
  t.Print(out);
  int window = 0;
  for (const auto& r : st.ranks()) window = std::max(window, r.window_steps());
  if (window > 0)
    out << "(phase times in ms, averaged over the last " << window
        << " steps; BUSY/MED = (step - comm wait - CKPT) relative to the median rank)\n";
  else
    out << "(no steps reported yet)\n";
  std::string notes;
  auto note = [&](bool shown, const char* text) {
    if (shown) notes += (notes.empty() ? "" : "; ") + std::string(text);
  };
  note(padding, "PAD% = padding share of tokens");
  note(mesh,
       "TP/DP/PP = the rank's mesh coordinates (`firedrill mesh`); COMM = the data-parallel gradient "
       "all-reduce's wait; TP_COMM = tensor-parallel all-reduces inside FWD and BWD");
  note(pipeline,
       "PP_WAIT = waiting on the neighbour stages; BUBBLE% = the stage's idle share of the pipeline's wall "
       "time, measured (GPipe and 1F1B leave (p-1)/(m+p-1) when stages take equal time)");
  note(mem, "MEM_PEAK = the last step's peak of tracked memory");
  note(true, "CKPT = checkpoint writes per step, spread over the window (`metrics --series ckpt_ms`: each write)");
  note(true, "MFU% = model FLOPs of real tokens/samples per second over the rank's measured peak matmul rate");
  if (!notes.empty()) out << "(" << notes << ")\n";
  for (const auto& r : st.ranks()) {
    if (!r.message().empty() && (r.state() == "failed" || r.state() == "lost")) {
      out << "rank " << r.rank() << ": " << r.message() << "\n";
    }
  }
  if (st.verification().done()) PrintVerification(st.verification(), out);
  if (st.events_size() > 0) {
    out << "\nrecent events:\n";
    const int first = std::max(0, st.events_size() - 6);
    for (int i = first; i < st.events_size(); ++i) out << "  " << st.events(i).message() << "\n";
  }
}

void PrintCheckpoints(const v1::ListCheckpointsResponse& r, std::ostream& out) {
  out << "checkpoints under " << r.dir() << " (the job has done " << r.steps_done() << " steps)\n";
  if (r.checkpoints_size() == 0) {
    out << "none yet\n";
    return;
  }
  Table t({"STEP", "STATUS", "SHARDS", "BYTES", "CREATED (UTC)", "A RESUME REDOES"});
  for (const auto& c : r.checkpoints()) {
    std::string created = "-";
    if (c.created_unix_ms() > 0) {
      const std::time_t secs = static_cast<std::time_t>(c.created_unix_ms() / 1000);
      char buf[32];
      std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::gmtime(&secs));
      created = buf;
    }
    t.Add({std::to_string(c.step()), c.valid() ? "valid" : "INVALID: " + c.reason(),
           std::to_string(c.shards()) + (c.world_size() > 0 ? "/" + std::to_string(c.world_size()) : ""),
           Bytes(c.bytes()), created, std::to_string(c.steps_lost()) + " steps"});
  }
  t.Print(out);
  out << "(valid: the manifest is there and every shard has the size and SHA-256 it lists, as a resume checks)\n";
}

void PrintCheckpointVerify(const v1::VerifyCheckpointResponse& r, std::ostream& out) {
  out << "step " << r.step() << ": " << (r.valid() ? "valid" : "INVALID") << "\n" << r.detail() << "\n";
}

void PrintVerification(const v1::Verification& v, std::ostream& out) {
  out << "verification " << (v.passed() ? "PASSED" : "FAILED") << ": " << v.detail() << "\n";
}

namespace {
std::string FindingText(const v1::Finding& f) {
  std::string rs;
  for (int c : f.culprit_ranks()) rs += (rs.empty() ? "" : ",") + std::to_string(c);
  return f.cause() + (rs.empty() ? "" : " on rank " + rs);
}
}  // namespace

std::string FindingsText(const google::protobuf::RepeatedPtrField<v1::Finding>& fs) {
  std::string out;
  for (const auto& f : fs) out += (out.empty() ? "" : " + ") + FindingText(f);
  return out;
}
std::string FixText(const v1::ApplyFixRequest& f) {
  std::string out;
  for (int r : f.replace_host_ranks()) out += (out.empty() ? "" : " ") + std::string("--replace-host ") + std::to_string(r);
  for (const auto& kv : f.settings()) out += (out.empty() ? "" : " ") + std::string("--set ") + kv.key() + "=" + kv.value();
  if (f.no_change()) out = "--no-change";
  return out;
}

void PrintScore(const v1::ScoreReport& r, std::ostream& out) {
  out << "score for session " << r.session_id()
      << (r.scenario_id().empty() ? "" : " (" + r.scenario_id() + ")");
  if (!r.final())
    out << (r.state() == "aborted" ? ": aborted before it was scored (see `firedrill status`); it will not be scored"
                                   : ": not scored yet (" + (r.state().empty() ? std::string("in progress") : r.state()) + ")");
  out << "\n";
  if (r.diagnoses_size() > 0) {
    out << "\ndiagnoses:\n";
    for (const auto& d : r.diagnoses()) out << "  #" << d.number() << " " << FindingsText(d.findings()) << "\n";
  } else {
    out << "\nno diagnosis submitted\n";
  }
  out << (r.fix_applied() ? "fix: " + FixText(r.fix()) : std::string("no fix applied")) << "\n";
  if (!r.final()) {
    // An exam item's note says where its score is; a practice session's
    // says nothing.
    out << (r.note().empty() || r.note() == "not scored yet"
                ? std::string("(nothing here says whether any of it is right until the session is scored)")
                : "(" + r.note() + ")")
        << "\n";
    return;
  }
  out << "\n";
  Table t({"ITEM", "POINTS", "MAX", "WHY"});
  for (const auto& it : r.items()) {
    t.Add({it.name(), std::to_string(it.points()), std::to_string(it.max_points()), it.reason()});
  }
  t.Add({"total", std::to_string(r.total()), std::to_string(r.max_total()), ""});
  t.Print(out);
  for (const auto& c : r.collateral()) out << "collateral: " << c << "\n";
  if (r.needs_review()) out << "REVIEW: " << r.note() << "\n";
  if (r.answer_findings_size() == 0) {
    out << "\n" << r.note() << "\n";  // sealed: ended before a fix
    return;
  }
  out << "\nanswer: " << FindingsText(r.answer_findings())
      << (r.runbook().empty() ? "" : "; runbook: " + r.runbook()) << "\n";
}

std::string Progress::Estimate(int64_t done_then, int64_t done_now, int64_t total, double seconds_between) {
  if (done_now <= done_then || seconds_between < 1 || total <= done_now) return "";
  const double left = (total - done_now) * seconds_between / static_cast<double>(done_now - done_then);
  char buf[48];
  if (left < 90) {
    std::snprintf(buf, sizeof buf, "about %.0f s left", std::max(1.0, left));
  } else {
    std::snprintf(buf, sizeof buf, "about %.0f min left", left / 60);
  }
  return buf;
}

void Progress::Update(const std::string& phase, int64_t done, int64_t total) {
  if (!isatty(2)) return;
  const std::string text = label_.empty() ? phase : label_ + " " + phase;
  const auto now = std::chrono::steady_clock::now();
  if (phase != phase_ || total != total_ || done < first_done_) {  // a new phase: measure it afresh
    phase_ = phase;
    total_ = total;
    first_done_ = done;
    first_at_ = now;
  }
  if (total <= 0) {
    std::fprintf(stderr, "\r%-60s", text.c_str());
  } else {
    const int width = 30;
    const int filled = static_cast<int>(width * std::min<int64_t>(done, total) / total);
    const std::string eta =
        Estimate(first_done_, done, total, std::chrono::duration<double>(now - first_at_).count());
    std::fprintf(stderr, "\r%-40s [%s%s] %lld/%lld steps %-20s", text.c_str(),
                 std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                 static_cast<long long>(done), static_cast<long long>(total), eta.c_str());
  }
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::Done() {
  if (drawn_) std::fprintf(stderr, "\r%*s\r", 100, "");
  drawn_ = false;
}

namespace {

void PrintFields(const google::protobuf::Message& m, const std::string& prefix,
                 std::vector<std::pair<std::string, std::string>>* out) {
  namespace pb = google::protobuf;
  const pb::Reflection* ref = m.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  ref->ListFields(m, &fields);  // set fields only, in field-number order
  for (const auto* f : fields) {
    const std::string key = prefix.empty() ? f->name() : prefix + "." + f->name();
    if (f->is_repeated()) continue;
    switch (f->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_MESSAGE:
        PrintFields(ref->GetMessage(m, f), key, out);
        break;
      case pb::FieldDescriptor::CPPTYPE_STRING:
        out->emplace_back(key, ref->GetString(m, f));
        break;
      case pb::FieldDescriptor::CPPTYPE_BOOL:
        out->emplace_back(key, ref->GetBool(m, f) ? "true" : "false");
        break;
      case pb::FieldDescriptor::CPPTYPE_INT32:
        out->emplace_back(key, std::to_string(ref->GetInt32(m, f)));
        break;
      case pb::FieldDescriptor::CPPTYPE_INT64:
        out->emplace_back(key, std::to_string(ref->GetInt64(m, f)));
        break;
      case pb::FieldDescriptor::CPPTYPE_DOUBLE: {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%g", ref->GetDouble(m, f));
        out->emplace_back(key, buf);
        break;
      }
      default:
        break;
    }
  }
}

}  // namespace

bool Stalled(const v1::RankStatus& r) {
  return r.since_last_step_s() >= 5 && r.since_last_step_s() * 1000 >= 20 * r.step_ms();
}

void PrintConfig(const v1::SessionStatus& st, std::ostream& out) {
  std::vector<std::pair<std::string, std::string>> kv;
  PrintFields(st.job(), "", &kv);
  // Settings whose default is a policy the job runs with, shown with it
  // where the job leaves them out: the model's normalisation, the mlp's
  // feature units and their normalisation, the learning
  // rate's warm-up, how the optimiser's state is laid out,
  // how the launcher restarts the job, how a resume reads a checkpoint
  // and how the model is laid out across the ranks are part of every job,
  // not only of the ones that set them.
  const v1::JobSpec& j = st.job();
  std::vector<std::pair<std::string, std::string>> defaults = {
      {"model.norm", j.model().kind() == "gpt-tiny" ? "layer" : "none"},
      {"optim.warmup_steps", "0"},
      {"optim.zero_stage", "0"},
      {"checkpoint.load", "resharded"},
      {"elastic.max_restarts", "0"},
      {"elastic.min_nodes", std::to_string(j.world_size())},
      // Every job has a layout across its ranks; data parallelism is one.
      {"parallel.tp", "1"},
      {"parallel.pp", "1"},
      {"parallel.order", "tp-dp-pp"},
      {"parallel.schedule", "1f1b"},
  };
  if (j.model().kind() != "gpt-tiny") {
    // The mlp's features have units (1: their own); the pipeline may
    // standardise them.
    defaults.push_back({"data.feature_scale", "1"});
    defaults.push_back({"data.normalize", "false"});
  }
  for (const auto& [key, value] : defaults) {
    const bool set = std::any_of(kv.begin(), kv.end(), [&](const auto& e) { return e.first == key; });
    if (set) continue;
    // After the last key of its section (the part before the first dot), as a set one would be.
    const std::string section = key.substr(0, key.find('.') + 1);
    auto at = kv.end();
    for (auto it = kv.begin(); it != kv.end(); ++it)
      if (it->first.rfind(section, 0) == 0) at = it + 1;
    kv.insert(at, {key, value});
  }
  size_t width = 0;
  for (const auto& [k, v] : kv) width = std::max(width, k.size() + 3 + v.size());
  // Each key's class says what a fix may change (controller/job_keys.cc):
  // operational keys always, workload keys only where the drill allows.
  for (const auto& [k, v] : kv) {
    const std::string line = k + " = " + v;
    out << line << std::string(width - line.size() + 2, ' ') << "# "
        << scenario::JobKeyClassName(scenario::ClassOfJobKey(k)) << "\n";
  }
}

bool SessionOver(const std::string& state) { return state == "scored" || state == "ended" || state == "aborted"; }

}  // namespace firedrill::cli
