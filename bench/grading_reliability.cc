// grading_reliability: how often verification gets a fix wrong. For every
// shipped scenario it plays the accepted fix and a plausible wrong fix, N
// times each on fresh sessions (seeds base..base+N-1), once on an idle
// machine and once with a CPU burner holding one core, through a real
// controller and real agents. It acts as the instructor: it reads the
// scenario files and resolves each session's answer from its seed, then
// submits the right diagnosis with the fix, so only the fix differs (the
// draws need the controller's draw key: the bench owns its state dir).
//
//   false fail  the accepted fix did not pass verification
//   false pass  the wrong fix passed verification
//
//   build/bin/grading_reliability --trials 10 --out /tmp/grading.jsonl
//   build/bin/grading_reliability --scenario throughput-halved --trials 2 --conditions idle
//
// One JSON object per trial goes to --out as it finishes (so a long run can
// be read while it goes); the per-scenario table goes to stdout at the end.
// A run taken in parts: --resume skips what --out holds; --report FILE...
// prints the table of several files.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_controller.h"
#include "cli/client.h"
#include "common/paths.h"
#include "common/stats.h"
#include "controller/draws.h"
#include "scenario/loader.h"
#include "faults/targeting.h"

namespace {

using namespace firedrill;
using Clock = std::chrono::steady_clock;

// A wrong fix that a learner could plausibly try: the fix of a neighbouring
// cause, half of a two-part fix, a healthy host instead of the bad one.
// `culprit` is the answer's first culprit rank (-1 if none).
v1::ApplyFixRequest WrongFix(const v1::Scenario& sc, int culprit) {
  v1::ApplyFixRequest f;
  auto set = [&](const char* k, const char* v) {
    auto* s = f.add_settings();
    s->set_key(k);
    s->set_value(v);
  };
  const std::string& id = sc.id();
  const int world = sc.job().world_size();
  if (id == "storage-migration") set("data.prefetch_depth", "16");          // read-ahead without workers
  else if (id == "new-text-pipeline") set("data.num_workers", "8");         // a loader fix for padding
  // (Only the first bucket at 25 MB is no wrong fix here: the whole model
  // fits in it. Measured: 1.26x, verified, and not an accepted remediation.)
  else if (id == "ddp-memory-tuning") set("comm.bucket_mb", "0.05");        // bigger, still tiny
  else if (id == "epoch-end-hang") set("comm.timeout_s", "60");             // fail fast, still desync
  else if (id == "allreduce-slowdown") set("comm.bucket_mb", "100");        // bigger buckets, same link
  else if (id == "quiet-night-page") set("comm.bucket_mb", "0.01");         // "tuning" a healthy job
  else if (id == "tokenizer-rollout") set("data.sampler", "length_bucketed");  // fixing the red herring
  else if (id == "monday-changes") set("data.sampler", "length_bucketed");     // half of the fix
  else if (id == "mixed-precision-rollout") set("loss_scale.init_scale", "4194304");  // a quarter, still static
  else if (id == "v100-pool")
    set("loss_scale.init_scale", "1");                                   // no scale fixes a forward overflow
  else if (id == "platform-launcher") set("optim.warmup_steps", "100");  // the spike goes, the rate stays
  else if (id == "cluster-move")
    set("optim.warmup_steps", "25");                                 // a ramp, too short for this model
  else if (id == "smaller-cards") set("optim.warmup_steps", "100");  // a ramp to the same 4x steps
  else if (id == "shared-training-loop") set("comm.bucket_mb", "100");  // bigger buckets, still one all-reduce per micro-batch
  else if (id == "registry-refused") f.add_replace_host_ranks(culprit);  // the elastic restart: from the newest checkpoint
  // The host that went down replaced, the job resumed from `latest` again.
  else if (id == "restart-loop" || id == "power-cut") f.add_replace_host_ranks(culprit);
  else if (id == "mig-slices") set("comm.bucket_mb", "1");  // smaller buckets: the activations stay
  // Recomputing activations where they are not what overflows the device.
  else if (id == "new-recipe" || id == "adamw-migration")
    set("model.activation_checkpointing", "true");
  else if (id == "deeper-model" || id == "longer-context")
    set("optim.zero_stage", "1");  // the state partitioned: weights, gradients and activations stay whole
  else if (id == "launcher-v2")
    set("parallel.schedule", "gpipe");  // another schedule, the same one micro-batch
  else if (id == "platform-defaults")
    set("comm.bucket_mb", "100");  // bigger gradient buckets: the TP all-reduces stay
  else if (id == "tidy-config")
    set("comm.bucket_mb", "100");  // bigger gradient buckets: the TP pairs still cross machines
  else if (id == "new-base-image")
    set("data.num_workers", "2");  // more loader workers: the compute threads stay two a rank
  // All of the state loaded, from `latest`: written after the lossy restart.
  else if (id == "night-restart" || id == "data-audit") set("checkpoint.restore", "all");
  else if (id == "after-the-outage") set("checkpoint.every", "50");  // five times fewer writes, still far too many
  else if (id == "rack-failure") set("grad_accum_steps", "2"), set("data.batch_size", "16");  // accumulated, still 64 a step
  else if (id == "board-failure")
    set("optim.zero_stage", "0");  // replicate the state: the checkpoint is still sharded
  else {
    // A healthy host: the next one, past the culprit's host-mates.
    const int per_host = std::max(1, sc.cluster().ranks_per_host());
    f.add_replace_host_ranks(culprit >= 0 ? (culprit / per_host * per_host + per_host) % world : 0);
  }
  return f;
}

// The first accepted remediation, resolved for this session.
v1::ApplyFixRequest AcceptedFix(const v1::Scenario& sc, const std::vector<v1::ResolvedFault>& faults) {
  v1::ApplyFixRequest f;
  for (const auto& a : sc.remediations(0).actions()) {
    if (a.has_replace_host()) {
      auto r = faults::ResolveRankRef(a.replace_host(), faults);
      if (r.ok()) f.add_replace_host_ranks(*r);
    } else if (a.has_set() && a.set().any_value() && a.set().key() == "checkpoint.every") {
      // A cadence verification judges: the job's own before the drill.
      auto* s = f.add_settings();
      s->set_key(a.set().key());
      s->set_value(std::to_string(sc.job().checkpoint().every()));
    } else if (a.has_set() && a.set().any_value()) {
      continue;  // the session's own value (a checkpoint): set by the caller
    } else if (a.has_set()) {
      auto* s = f.add_settings();
      s->set_key(a.set().key());
      const double bound = a.set().has_at_most() ? a.set().at_most() : a.set().at_least();
      s->set_value(a.set().value().empty() ? std::to_string(static_cast<int64_t>(bound)) : a.set().value());
    } else if (a.no_change()) {
      f.set_no_change(true);
    }
  }
  return f;
}

v1::SubmitDiagnosisRequest RightDiagnosis(const v1::Scenario& sc, const std::vector<v1::ResolvedFault>& faults,
                                          int* first_culprit) {
  v1::SubmitDiagnosisRequest d;
  *first_culprit = -1;
  for (const auto& k : faults::AnswerKey(sc)) {
    v1::Finding* f = d.add_findings();
    f->set_cause(k.cause());
    for (const auto& ref : k.culprit_ranks()) {
      auto r = faults::ResolveRankRef(ref, faults);
      if (!r.ok()) continue;
      f->add_culprit_ranks(*r);
      if (*first_culprit < 0) *first_culprit = *r;
    }
  }
  return d;
}

// Holds one core busy until stopped (bounded by `max`).
pid_t StartBurner(std::chrono::seconds max) {
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const auto end = Clock::now() + max;
    volatile uint64_t x = 0;
    while (Clock::now() < end)
      for (int i = 0; i < 1000000; ++i) x = x * 6364136223846793005ULL + 1;
    _exit(0);
  }
  return pid;
}

struct Trial {
  std::string scenario, condition, fix;  // fix: accepted | wrong
  std::string hosts;                     // netns | loopback: where the agents ran
  int64_t seed = 0;
  bool done = false, passed = false;
  double ratio = 0, skew = 0;
  double loss_ratio = 0;  // numerics drills: fixed/healthy mean loss (inf: not finite)
  double bubble = 0;      // pipeline drills: the fixed windows' measured bubble
  int fix_points = 0, total = 0;
  double seconds = 0;
  std::string detail;
};

Trial Play(cli::DrillClient& c, const v1::Scenario& sc, int64_t seed, bool accepted, const std::string& condition,
           const std::string& draw_key) {
  Trial t;
  t.scenario = sc.id();
  t.condition = condition;
  t.fix = accepted ? "accepted" : "wrong";
  t.seed = seed;
  const auto t0 = Clock::now();
  auto info = c.StartSession(sc.id(), seed);
  if (!info.ok()) {
    t.detail = info.status().message();
    return t;
  }
  const std::string id = info->session_id();
  std::string state;
  for (int i = 0; i < 1500; ++i) {  // 5 min
    auto st = c.GetStatus(id);
    if (st.ok()) state = st->session().state();
    if (state != "created" && state != "baseline") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (state != "running") {
    t.detail = "session " + state;
    (void)c.EndSession(id, std::chrono::seconds(60));
    return t;
  }
  std::vector<std::string> hosts;
  for (int r = 0; r < sc.job().world_size(); ++r) hosts.push_back("node-" + std::to_string(r));
  // The instructor's view: the controller's draw key (its state dir is
  // ours) turns the seed into the session's draws.
  auto faults = faults::ResolveFaults(sc, controller::DrawSeed(draw_key, seed), hosts);
  int culprit = -1;
  v1::SubmitDiagnosisRequest d = RightDiagnosis(sc, faults.ok() ? *faults : std::vector<v1::ResolvedFault>{}, &culprit);
  d.set_session_id(id);
  (void)c.SubmitDiagnosis(d);
  v1::ApplyFixRequest fix = accepted ? AcceptedFix(sc, *faults) : WrongFix(sc, culprit);
  if (sc.verify().params_vs_reference() && faults.ok()) {
    // A roll-back drill: the fault has struck and a checkpoint has been
    // written after it (else the newest one is still clean and restarting
    // from it is right); the accepted fix resumes from the newest
    // checkpoint written before the trigger.
    int64_t trigger = 0;
    for (const auto& f : *faults) trigger = std::max<int64_t>(trigger, f.trigger_step());
    const int64_t past = trigger + 2 * sc.job().checkpoint().every();
    for (int i = 0; i < 600; ++i) {  // 2 min
      auto st = c.GetStatus(id);
      if (st.ok() && st->run().steps_done() >= past) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (accepted) {
      auto list = c.ListCheckpoints(id);
      if (list.ok())
        for (const auto& e : list->checkpoints())  // newest first
          if (e.valid() && e.step() <= trigger) {
            auto* s = fix.add_settings();
            s->set_key("checkpoint.resume_from");
            s->set_value(e.dir());
            break;
          }
    }
  }
  const bool damaged_checkpoints = sc.remediations_size() > 0 && sc.remediations(0).newest_valid_checkpoint();
  if (damaged_checkpoints) {
    // The host has gone down and a restart has read the damage (the
    // launcher's restart is in the events; 2 min at most; a checkpoint
    // being written reads as invalid too, so the listing cannot say). The
    // accepted fix resumes from the newest one that verifies.
    std::optional<v1::ListCheckpointsResponse> list;
    for (int i = 0; i < 600; ++i) {
      auto st = c.GetStatus(id);
      bool restarted = false;
      if (st.ok())
        for (const auto& e : st->events()) restarted = restarted || e.kind() == "job_restarted";
      if (restarted) {
        if (auto l = c.ListCheckpoints(id); l.ok()) list = *l;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (accepted && list)
      for (const auto& e : list->checkpoints())  // newest first
        if (e.valid()) {
          auto* s = fix.add_settings();
          s->set_key("checkpoint.resume_from");
          s->set_value(e.dir());
          break;
        }
  }
  fix.set_session_id(id);
  if (auto f = c.ApplyFix(fix); !f.ok()) {
    t.detail = "fix refused: " + f.status().message();
    (void)c.EndSession(id, std::chrono::seconds(60));
    return t;
  }
  for (int i = 0; i < 3000; ++i) {  // 10 min
    auto st = c.GetStatus(id);
    if (st.ok()) state = st->session().state();
    if (state == "scored" || state == "ended" || state == "aborted") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  auto score = c.GetScore(id);
  if (score.ok() && score->final()) {
    const auto& v = score->verification();
    t.done = v.done();
    t.passed = v.passed();
    t.ratio = v.throughput_ratio();
    t.skew = v.rank_step_skew();
    t.loss_ratio = v.loss_ratio();
    t.bubble = v.pp_bubble();
    t.detail = v.detail();
    t.total = score->total();
    for (const auto& it : score->items())
      if (it.name() == "fix") t.fix_points = it.points();
  } else {
    t.detail = "not scored (" + state + ")";
  }
  t.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return t;
}

nlohmann::json ToJson(const Trial& t) {
  return {{"scenario", t.scenario},
          {"condition", t.condition},
          {"fix", t.fix},
          {"seed", t.seed},
          {"done", t.done},
          {"passed", t.passed},
          {"ratio", t.ratio},
          {"skew", t.skew},
          {"fix_points", t.fix_points},
          {"total", t.total},
          {"seconds", t.seconds},
          {"detail", t.detail},
          {"hosts", t.hosts},
          {"loss_ratio", std::isfinite(t.loss_ratio) ? t.loss_ratio : 1e308},
          {"bubble", t.bubble}};
}

// The trials of earlier runs: a long measurement is taken in parts
// (--resume) and reported as one (--report).
std::vector<Trial> ReadTrials(const std::string& path) {
  std::vector<Trial> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    Trial t;
    t.scenario = j.value("scenario", "");
    t.condition = j.value("condition", "");
    t.fix = j.value("fix", "");
    t.seed = j.value("seed", int64_t{0});
    t.done = j.value("done", false);
    t.passed = j.value("passed", false);
    t.ratio = j.value("ratio", 0.0);
    t.skew = j.value("skew", 0.0);
    t.loss_ratio = j.value("loss_ratio", 0.0);
    if (t.loss_ratio >= 1e308) t.loss_ratio = std::numeric_limits<double>::infinity();  // as written: JSON has no inf
    t.bubble = j.value("bubble", 0.0);
    t.fix_points = j.value("fix_points", 0);
    t.total = j.value("total", 0);
    t.seconds = j.value("seconds", 0.0);
    t.detail = j.value("detail", "");
    t.hosts = j.value("hosts", "loopback");  // runs before hosts were namespaces
    out.push_back(std::move(t));
  }
  return out;
}

// Per scenario and condition: the counts, the ratios' spread beside the
// scenario's floor, and the skew limit.
void PrintTable(const std::vector<Trial>& results, const std::vector<v1::Scenario>& scenarios) {
  std::map<std::string, const v1::Scenario*> sc;
  for (const auto& s : scenarios) sc[s.id()] = &s;
  std::printf("| scenario | condition | floor | skew max | accepted: false fails | accepted ratio min / median | "
              "wrong: false passes | wrong ratio median / max |\n|---|---|---|---|---|---|---|---|\n");
  std::map<std::pair<std::string, std::string>, std::vector<const Trial*>> by;
  for (const auto& t : results) by[{t.scenario, t.condition}].push_back(&t);
  int ff = 0, fp = 0, acc_n = 0, wrong_n = 0;
  for (const auto& [key, ts] : by) {
    int acc = 0, acc_fail = 0, wrong = 0, wrong_pass = 0;
    std::vector<double> ra, rw;
    for (const auto* t : ts) {
      if (t->fix == "accepted") {
        ++acc;
        acc_fail += t->passed ? 0 : 1;
        ra.push_back(t->ratio);
      } else {
        ++wrong;
        wrong_pass += t->passed ? 1 : 0;
        rw.push_back(t->ratio);
      }
    }
    ff += acc_fail;
    fp += wrong_pass;
    acc_n += acc;
    wrong_n += wrong;
    const v1::Scenario* s = sc.count(key.first) ? sc[key.first] : nullptr;
    std::printf("| %s | %s | %.2f | %.2f | %d/%d | %.2f / %.2f | %d/%d | %.2f / %.2f |\n", key.first.c_str(),
                key.second.c_str(), s ? s->verify().throughput_vs_baseline_min() : 0.0,
                s ? s->verify().rank_step_skew_max() : 0.0, acc_fail, acc,
                ra.empty() ? 0.0 : *std::min_element(ra.begin(), ra.end()), Median(ra), wrong_pass, wrong,
                Median(rw), rw.empty() ? 0.0 : *std::max_element(rw.begin(), rw.end()));
  }
  std::printf("\nfalse fails %d of %d accepted fixes, false passes %d of %d wrong fixes\n", ff, acc_n, fp, wrong_n);
  // Drills judged on a ceiling beside the floor (the numerics drills' loss
  // ratio, the pipeline drills' bubble): its spread beside the ceiling.
  auto ceiling_table = [&](const char* name, auto ceiling, double Trial::*value) {
    bool header = false;
    for (const auto& [key, ts] : by) {
      const v1::Scenario* s = sc.count(key.first) ? sc[key.first] : nullptr;
      const double max = s == nullptr ? 0 : ceiling(s->verify());
      if (max <= 0) continue;
      if (!header) {
        std::printf(
            "\n| scenario | condition | %s max | accepted %s median / max | wrong %s min / median "
            "|\n|---|---|---|---|---|\n",
            name, name, name);
        header = true;
      }
      std::vector<double> a, w;
      for (const auto* t : ts) (t->fix == "accepted" ? a : w).push_back(t->*value);
      std::printf("| %s | %s | %.2f | %.3f / %.3f | %.3f / %.3f |\n", key.first.c_str(), key.second.c_str(),
                  max, Median(a), a.empty() ? 0.0 : *std::max_element(a.begin(), a.end()),
                  w.empty() ? 0.0 : *std::min_element(w.begin(), w.end()), Median(w));
    }
  };
  ceiling_table(
      "loss ratio", [](const v1::VerifySpec& v) { return v.loss_vs_baseline_max(); }, &Trial::loss_ratio);
  ceiling_table(
      "bubble", [](const v1::VerifySpec& v) { return v.has_pp_bubble_max() ? v.pp_bubble_max() : 0.0; },
      &Trial::bubble);
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 10;
  int64_t seed0 = 5000;
  std::string out_path = "grading.jsonl", only, scenario_dir = DefaultScenarioDir();
  std::vector<std::string> conditions = {"idle", "burner"}, report;
  bool resume = false;
  std::string hosts = "auto";
  CLI::App app{"grading_reliability: false-fail and false-pass counts of verification, per scenario"};
  app.add_option("--trials", trials, "sessions per scenario, fix and condition")->capture_default_str();
  app.add_option("--seed", seed0, "first seed")->capture_default_str();
  app.add_option("--out", out_path, "JSON lines, one per trial (appended)")->capture_default_str();
  app.add_option("--scenario", only, "only this scenario");
  app.add_option("--scenarios", scenario_dir, "scenario directory")->capture_default_str();
  app.add_option("--conditions", conditions, "idle and/or burner")->capture_default_str();
  app.add_option("--hosts", hosts, "the controller's --hosts (auto | netns | loopback)")->capture_default_str();
  app.add_flag("--resume", resume, "skip the trials --out already holds (a run taken in parts)");
  app.add_option("--report", report, "print the table of these JSON-lines files and exit (no trials)");
  CLI11_PARSE(app, argc, argv);

  auto all = scenario::LoadScenarioDir(scenario_dir);
  if (!all.ok()) {
    std::fprintf(stderr, "grading_reliability: %s\n", all.status().message().c_str());
    return 2;
  }
  if (!report.empty()) {
    std::vector<Trial> results;
    for (const auto& f : report) {
      auto got = ReadTrials(f);
      if (got.empty()) std::fprintf(stderr, "grading_reliability: no trials in %s\n", f.c_str());
      results.insert(results.end(), got.begin(), got.end());
    }
    PrintTable(results, *all);
    return 0;
  }
  std::vector<Trial> results = resume ? ReadTrials(out_path) : std::vector<Trial>{};
  auto have = [&](const std::string& scenario, const std::string& condition, int64_t seed, bool accepted) {
    for (const auto& t : results)
      if (t.scenario == scenario && t.condition == condition && t.seed == seed &&
          t.fix == (accepted ? "accepted" : "wrong"))
        return true;
    return false;
  };
  bench::BenchController ctl(scenario_dir, {"--hosts", hosts});
  if (!ctl.ok()) {
    std::fprintf(stderr, "grading_reliability: the controller did not start; see %s/controller.log\n", ctl.dir().c_str());
    return 1;
  }
  cli::DrillClient client(ctl.addr(), std::chrono::seconds(30));
  client.SetToken(cli::ReadOwnerToken(ctl.dir()));
  auto key = controller::LoadOrCreateDrawKey(ctl.dir() + "/draw.key");
  if (!key.ok()) {
    std::fprintf(stderr, "grading_reliability: %s\n", key.status().message().c_str());
    return 1;
  }
  std::ofstream out(out_path, std::ios::app);
  for (const auto& condition : conditions) {
    const pid_t burner = condition == "burner" ? StartBurner(std::chrono::hours(12)) : -1;
    for (const auto& sc : *all) {
      if (!only.empty() && sc.id() != only) continue;
      for (int i = 0; i < trials; ++i) {
        for (bool accepted : {true, false}) {
          if (have(sc.id(), condition, seed0 + i, accepted)) continue;
          Trial t = Play(client, sc, seed0 + i, accepted, condition, *key);
          t.hosts = ctl.hosts_mode();
          results.push_back(t);
          out << ToJson(t).dump() << std::endl;
          std::fprintf(stderr, "%s %s %s seed %lld: %s ratio %.2f skew %.2f (%.0f s)\n", condition.c_str(),
                       sc.id().c_str(), t.fix.c_str(), static_cast<long long>(t.seed),
                       t.passed ? "PASS" : "FAIL", t.ratio, t.skew, t.seconds);
        }
      }
    }
    if (burner > 0) {
      kill(burner, SIGKILL);
      waitpid(burner, nullptr, 0);
    }
  }
  PrintTable(results, *all);
  return 0;
}
