// The session manager's state machine driven end to end over a real gRPC
// AgentLink, with in-process stand-in agents that answer RunJob with
// made-up step reports instead of training (the e2e tests train for real).
// Fast enough for a unit test, and the suite `make test-tsan` runs under
// ThreadSanitizer: concurrent ends and shutdowns, retired agents, lost ones.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "controller/agent_pool.h"
#include "controller/session_manager.h"
#include "firedrill/v1/agent.grpc.pb.h"

namespace firedrill::controller {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr char kToken[] = "unit-test-pool-token-0123456789";

// A stand-in agent: registers, and answers each RunJob with a step report
// every 2 ms until max_steps or StopJob, then FINISHED. It never trains.
class StandIn {
 public:
  StandIn(const std::string& addr, std::string id, std::string host) : id_(std::move(id)), host_(std::move(host)) {
    channel_ = grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
    stub_ = v1::AgentLink::NewStub(channel_);
    stream_ = stub_->Connect(&ctx_);
    v1::AgentMessage hello;
    hello.mutable_hello()->set_agent_id(id_);
    hello.mutable_hello()->set_host(host_);
    hello.mutable_hello()->set_join_token(kToken);
    Write(hello);
    reader_ = std::thread([this] { Read(); });
  }
  ~StandIn() { Disconnect(); }
  void Disconnect() {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (gone_) return;
      gone_ = true;
      stop_ = true;
    }
    ctx_.TryCancel();
    if (reader_.joinable()) reader_.join();
    if (job_.joinable()) job_.join();
  }
  // RunJob messages that arrived while a job was still running.
  int refused() const { return refused_; }
  int jobs() const { return jobs_; }
  // The job of every run this agent was given, in order.
  std::vector<v1::JobSpec> specs() {
    std::lock_guard<std::mutex> g(mu_);
    return specs_;
  }
  // The n-th job (1 = the first) fails at its step 3, and then this agent
  // goes away, as a crashed agent process would.
  void FailJob(int n) { fail_job_ = n; }
  // The n-th job waits after its step 5 until Release().
  void HoldJob(int n) { hold_job_ = n; }
  void Release() { held_ = false; }

 private:
  void Write(const v1::AgentMessage& m) {
    std::lock_guard<std::mutex> g(write_mu_);
    stream_->Write(m);
  }
  void Read() {
    v1::ControllerMessage msg;
    while (stream_->Read(&msg)) {
      if (msg.has_run()) {
        std::lock_guard<std::mutex> g(mu_);
        if (running_) {
          ++refused_;
          continue;
        }
        if (job_.joinable()) job_.join();
        running_ = true;
        stop_ = false;
        run_id_ = msg.run().run_id();
        ++jobs_;
        specs_.push_back(msg.run().job());
        job_ = std::thread([this, r = msg.run()] { Job(r); });
      } else if (msg.has_stop()) {
        std::lock_guard<std::mutex> g(mu_);
        if (msg.stop().run_id() == run_id_) stop_ = true;
      }
    }
  }
  void Job(const v1::RunJob& run) {
    auto event = [&](v1::JobEvent::Kind kind, const std::string& text) {
      v1::AgentMessage m;
      auto* e = m.mutable_event();
      e->set_run_id(run.run_id());
      e->set_rank(run.rank());
      e->set_kind(kind);
      e->set_message(text);
      Write(m);
    };
    if (run.rank() == 0) {
      v1::AgentMessage m;
      auto* e = m.mutable_event();
      e->set_run_id(run.run_id());
      e->set_kind(v1::JobEvent::STORE_READY);
      e->set_store_host("127.0.0.1");
      e->set_store_port(1);
      Write(m);
    }
    const bool fail = jobs_ == fail_job_;
    for (int64_t step = 0; step < run.max_steps(); ++step) {
      {
        std::lock_guard<std::mutex> g(mu_);
        if (stop_) break;
      }
      if (fail && step == 3) {
        {
          std::lock_guard<std::mutex> g(mu_);
          running_ = false;
        }
        event(v1::JobEvent::FAILED, "rank " + std::to_string(run.rank()) + ": stand-in failure");
        ctx_.TryCancel();
        return;
      }
      v1::AgentMessage m;
      m.mutable_steps()->set_run_id(run.run_id());
      auto* s = m.mutable_steps()->add_steps();
      s->set_rank(run.rank());
      s->set_step(step);
      s->set_step_ms(2);
      s->set_forward_ms(0.5);
      s->set_backward_ms(1);
      s->set_comm_ms(0.3);
      s->set_samples_per_s(1000);
      s->set_loss(2.0 - 0.001 * static_cast<double>(step));
      s->set_lr(0.1);
      s->set_loss_scale(65536);
      s->set_global_batch(8);
      s->set_thread_cpu_ns(1'500'000);
      s->mutable_cpu()->set_available(true);
      s->add_spans()->set_name("forward");
      s->set_start_unix_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count());
      Write(m);
      std::this_thread::sleep_for(2ms);
      while (step == 5 && jobs_ == hold_job_ && held_) {
        {
          std::lock_guard<std::mutex> g(mu_);
          if (stop_) break;
        }
        std::this_thread::sleep_for(2ms);
      }
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      running_ = false;  // free before the end event, as the real agent is
    }
    event(v1::JobEvent::FINISHED, "");
  }

  std::string id_, host_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::AgentLink::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ControllerMessage>> stream_;
  std::mutex write_mu_, mu_;
  std::thread reader_, job_;
  bool running_ = false, stop_ = false, gone_ = false;
  std::string run_id_;
  std::vector<v1::JobSpec> specs_;
  std::atomic<int> refused_{0}, jobs_{0};
  std::atomic<int> fail_job_{0};
  std::atomic<int> hold_job_{0};
  std::atomic<bool> held_{true};
};

v1::Scenario Drill() {
  v1::Scenario sc;
  sc.set_id("drive");
  sc.set_title("drive");
  auto* job = sc.mutable_job();
  job->set_world_size(2);
  job->set_steps(100);
  job->mutable_data()->set_batch_size(4);
  job->mutable_comm()->set_timeout_s(5);
  job->mutable_comm()->set_backend("gloo");
  job->mutable_model()->set_kind("mlp");
  job->mutable_model()->set_input_dim(8);
  job->mutable_model()->set_hidden(8);
  job->mutable_model()->set_layers(1);
  job->mutable_model()->set_num_classes(2);
  job->mutable_optim()->set_kind("sgd");
  job->mutable_optim()->set_lr(0.1);
  job->set_precision("fp32");
  auto* f = sc.add_faults();
  f->set_kind("straggler");
  f->mutable_target()->mutable_host_of_rank()->set_value(1);
  f->mutable_trigger()->mutable_step()->set_value(0);
  f->mutable_straggler()->set_slowdown(2);
  sc.mutable_answer()->set_cause("straggler");
  sc.mutable_answer()->add_culprit_ranks()->set_rank(1);
  sc.add_remediations()->add_actions()->mutable_replace_host()->set_rank(1);
  auto* v = sc.mutable_verify();
  v->set_warmup_steps(2);
  v->set_window_steps(10);
  v->set_throughput_vs_baseline_min(0.5);
  v->set_rank_step_skew_max(2);
  auto* r = sc.mutable_rubric();
  r->set_cause(40);
  r->set_culprit(20);
  r->set_fix(30);
  r->set_time(10);
  r->set_time_budget_s(600);
  return sc;
}

// Three ranks; the host of rank 1 goes down for good at step 3 of the
// drill's run, and the launcher may go on with `min_nodes` hosts.
v1::Scenario ShrinkDrill(const std::string& id, int min_nodes, int max_restarts = 1) {
  v1::Scenario sc = Drill();
  sc.set_id(id);
  sc.mutable_job()->set_world_size(3);
  sc.mutable_job()->mutable_elastic()->set_max_restarts(max_restarts);
  sc.mutable_job()->mutable_elastic()->set_min_nodes(min_nodes);
  sc.clear_faults();
  auto* f = sc.add_faults();
  f->set_kind("rank_crash");
  f->mutable_target()->mutable_host_of_rank()->set_value(1);
  f->mutable_trigger()->mutable_step()->set_value(3);
  f->mutable_rank_crash()->set_stays_down(true);
  sc.mutable_answer()->Clear();
  sc.mutable_answer()->set_cause("rank-crash");
  sc.clear_remediations();
  sc.add_remediations()->add_actions()->mutable_set()->set_key("comm.timeout_s");
  return sc;
}

// A language model whose deploy raised the per-rank batch from 4 to 8 (16
// sequences a step on two ranks). `open`: the owners let a fix split the
// batch and keep the deployed one; otherwise the batch is closed.
v1::Scenario BatchDrill(const std::string& id, bool open) {
  v1::Scenario sc = Drill();
  sc.set_id(id);
  auto* m = sc.mutable_job()->mutable_model();
  m->Clear();
  m->set_kind("gpt-tiny");
  m->set_hidden(16);
  m->set_layers(2);
  m->set_heads(2);
  m->set_seq_len(8);
  sc.clear_faults();
  auto* f = sc.add_faults();
  f->set_kind("deploy_change");
  f->mutable_target()->set_all_ranks(true);
  f->mutable_trigger()->mutable_step()->set_value(0);
  auto* kv = f->mutable_deploy_change()->add_set();
  kv->set_key("data.batch_size");
  kv->set_value("8");
  if (open) {
    sc.add_may_change("data.batch_size");
    sc.add_may_change("grad_accum_steps");
    sc.set_keep_global_batch(true);
  }
  return sc;
}

class SessionDriveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fd-drive-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto store = Store::Open(dir_ + "/firedrill.db");
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(*store);
    pool_.SetPoolToken(kToken);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&pool_);
    server_ = b.BuildAndStart();
    ASSERT_TRUE(server_ && port > 0);
    addr_ = "127.0.0.1:" + std::to_string(port);
    SessionManagerOptions opts;
    opts.state_dir = dir_;
    opts.local_launcher = false;
    opts.ckpt_bin = FIREDRILL_BIN_DIR "/firedrill-ckpt";
    opts.train_bin = FIREDRILL_BIN_DIR "/firedrill-train";
    v1::Scenario no_node = Drill();
    no_node.set_id("drive-no-node");
    no_node.mutable_tools()->set_node(false);
    no_node.mutable_tools()->set_metrics(false);
    no_node.mutable_tools()->set_checkpoints(false);
    sm_ = std::make_unique<SessionManager>(
        opts, store_.get(), &pool_,
        std::vector<v1::Scenario>{Drill(), no_node, ShrinkDrill("drive-shrink", 2),
                                  ShrinkDrill("drive-wait", 3), ShrinkDrill("drive-no-restart", 2, 0),
                                  BatchDrill("drive-batch", true), BatchDrill("drive-gpt", false)});
    ASSERT_TRUE(sm_->Init().ok());
  }
  void TearDown() override {
    sm_->Shutdown();
    agents_.clear();
    pool_.CloseAll();
    server_->Shutdown(std::chrono::system_clock::now() + 2s);
    sm_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  StandIn& Agent(const std::string& id, const std::string& host) {
    agents_.push_back(std::make_unique<StandIn>(addr_, id, host));
    return *agents_.back();
  }
  void WaitAgents(size_t n) {
    for (int i = 0; i < 500 && pool_.Connected().size() < n; ++i) std::this_thread::sleep_for(10ms);
    ASSERT_EQ(pool_.Connected().size(), n);
  }
  // Polls the session's state until `want` (or a terminal state).
  std::string WaitState(const std::string& id, SessionState want, int seconds = 30) {
    std::string state;
    for (int i = 0; i < seconds * 50; ++i) {
      auto st = sm_->GetStatus(id);
      if (st.ok()) state = st->session().state();
      if (state == Name(want) || TerminalState(state)) return state;
      std::this_thread::sleep_for(20ms);
    }
    return state;
  }
  // Applies a fix of one setting and waits for the session's score.
  StatusOr<v1::ScoreReport> FixAndScore(const std::string& id, const std::string& key,
                                        const std::string& value) {
    v1::ApplyFixRequest fix;
    fix.set_session_id(id);
    auto* kv = fix.add_settings();
    kv->set_key(key);
    kv->set_value(value);
    if (auto applied = sm_->Fix(fix); !applied.ok()) return applied.status();
    EXPECT_EQ(WaitState(id, SessionState::kScored, 60), Name(SessionState::kScored));
    return sm_->GetScore(id);
  }
  // Every run after the baseline and the main run (the restart's,
  // verification's healthy and fixed sides alike) at world size `world`.
  static void ExpectLaterRunsAtWorld(StandIn& a, int world) {
    const auto runs = a.specs();
    ASSERT_GE(runs.size(), 3u);
    for (size_t i = 2; i < runs.size(); ++i) EXPECT_EQ(runs[i].world_size(), world) << "run " << i + 1;
  }
  // The message of the session's first event of `kind`, once there is one
  // (empty after about 10 s without).
  std::string WaitEvent(const std::string& id, const std::string& kind) {
    for (int i = 0; i < 1000; ++i) {
      auto st = sm_->GetStatus(id);
      EXPECT_TRUE(st.ok());
      if (!st.ok()) return "";
      for (const auto& e : st->events())
        if (e.kind() == kind) return e.message();
      std::this_thread::sleep_for(10ms);
    }
    return "";
  }
  std::string StartRunning(const std::string& scenario = "drive") {
    v1::StartSessionRequest req;
    req.set_scenario_id(scenario);
    req.set_seed(3);
    auto info = sm_->Start(req);
    EXPECT_TRUE(info.ok()) << info.status().message();
    if (!info.ok()) return "";
    EXPECT_EQ(WaitState(info->session_id(), SessionState::kRunning), Name(SessionState::kRunning));
    return info->session_id();
  }

  std::string dir_, addr_;
  std::unique_ptr<Store> store_;
  AgentPool pool_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<SessionManager> sm_;
  std::vector<std::unique_ptr<StandIn>> agents_;
};

TEST_F(SessionDriveTest, ASessionPlaysThroughToItsScore) {
  Agent("a0", "node-0");
  Agent("a1", "node-1");
  Agent("spare", "node-2");
  WaitAgents(3);
  const std::string id = StartRunning();
  v1::SubmitDiagnosisRequest d;
  d.set_session_id(id);
  d.set_cause("straggler");
  d.add_culprit_ranks(1);
  auto dr = sm_->Diagnose(d);
  ASSERT_TRUE(dr.ok()) << dr.status().message();
  EXPECT_EQ(dr->diagnosis_id(), 1);
  auto sealed = sm_->GetScore(id);
  ASSERT_TRUE(sealed.ok());
  EXPECT_FALSE(sealed->final());
  EXPECT_EQ(sealed->items_size(), 0);
  v1::ApplyFixRequest fix;
  fix.set_session_id(id);
  fix.add_replace_host_ranks(1);
  ASSERT_TRUE(sm_->Fix(fix).ok());
  EXPECT_EQ(WaitState(id, SessionState::kScored), Name(SessionState::kScored));
  auto score = sm_->GetScore(id);
  ASSERT_TRUE(score.ok());
  EXPECT_TRUE(score->final());
  EXPECT_TRUE(score->verification().passed()) << score->verification().detail();
  // The stand-ins' pairs are alike: two of three decide.
  EXPECT_EQ(score->verification().pairs_size(), 2);
  EXPECT_NE(score->verification().detail().find("decided after 2 of 3 pairs"), std::string::npos)
      << score->verification().detail();
  EXPECT_EQ(score->answer_cause(), "straggler");
  EXPECT_EQ(score->total(), 100) << score->DebugString();
  // The faulty run's curves outlive the host that was replaced, under the
  // name of the host they ran on.
  v1::GetMetricsRequest mr;
  mr.set_session_id(id);
  mr.set_run("main");
  auto main_run = sm_->GetMetrics(mr);
  ASSERT_TRUE(main_run.ok()) << main_run.status().message();
  ASSERT_EQ(main_run->ranks_size(), 2);
  EXPECT_GT(main_run->ranks(1).rows_size(), 0) << "the replaced rank's curve";
  EXPECT_EQ(main_run->ranks(1).host(), "node-1");
}

// Only the faulty run writes the job's checkpoints. Verification's runs
// leave them as they were: each run checkpoints into a scratch directory of
// its own, and a resume from "latest" is resolved once, before the first
// pair (here to none: the job's directory has no valid checkpoint).
TEST_F(SessionDriveTest, VerificationRunsCheckpointApartAndResumeFromOnePoint) {
  StandIn& a0 = Agent("a0", "node-0");
  Agent("a1", "node-1");
  Agent("spare", "node-2");
  WaitAgents(3);
  const std::string id = StartRunning();
  auto st = sm_->GetStatus(id);
  ASSERT_TRUE(st.ok());
  const std::string job_dir = st->job().checkpoint().dir();
  ASSERT_FALSE(job_dir.empty());
  v1::ApplyFixRequest fix;
  fix.set_session_id(id);
  fix.add_replace_host_ranks(1);
  auto* kv = fix.add_settings();
  kv->set_key("checkpoint.resume_from");
  kv->set_value("latest");
  ASSERT_TRUE(sm_->Fix(fix).ok());
  EXPECT_EQ(WaitState(id, SessionState::kScored), Name(SessionState::kScored));
  const auto specs = a0.specs();
  ASSERT_EQ(specs.size(), 2u + 4u) << "baseline, main, then two pairs (alike: they decide)";
  EXPECT_NE(specs[0].checkpoint().dir().find("/baseline-checkpoints"), std::string::npos)
      << "the baseline's are not the drill's: " << specs[0].checkpoint().dir();
  EXPECT_EQ(specs[1].checkpoint().dir(), job_dir) << "the faulty run writes the job's own";
  std::set<std::string> dirs;
  for (size_t i = 2; i < specs.size(); ++i) {
    const auto& ck = specs[i].checkpoint();
    EXPECT_NE(ck.dir().find("/verify-checkpoints/pair-"), std::string::npos) << ck.dir();
    EXPECT_EQ(ck.dir().rfind(job_dir, 0), std::string::npos) << "not under the job's own directory: " << ck.dir();
    EXPECT_EQ(ck.resume_from(), "") << "latest, resolved once: nothing valid to resume from";
    dirs.insert(ck.dir());
  }
  EXPECT_EQ(dirs.size(), 4u) << "one directory per run";
}

// `firedrill trace` and `firedrill node` read the same step reports; each
// gets its own fields, and a drill that does not offer the node view keeps
// the CPU counters out of the trace too.
TEST_F(SessionDriveTest, TraceAndNodeGetTheirOwnFieldsAndADrillCanWithholdTheNodeView) {
  for (int i = 0; i < 4; ++i) Agent("a" + std::to_string(i), "node-" + std::to_string(i));
  WaitAgents(4);
  auto trace = [&](const std::string& id, bool node) {
    v1::GetTraceRequest req;
    req.set_session_id(id);
    req.set_node(node);
    // Until every rank has reported a step (the first to report makes the
    // trace answer).
    StatusOr<v1::TraceResponse> tr = FailedPrecondition("no steps yet");
    for (int i = 0; i < 250; ++i) {
      tr = sm_->GetTrace(req);
      if (!tr.ok() && tr.status().message().find("no steps") == std::string::npos) break;
      if (tr.ok() && std::all_of(tr->ranks().begin(), tr->ranks().end(),
                                 [](const v1::RankTrace& r) { return r.steps_size() > 0; }))
        break;
      std::this_thread::sleep_for(20ms);
    }
    return tr;
  };
  const std::string id = StartRunning();
  auto full = trace(id, false);
  ASSERT_TRUE(full.ok()) << full.status().message();
  ASSERT_GT(full->ranks(0).steps_size(), 0);
  EXPECT_TRUE(full->ranks(0).steps(0).cpu().available());
  EXPECT_GT(full->ranks(0).steps(0).spans_size(), 0);
  auto node = trace(id, true);
  ASSERT_TRUE(node.ok()) << node.status().message();
  ASSERT_GT(node->ranks(0).steps_size(), 0);
  EXPECT_TRUE(node->ranks(0).steps(0).cpu().available());
  EXPECT_EQ(node->ranks(0).steps(0).thread_cpu_ns(), 1'500'000);
  EXPECT_EQ(node->ranks(0).steps(0).spans_size(), 0) << "the node view carries no timeline";
  ASSERT_TRUE(sm_->End(id).ok());
  EXPECT_TRUE(TerminalState(WaitState(id, SessionState::kEnded)));

  const std::string quiet = StartRunning("drive-no-node");
  auto refused = trace(quiet, true);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("does not offer node"), std::string::npos) << refused.status().message();
  auto plain = trace(quiet, false);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  ASSERT_GT(plain->ranks(0).steps_size(), 0);
  EXPECT_FALSE(plain->ranks(0).steps(0).has_cpu()) << "no CPU counters by way of the trace either";
  EXPECT_EQ(plain->ranks(0).steps(0).thread_cpu_ns(), 0);
  EXPECT_GT(plain->ranks(0).steps(0).spans_size(), 0);
}

// `firedrill metrics`: the run in progress, the baseline kept after it
// ended, a range, and a drill that withholds the tool.
TEST_F(SessionDriveTest, MetricsShowTheCurrentRunAndKeepTheBaseline) {
  for (int i = 0; i < 2; ++i) Agent("a" + std::to_string(i), "node-" + std::to_string(i));
  WaitAgents(2);
  const std::string id = StartRunning();
  v1::GetMetricsRequest req;
  req.set_session_id(id);
  StatusOr<v1::MetricsResponse> now = FailedPrecondition("not yet");
  for (int i = 0; i < 250; ++i) {  // until both ranks have a few steps
    now = sm_->GetMetrics(req);
    if (now.ok() && now->ranks_size() == 2 && now->ranks(0).rows_size() >= 5 && now->ranks(1).rows_size() >= 5)
      break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(now.ok()) << now.status().message();
  EXPECT_EQ(now->run(), "main");
  EXPECT_EQ(now->stride(), 1);
  ASSERT_GE(now->ranks(1).rows_size(), 5);
  EXPECT_EQ(now->ranks(1).host(), "node-1");
  EXPECT_EQ(now->ranks(1).rows(0).step(), 0);
  EXPECT_EQ(now->ranks(1).rows(4).loss(), 2.0 - 0.004);

  req.set_run("baseline");
  auto base = sm_->GetMetrics(req);
  ASSERT_TRUE(base.ok()) << base.status().message();
  EXPECT_EQ(base->run(), "baseline");
  ASSERT_EQ(base->ranks_size(), 2);
  EXPECT_EQ(base->ranks(0).rows_size(), 12) << "warm-up + window: the whole baseline";
  EXPECT_EQ(base->ranks(0).rows(3).lr(), 0) << "the healthy job's settings are not shown";
  EXPECT_EQ(base->ranks(0).rows(3).loss(), 2.0 - 0.003) << "what it measured is";
  // A point budget thins every rank alike.
  v1::GetMetricsRequest few = req;
  few.set_max_points(5);
  auto thin = sm_->GetMetrics(few);
  ASSERT_TRUE(thin.ok()) << thin.status().message();
  EXPECT_EQ(thin->stride(), 4);
  ASSERT_EQ(thin->ranks(0).rows_size(), 3);  // steps 0, 4, 8
  EXPECT_EQ(thin->ranks(1).rows(2).step(), 8);
  few.set_max_points(20000);
  EXPECT_EQ(sm_->GetMetrics(few).status().code(), StatusCode::kInvalidArgument);
  req.set_from_step(3);
  req.set_to_step(5);
  auto part = sm_->GetMetrics(req);
  ASSERT_TRUE(part.ok());
  ASSERT_EQ(part->ranks(0).rows_size(), 2);
  EXPECT_EQ(part->ranks(0).rows(0).step(), 3);

  req.set_run("verify");
  EXPECT_EQ(sm_->GetMetrics(req).status().code(), StatusCode::kInvalidArgument);
  req.set_run("");
  req.set_from_step(5);
  req.set_to_step(5);
  EXPECT_EQ(sm_->GetMetrics(req).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(sm_->End(id).ok());
  EXPECT_TRUE(TerminalState(WaitState(id, SessionState::kEnded)));

  const std::string quiet = StartRunning("drive-no-node");
  v1::GetMetricsRequest q;
  q.set_session_id(quiet);
  auto refused = sm_->GetMetrics(q);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("does not offer metrics"), std::string::npos) << refused.status().message();
}

// While the healthy baseline runs, nothing a learner reads shows its
// settings (lr, loss scale, global batch): beside the deployed config they
// would show what the fault changed. Once the faulty run starts they show.
TEST_F(SessionDriveTest, TheBaselinesSettingsAreWithheldWhileItRuns) {
  StandIn& a0 = Agent("a0", "node-0");
  StandIn& a1 = Agent("a1", "node-1");
  WaitAgents(2);
  a0.HoldJob(1);
  a1.HoldJob(1);
  v1::StartSessionRequest start;
  start.set_scenario_id("drive");
  start.set_seed(3);
  auto info = sm_->Start(start);
  ASSERT_TRUE(info.ok()) << info.status().message();
  const std::string id = info->session_id();
  StatusOr<v1::SessionStatus> st = FailedPrecondition("not yet");
  for (int i = 0; i < 1500; ++i) {  // both ranks at their held step
    st = sm_->GetStatus(id);
    if (st.ok() && st->ranks_size() == 2 && st->ranks(0).step() == 5 && st->ranks(1).step() == 5) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(st.ok()) << st.status().message();
  ASSERT_EQ(st->session().state(), "baseline");
  ASSERT_EQ(st->ranks(1).step(), 5);
  for (const auto& r : st->ranks()) {
    EXPECT_EQ(r.lr(), 0) << "rank " << r.rank();
    EXPECT_EQ(r.loss_scale(), 0) << "rank " << r.rank();
    EXPECT_EQ(r.global_batch(), 0) << "rank " << r.rank();
    EXPECT_GT(r.samples_per_s(), 0) << "what it measures shows";
  }
  EXPECT_EQ(st->global_batch(), 2 * 4) << "the deployed job's";
  // Nor by way of the trace, which would also show what the settings make
  // of a step (bucket sizes): no timeline of the healthy job at all.
  v1::GetTraceRequest tr;
  tr.set_session_id(id);
  auto trace = sm_->GetTrace(tr);
  EXPECT_EQ(trace.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(trace.status().message().find("healthy comparison job"), std::string::npos) << trace.status().message();
  v1::GetMetricsRequest mr;
  mr.set_session_id(id);
  auto now = sm_->GetMetrics(mr);
  ASSERT_TRUE(now.ok()) << now.status().message();
  EXPECT_EQ(now->run(), "baseline");
  EXPECT_EQ(now->withheld_size(), 3);
  ASSERT_GT(now->ranks(0).rows_size(), 0);
  EXPECT_EQ(now->ranks(0).rows(0).lr(), 0) << "nor by way of the metrics";
  a0.Release();
  a1.Release();
  ASSERT_EQ(WaitState(id, SessionState::kRunning), Name(SessionState::kRunning));
  for (int i = 0; i < 500; ++i) {  // the faulty run's first reports
    st = sm_->GetStatus(id);
    if (st.ok() && st->ranks_size() == 2 && st->ranks(0).window_steps() > 0 && st->run().kind() == "main") break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->ranks(0).lr(), 0.1) << "the faulty run's own settings show";
  EXPECT_EQ(st->ranks(0).global_batch(), 8);
  now = sm_->GetMetrics(mr);
  ASSERT_TRUE(now.ok()) << now.status().message();
  EXPECT_EQ(now->withheld_size(), 0);
  EXPECT_TRUE(sm_->GetTrace(tr).ok()) << "the drill's own job's timeline";
  ASSERT_TRUE(sm_->End(id).ok());
}

// `firedrill ckpt list|verify` run the real checkpoint tool on the job's
// checkpoint directory: here one torn checkpoint (a manifest that does not
// parse) among none valid.
TEST_F(SessionDriveTest, CheckpointListingVerifiesWithTheCheckpointTool) {
  for (int i = 0; i < 2; ++i) Agent("a" + std::to_string(i), "node-" + std::to_string(i));
  WaitAgents(2);
  const std::string id = StartRunning();
  auto st = sm_->GetStatus(id);
  ASSERT_TRUE(st.ok());
  const std::string dir = st->job().checkpoint().dir();
  ASSERT_FALSE(dir.empty());
  v1::ListCheckpointsRequest req;
  req.set_session_id(id);
  auto none = sm_->ListCheckpoints(req);
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->dir(), dir);
  EXPECT_EQ(none->checkpoints_size(), 0);

  fs::create_directories(dir + "/step-10");
  { std::ofstream(dir + "/step-10/manifest.json") << "{not json"; }
  auto one = sm_->ListCheckpoints(req);
  ASSERT_TRUE(one.ok()) << one.status().message();
  ASSERT_EQ(one->checkpoints_size(), 1);
  EXPECT_EQ(one->checkpoints(0).step(), 10);
  EXPECT_FALSE(one->checkpoints(0).valid());
  EXPECT_NE(one->checkpoints(0).reason().find("manifest"), std::string::npos) << one->checkpoints(0).reason();
  EXPECT_EQ(one->checkpoints(0).steps_lost(), std::max<int64_t>(0, one->steps_done() - 10));

  v1::VerifyCheckpointRequest v;
  v.set_session_id(id);
  v.set_step(10);
  auto bad = sm_->VerifyCheckpoint(v);
  ASSERT_TRUE(bad.ok()) << bad.status().message();
  EXPECT_FALSE(bad->valid());
  EXPECT_NE(bad->detail().find("manifest"), std::string::npos) << bad->detail();
  v.set_step(99);
  EXPECT_EQ(sm_->VerifyCheckpoint(v).status().code(), StatusCode::kNotFound);
  // A resume from a checkpoint that is not there is refused before it
  // spends the session's one fix.
  v1::ApplyFixRequest fix;
  fix.set_session_id(id);
  auto* set = fix.add_settings();
  set->set_key("checkpoint.resume_from");
  set->set_value(dir + "/step-99");
  auto refused = sm_->Fix(fix);
  EXPECT_EQ(refused.status().code(), StatusCode::kNotFound) << refused.status().message();
  EXPECT_NE(refused.status().message().find("ckpt list"), std::string::npos);
  ASSERT_TRUE(sm_->End(id).ok());
  EXPECT_TRUE(TerminalState(WaitState(id, SessionState::kEnded)));

  const std::string quiet = StartRunning("drive-no-node");
  v1::ListCheckpointsRequest q;
  q.set_session_id(quiet);
  EXPECT_NE(sm_->ListCheckpoints(q).status().message().find("does not offer checkpoints"), std::string::npos);
}

// The global batch is what is trained: a fix that changes it through the
// layout (fewer data-parallel replicas) is a workload change where the
// drill does not open the batch, and where the owners chose the deployed
// batch no fix may train another, back to yesterday's included. Refusals
// spend nothing: the job runs on.
TEST_F(SessionDriveTest, AFixKeepsTheGlobalBatchWhateverTheLayout) {
  Agent("a0", "node-0");
  Agent("a1", "node-1");
  WaitAgents(2);
  auto fix = [&](const std::string& id, const std::vector<std::pair<std::string, std::string>>& kvs) {
    v1::ApplyFixRequest req;
    req.set_session_id(id);
    for (const auto& [k, v] : kvs) {
      auto* s = req.add_settings();
      s->set_key(k);
      s->set_value(v);
    }
    return sm_->Fix(req).status();
  };
  const std::string open = StartRunning("drive-batch");
  Status back = fix(open, {{"data.batch_size", "4"}});
  EXPECT_EQ(back.code(), StatusCode::kFailedPrecondition) << back.message();
  EXPECT_NE(back.message().find("global batch of 8 samples"), std::string::npos) << back.message();
  EXPECT_NE(back.message().find("chose the 16"), std::string::npos) << back.message();
  Status layout = fix(open, {{"parallel.pp", "2"}});
  EXPECT_EQ(layout.code(), StatusCode::kFailedPrecondition) << layout.message();
  auto st = sm_->GetStatus(open);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->session().state(), "running") << "a refused fix spends nothing";
  ASSERT_TRUE(sm_->End(open).ok());

  const std::string closed = StartRunning("drive-gpt");
  Status halved = fix(closed, {{"parallel.pp", "2"}});
  EXPECT_EQ(halved.code(), StatusCode::kFailedPrecondition) << halved.message();
  EXPECT_NE(halved.message().find(
                "the global batch (8 samples per optimiser step with this fix, 16 as deployed) is "
                "a workload setting"),
            std::string::npos)
      << halved.message();
  ASSERT_TRUE(sm_->End(closed).ok());
}

TEST_F(SessionDriveTest, ConcurrentEndsAndAShutdownEndTheSessionOnce) {
  Agent("a0", "node-0");
  Agent("a1", "node-1");
  WaitAgents(2);
  const std::string id = StartRunning();
  std::vector<std::thread> enders;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    enders.emplace_back([&] {
      auto r = sm_->End(id);
      if (r.ok() && r->state() == Name(SessionState::kEnded)) ++ok;
    });
  }
  enders.emplace_back([&] { sm_->Shutdown(); });
  for (auto& t : enders) t.join();
  EXPECT_EQ(ok.load(), 4);
  auto score = sm_->GetScore(id);
  ASSERT_TRUE(score.ok());
  EXPECT_TRUE(score->final()) << "an ended session is scored as it stands";
}

TEST_F(SessionDriveTest, ARemoteAgentThatWasReplacedGetsNoJobWhileItsOldOneRuns) {
  StandIn& a0 = Agent("a0", "node-0");
  StandIn& a1 = Agent("a1", "node-1");
  StandIn& spare = Agent("spare", "node-2");
  WaitAgents(3);
  const std::string id = StartRunning();
  v1::ApplyFixRequest fix;
  fix.set_session_id(id);
  fix.add_replace_host_ranks(1);
  ASSERT_TRUE(sm_->Fix(fix).ok());
  ASSERT_EQ(WaitState(id, SessionState::kScored), Name(SessionState::kScored));
  EXPECT_EQ(a0.refused() + a1.refused() + spare.refused(), 0) << "a busy agent was handed another job";
  EXPECT_GT(spare.jobs(), 0) << "the spare took rank 1";
}

TEST_F(SessionDriveTest, ARankWhoseAgentFailedAndLeftIsReplacedBeforeTheNextRun) {
  Agent("a0", "node-0");
  StandIn& a1 = Agent("a1", "node-1");
  Agent("spare", "node-2");
  WaitAgents(3);
  a1.FailJob(2);  // the main run (job 1 is the baseline)
  const std::string id = StartRunning();
  for (int i = 0; i < 500 && pool_.Connected().size() > 2; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(pool_.Connected().size(), 2u) << "rank 1's agent should have gone";
  v1::ApplyFixRequest fix;  // a fix that replaces no host: the gone agent must be replaced anyway
  fix.set_session_id(id);
  auto* s = fix.add_settings();
  s->set_key("comm.timeout_s");
  s->set_value("6");
  auto fixed = sm_->Fix(fix);
  ASSERT_TRUE(fixed.ok()) << StatusCodeName(fixed.status().code()) << ": " << fixed.status().message() << " id=" << id;
  EXPECT_EQ(WaitState(id, SessionState::kScored, 60), Name(SessionState::kScored));
  auto score = sm_->GetScore(id);
  ASSERT_TRUE(score.ok());
  EXPECT_TRUE(score->verification().done());
  EXPECT_EQ(score->verification().pairs_size(), 2) << score->verification().detail();
  auto st = sm_->GetStatus(id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->ranks(1).host(), "node-2") << "rank 1 moved to the spare agent's host";
}

// torchrun --nnodes=2:3: a host that does not come back leaves the job,
// which restarts on the hosts that are left with its ranks numbered anew,
// and is verified at that size.
TEST_F(SessionDriveTest, AHostThatStaysDownLeavesTheJobWhichRestartsSmallerAndIsVerifiedSo) {
  StandIn& a0 = Agent("a0", "node-0");
  StandIn& a1 = Agent("a1", "node-1");
  StandIn& a2 = Agent("a2", "node-2");
  WaitAgents(3);
  a1.FailJob(2);  // the main run (job 1 is the baseline): the host goes at step 3
  const std::string id = StartRunning("drive-shrink");
  const std::string restarted = WaitEvent(id, "job_restarted");
  EXPECT_NE(
      restarted.find("on the 2 hosts that are up (world size 3 -> 2, elastic.min_nodes 2; host(s) node-1 did "
                     "not come back)"),
      std::string::npos)
      << restarted;
  auto st = sm_->GetStatus(id);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->ranks_size(), 2);
  EXPECT_EQ(st->ranks(0).host(), "node-0");
  EXPECT_EQ(st->ranks(1).host(), "node-2") << "the hosts that are left, numbered in order";
  EXPECT_EQ(st->job().world_size(), 2);
  EXPECT_EQ(st->session().world_size(), 2);
  // A fix that changes nothing the drill is about.
  auto score = FixAndScore(id, "comm.timeout_s", "6");
  ASSERT_TRUE(score.ok()) << score.status().message();
  EXPECT_TRUE(score->verification().done()) << score->verification().detail();
  // Every run after the restart, verification's healthy and fixed sides
  // alike, ran at world size 2 on the two hosts that are left.
  ExpectLaterRunsAtWorld(a2, 2);
  EXPECT_EQ(a0.specs().size(), a2.specs().size());
  EXPECT_EQ(a1.jobs(), 2) << "the host that went down got no job after it";
}

TEST_F(SessionDriveTest, AJobThatNeedsEveryHostStaysDownWhenOneDoesNotComeBack) {
  Agent("a0", "node-0");
  StandIn& a1 = Agent("a1", "node-1");
  StandIn& a2 = Agent("a2", "node-2");
  WaitAgents(3);
  a1.FailJob(2);
  const std::string id = StartRunning("drive-wait");
  const std::string down = WaitEvent(id, "job_down");
  EXPECT_NE(
      down.find("cannot restart: host(s) node-1 did not come back, 2 of its 3 hosts are up and it needs 3 "
                "(elastic.min_nodes)"),
      std::string::npos)
      << down;
  EXPECT_EQ(a2.jobs(), 2) << "no restart was started";
  auto st = sm_->GetStatus(id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->ranks_size(), 3);
  // No fix brings the host back: the fixed job cannot run.
  // A fix that changes nothing the drill is about.
  auto score = FixAndScore(id, "comm.timeout_s", "6");
  ASSERT_TRUE(score.ok()) << score.status().message();
  EXPECT_FALSE(score->verification().passed());
  EXPECT_NE(score->verification().detail().find("the fixed job cannot run: host(s) node-1 did not come back"),
            std::string::npos)
      << score->verification().detail();
  EXPECT_EQ(a2.jobs(), 2) << "nothing ran on the hosts that are left";
}

// The fix came before the launcher went on without the host (here it has no
// restarts at all): the job goes on without it when the fix is applied.
TEST_F(SessionDriveTest, AFixBeforeTheRestartStillRunsWithoutTheHostThatStaysDown) {
  Agent("a0", "node-0");
  StandIn& a1 = Agent("a1", "node-1");
  StandIn& a2 = Agent("a2", "node-2");
  WaitAgents(3);
  a1.FailJob(2);
  const std::string id = StartRunning("drive-no-restart");
  for (int i = 0; i < 500 && pool_.Connected().size() > 2; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(pool_.Connected().size(), 2u) << "rank 1's agent should have gone";
  // A fix that changes nothing the drill is about.
  auto score = FixAndScore(id, "comm.timeout_s", "6");
  ASSERT_TRUE(score.ok()) << score.status().message();
  EXPECT_TRUE(score->verification().done()) << score->verification().detail();
  auto st = sm_->GetStatus(id);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->ranks_size(), 2);
  EXPECT_EQ(st->ranks(1).host(), "node-2");
  bool resized = false;
  for (const auto& e : st->events())
    resized =
        resized || (e.kind() == "job_resized" && e.message().find("world size 3 -> 2") != std::string::npos);
  EXPECT_TRUE(resized);
  ExpectLaterRunsAtWorld(a2, 2);
  EXPECT_EQ(a1.jobs(), 2) << "the host that went down got no job after it";
}

}  // namespace
}  // namespace firedrill::controller
