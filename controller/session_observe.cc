// SessionManager's read side: what a learner sees of a session (status,
// merged trace, agent logs, flight recorders). Split from session_manager.cc,
// which drives sessions; probes are in session_probe.cc.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/clock.h"
#include "common/log.h"
#include "controller/run_metrics.h"
#include "controller/scorer.h"
#include "controller/session_manager.h"
#include "faults/registry.h"

namespace firedrill::controller {

bool SessionManager::HealthyRun(const Session& s) {
  return s.run && (s.run->kind == RunKind::kBaseline || s.run->kind == RunKind::kHealthy);
}

Status SessionManager::NotHealthyRun(const Session& s, const std::string& tool) {
  if (!HealthyRun(s)) return Status::Ok();
  return FailedPrecondition(std::string("the job running now is the healthy comparison job (the ") +
                            Name(s.run->kind) + " run), not the drill's: " + tool +
                            " shows the drill's own job; try again once it runs");
}

v1::RunSummary SessionManager::Summarize(const Session& s, int window) const {
  v1::RunSummary out;
  if (!s.run) return out;
  out.set_kind(Name(s.run->kind));
  out.set_state(Name(s.run->state));
  // The main run has no planned end (it trains until the fix): 0.
  out.set_steps_total(s.run->kind == RunKind::kMain ? 0 : s.run->steps_total);
  // Steps every rank has done in this run, counted from the run's own first
  // step (a resumed run starts at its checkpoint's).
  const auto by_rank = StepsByRank(s);
  const int64_t start = std::max<int64_t>(0, s.run->first_step);
  int64_t done = s.run->steps_total;
  for (const auto& steps : by_rank)
    done = std::min<int64_t>(done, steps.empty() ? 0 : std::max<int64_t>(0, steps.back().step() + 1 - start));
  out.set_steps_done(done);
  if (done > 0) {
    const int64_t n = std::min<int64_t>(done, window);
    FillSummary(MeasureWindow(by_rank, start + done - n, n, static_cast<int>(JobSamplesPerStep(s.rec.job()))),
                &out);
  }
  return out;
}

StatusOr<v1::SessionStatus> SessionManager::GetStatus(const std::string& id) {
  auto sp = Find(id);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  std::lock_guard<std::mutex> lock(s.mu);
  v1::SessionStatus st;
  *st.mutable_session() = s.rec.info();
  *st.mutable_run() = Summarize(s, opts_.status_window);
  *st.mutable_baseline() = s.rec.baseline();
  std::vector<v1::RankStatus> rows;
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
    const Rank& r = s.ranks[rank];
    v1::RankStatus row;
    row.set_rank(rank);
    row.set_host(rank < s.rec.hosts_size() ? s.rec.hosts(rank) : r.host);
    row.set_agent_id(r.agent_id);
    row.set_pid(r.pid);
    row.set_state(Name(r.state));
    row.set_message(r.message);
    FillRankWindow(r.steps, opts_.status_window, &row);
    if (HealthyRun(s)) WithholdSettings(&row);
    if (!r.steps.empty() && r.state == RankState::kRunning) {
      row.set_since_last_step_s(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - r.last_step_at).count());
    }
    rows.push_back(std::move(row));
  }
  // The SLOW marker is a verdict (it names a culprit): only where the drill
  // offers the slow-rank flag. busy_vs_median is evidence, always there.
  MarkSlowRanks(opts_.slow_ratio, &rows);
  if (s.scenario == nullptr || !s.scenario->tools().slow_rank_flag()) {
    for (auto& row : rows) row.set_slow(false);
  }
  for (auto& row : rows) *st.add_ranks() = std::move(row);
  *st.mutable_verification() = s.rec.verification();
  for (const auto& e : s.events) *st.add_events() = e;
  if (s.rec.run_started_unix_ms() > 0) {
    const int64_t end = s.rec.fix_applied_unix_ms() > 0 ? s.rec.fix_applied_unix_ms() : UnixNowMs();
    st.set_elapsed_s((end - s.rec.run_started_unix_ms()) / 1000.0);
  }
  if (s.scenario != nullptr) {
    *st.mutable_tools() = s.scenario->tools();
    st.set_time_budget_s(s.scenario->rubric().time_budget_s());
    st.set_time_limit_s(TimeLimitS(s.scenario->rubric()));
  }
  // Before the faulty run starts, rec.job is still the healthy baseline's;
  // the learner only ever sees the config as deployed.
  *st.mutable_job() = s.rec.job();
  if (s.state == SessionState::kCreated || s.state == SessionState::kBaseline) {
    faults::ApplyFaultsToJob(std::vector<v1::ResolvedFault>(s.rec.faults().begin(), s.rec.faults().end()),
                             st.mutable_job());
  }
  // Samples per optimiser step, as the trainer counts them (micro-batches
  // included), so the status header and the training line agree.
  st.set_global_batch(JobSamplesPerStep(st.job()));
  return st;
}

StatusOr<v1::TraceResponse> SessionManager::GetTrace(const v1::GetTraceRequest& req) {
  auto sp = Find(req.session_id());
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  std::lock_guard<std::mutex> lock(s.mu);
  FD_RETURN_IF_ERROR(ToolOffered(s, req.node() ? "node" : "trace"));
  // A healthy run's timeline would show what its settings make of a step
  // (its buckets' sizes, its micro-batches) beside the deployed config.
  FD_RETURN_IF_ERROR(NotHealthyRun(s, req.node() ? "node" : "trace"));
  // Each tool's own fields: the node view needs no timeline, a trace shows
  // no CPU counters unless the drill offers the node tool.
  const bool spans = !req.node();
  const bool cpu = req.node() || ToolOffered(s, "node").ok();
  if (req.from_step() < 0 || (req.to_step() != 0 && req.to_step() <= req.from_step()))
    return InvalidArgument("steps " + std::to_string(req.from_step()) + ":" + std::to_string(req.to_step()) +
                           " is not a range (FROM:TO, TO exclusive and > FROM)");
  v1::TraceResponse out;
  out.set_session_id(req.session_id());
  if (s.run) out.set_run(Name(s.run->kind));
  int64_t newest = -1;
  for (const auto& r : s.ranks)
    if (!r.steps.empty()) newest = std::max(newest, r.steps.back().step());
  if (newest < 0) return FailedPrecondition("no steps recorded yet in this session's current run; try again shortly");
  int64_t from = req.from_step(), to = req.to_step();
  if (to == 0 && from == 0) {
    const int last = req.last() > 0 ? req.last() : 20;
    to = newest + 1;
    from = std::max<int64_t>(0, to - last);
  } else if (to == 0) {
    to = newest + 1;
  }
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
    const Rank& r = s.ranks[rank];
    v1::RankTrace* t = out.add_ranks();
    t->set_rank(rank);
    t->set_host(rank < s.rec.hosts_size() ? s.rec.hosts(rank) : r.host);
    for (const auto& st : r.steps) {
      if (st.step() < from || st.step() >= to) continue;
      v1::StepReport* out_step = t->add_steps();
      *out_step = st;
      if (!spans) out_step->clear_spans();
      if (!cpu) {
        out_step->clear_thread_cpu_ns();
        out_step->clear_thread_wait_ns();
        out_step->clear_cpu();
      }
    }
  }
  return out;
}

StatusOr<v1::MetricsResponse> SessionManager::GetMetrics(const v1::GetMetricsRequest& req) {
  auto sp = Find(req.session_id());
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  std::lock_guard<std::mutex> lock(s.mu);
  FD_RETURN_IF_ERROR(ToolOffered(s, "metrics"));
  if (req.from_step() < 0 || (req.to_step() != 0 && req.to_step() <= req.from_step()))
    return InvalidArgument("steps " + std::to_string(req.from_step()) + ":" + std::to_string(req.to_step()) +
                           " is not a range (FROM:TO, TO exclusive and > FROM)");
  const std::string& want = req.run();
  if (!want.empty() && want != "baseline" && want != "main")
    return InvalidArgument("run must be empty (the run in progress or the last one), \"baseline\" or \"main\", got \"" +
                           want + "\"");
  std::vector<const History*> from;
  std::string run;
  if (want.empty() || (s.run && want == Name(s.run->kind))) {
    if (!s.run) return FailedPrecondition("no run has started in this session yet; try again shortly");
    run = Name(s.run->kind);
    for (const Rank& r : s.ranks) from.push_back(&r.history);
  } else {
    auto kept = s.kept_history.find(want);
    if (kept == s.kept_history.end())
      return FailedPrecondition(Terminal(s.state)
                                    ? "this session's " + want + " run is not in memory (a controller keeps the "
                                      "curves of the sessions it ran itself, while it runs)"
                                    : "this session has no " + want + " run yet; try again when it has started");
    run = want;
    for (const History& h : kept->second) from.push_back(&h);
  }
  if (req.max_points() < 0 || req.max_points() > 10000)
    return InvalidArgument("max_points must be 0 (2000) to 10000, got " + std::to_string(req.max_points()));
  // Points per rank, and at most 20000 rows in all (about 2 MB: well inside
  // gRPC's 4 MiB message limit however many ranks the job has).
  constexpr int64_t kMaxRows = 20000;
  const int64_t budget = std::max<int64_t>(
      1, std::min<int64_t>(req.max_points() > 0 ? req.max_points() : 2000,
                           kMaxRows / std::max<int64_t>(1, static_cast<int64_t>(from.size()))));
  auto in_range = [&](const v1::MetricsRow& row) {
    return row.step() >= req.from_step() && (req.to_step() == 0 || row.step() < req.to_step());
  };
  // One stride for every rank (ranks may have thinned at different
  // points), coarsened until the range fits the point budget.
  int64_t stride = 1;
  for (const History* h : from) stride = std::max(stride, h->stride);
  for (;;) {
    int64_t most = 0;
    for (const History* h : from)
      most = std::max<int64_t>(most, std::count_if(h->rows.begin(), h->rows.end(), [&](const v1::MetricsRow& r) {
                                 return in_range(r) && r.step() % stride == 0;
                               }));
    if (most <= budget) break;
    stride *= 2;
  }
  v1::MetricsResponse out;
  out.set_session_id(req.session_id());
  out.set_run(run);
  out.set_stride(stride);
  // The kept baseline, or the run in progress when it is a healthy one.
  const bool settings_hidden = run == "baseline" || run == Name(RunKind::kHealthy);
  if (settings_hidden)
    for (const auto& name : WithheldSettings()) out.add_withheld(name);
  for (int rank = 0; rank < static_cast<int>(from.size()); ++rank) {
    v1::RankMetrics* m = out.add_ranks();
    m->set_rank(rank);
    m->set_host(!from[rank]->host.empty() ? from[rank]->host : rank < s.rec.hosts_size() ? s.rec.hosts(rank) : "");
    for (const auto& row : from[rank]->rows) {
      if (!in_range(row) || row.step() % stride != 0) continue;
      v1::MetricsRow* r = m->add_rows();
      *r = row;
      if (settings_hidden) WithholdSettings(r);
    }
  }
  return out;
}

void SessionManager::OnFlightRecord(const std::string& agent_id, const v1::FlightRecord& record) {
  auto s = SessionOfAgent(agent_id);
  if (!s) return;
  std::lock_guard<std::mutex> lock(s->mu);
  auto req = s->fr_replies.find(record.request_id());
  if (req == s->fr_replies.end()) return;  // a late answer to a dump no one waits for
  for (int rank = 0; rank < static_cast<int>(s->ranks.size()); ++rank) {
    if (s->ranks[rank].agent_id == agent_id) req->second[rank] = record;
  }
  s->cv.notify_all();
}

StatusOr<v1::FlightRecorderResponse> SessionManager::GetFlightRecorder(const v1::GetFlightRecorderRequest& req) {
  auto sp = Find(req.session_id());
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  const int64_t id = ++fr_counter_;
  std::vector<std::pair<int, std::string>> agents;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    FD_RETURN_IF_ERROR(ToolOffered(s, "flight_recorder"));
    FD_RETURN_IF_ERROR(NotHealthyRun(s, "the flight recorder"));
    s.fr_replies[id];  // this request's own replies: concurrent dumps do not mix
    for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank)
      if (!s.ranks[rank].agent_id.empty()) agents.emplace_back(rank, s.ranks[rank].agent_id);
  }
  v1::ControllerMessage msg;
  msg.mutable_dump_flight_recorder()->set_request_id(id);
  size_t sent = 0;
  for (const auto& [rank, agent] : agents) sent += pool_->Send(agent, msg) ? 1 : 0;
  std::unique_lock<std::mutex> lock(s.mu);
  // Agents answer from their stream thread, even while their rank is stuck.
  s.cv.wait_for(lock, std::chrono::seconds(3), [&] { return s.fr_replies[id].size() >= sent; });
  const std::map<int, v1::FlightRecord> replies = std::move(s.fr_replies[id]);
  s.fr_replies.erase(id);
  v1::FlightRecorderResponse out;
  out.set_session_id(req.session_id());
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
    v1::RankFlightRecord* r = out.add_ranks();
    r->set_rank(rank);
    r->set_host(rank < s.rec.hosts_size() ? s.rec.hosts(rank) : s.ranks[rank].host);
    auto it = replies.find(rank);
    if (it == replies.end()) continue;
    r->set_answered(true);
    *r->mutable_entries() = it->second.entries();
    r->set_unix_ns(it->second.unix_ns());
  }
  return out;
}

StatusOr<v1::LogsResponse> SessionManager::GetLogs(const v1::GetLogsRequest& req) {
  auto sp = Find(req.session_id());
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  std::string agent_id, host;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    FD_RETURN_IF_ERROR(ToolOffered(s, "logs"));
    if (req.rank() < 0 || req.rank() >= static_cast<int>(s.ranks.size()))
      return InvalidArgument("rank " + std::to_string(req.rank()) + " is outside 0.." +
                             std::to_string(s.ranks.size() - 1));
    agent_id = s.ranks[req.rank()].agent_id;
    host = req.rank() < s.rec.hosts_size() ? s.rec.hosts(req.rank()) : s.ranks[req.rank()].host;
  }
  if (agent_id.empty()) return FailedPrecondition("rank " + std::to_string(req.rank()) + " has no agent yet");
  if (!opts_.local_launcher)
    return FailedPrecondition("agent logs are kept on the agents' own machines (this controller did not launch them)");
  const std::string path = opts_.state_dir + "/logs/" + agent_id + ".log";
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("no log for rank " + std::to_string(req.rank()) + " (" + path + ")");
  in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(in.tellg());
  int64_t from = req.offset();
  std::string text;
  if (from < 0) {
    // The last N lines: read a generous tail and cut at line starts.
    const int lines = req.tail_lines() > 0 ? req.tail_lines() : 50;
    const int64_t start = std::max<int64_t>(0, size - 256 * 1024);
    in.seekg(start);
    text.assign(std::istreambuf_iterator<char>(in), {});
    size_t cut = text.size();
    for (int n = 0; n <= lines && cut != std::string::npos && cut > 0; ++n) cut = text.rfind('\n', cut - 1);
    if (cut != std::string::npos && cut + 1 < text.size() && cut > 0) text = text.substr(cut + 1);
    from = size;
  } else {
    from = std::min(from, size);
    const int64_t n = std::min<int64_t>(size - from, 1 << 20);
    in.seekg(from);
    text.resize(static_cast<size_t>(n));
    in.read(text.data(), n);
    from += n;
  }
  v1::LogsResponse out;
  out.set_agent_id(agent_id);
  out.set_host(host);
  out.set_text(text);
  out.set_next_offset(from);
  return out;
}

}  // namespace firedrill::controller
