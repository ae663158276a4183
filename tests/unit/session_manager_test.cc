// The session manager without agents: with the local launcher off and no
// agent registered, a session's driver aborts at once, which is enough to see
// what Start() records for the job.
#include "controller/session_manager.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

namespace firedrill::controller {
namespace {

namespace fs = std::filesystem;

v1::Scenario TinyScenario(const std::string& id) {
  v1::Scenario sc;
  sc.set_id(id);
  sc.set_title("tiny");
  sc.mutable_job()->set_world_size(2);
  sc.mutable_job()->set_steps(10);
  sc.mutable_job()->mutable_data()->set_batch_size(4);
  return sc;
}

class SessionManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fd-sm-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    state_dir_ = tmpl;
    auto store = Store::Open(state_dir_ + "/firedrill.db");
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(*store);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(state_dir_, ec);
  }

  // Starts one session of `sc`, lets its driver finish (it aborts: no
  // agents), and returns the stored record.
  v1::SessionRecord StartAndStop(const v1::Scenario& sc) {
    AgentPool pool;
    SessionManagerOptions opts;
    opts.state_dir = state_dir_;
    opts.local_launcher = false;
    SessionManager sm(opts, store_.get(), &pool, {sc});
    v1::StartSessionRequest req;
    req.set_scenario_id(sc.id());
    req.set_seed(7);
    auto info = sm.Start(req);
    EXPECT_TRUE(info.ok()) << info.status().message();
    sm.Shutdown();
    auto recs = store_->LoadSessions();
    EXPECT_TRUE(recs.ok());
    for (const auto& r : *recs) {
      if (info.ok() && r.info().session_id() == info->session_id()) return r;
    }
    ADD_FAILURE() << "session not stored";
    return {};
  }

  std::string state_dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(SessionManagerTest, JobWithoutCheckpointDirGetsOneUnderTheSession) {
  const v1::SessionRecord rec = StartAndStop(TinyScenario("tiny"));
  const std::string dir = rec.job().checkpoint().dir();
  const fs::path want = fs::path(state_dir_) / "sessions" / rec.info().session_id() / "checkpoints";
  EXPECT_EQ(dir, want.lexically_normal().string());
  EXPECT_TRUE(fs::path(dir).is_absolute()) << dir;
  EXPECT_TRUE(fs::is_directory(dir)) << dir;
}

TEST_F(SessionManagerTest, RelativeStateDirStillGivesAnAbsoluteCheckpointDir) {
  struct RestoreCwd {
    fs::path dir = fs::current_path();
    ~RestoreCwd() { fs::current_path(dir); }
  } restore;
  fs::current_path(fs::path(state_dir_).parent_path());
  const std::string relative = fs::path(state_dir_).filename().string();
  AgentPool pool;
  SessionManagerOptions opts;
  opts.state_dir = relative;
  opts.local_launcher = false;
  const v1::Scenario sc = TinyScenario("tiny");
  std::string sid;
  {
    SessionManager sm(opts, store_.get(), &pool, {sc});
    v1::StartSessionRequest req;
    req.set_scenario_id(sc.id());
    auto info = sm.Start(req);
    ASSERT_TRUE(info.ok()) << info.status().message();
    sid = info->session_id();
    sm.Shutdown();
  }
  auto recs = store_->LoadSessions();
  ASSERT_TRUE(recs.ok());
  ASSERT_EQ(recs->size(), 1u);
  const std::string dir = (*recs)[0].job().checkpoint().dir();
  EXPECT_EQ(dir, (fs::path(state_dir_) / "sessions" / sid / "checkpoints").lexically_normal().string());
  EXPECT_TRUE(fs::is_directory(dir)) << dir;
}

TEST_F(SessionManagerTest, ScenarioCheckpointDirIsKept) {
  v1::Scenario sc = TinyScenario("tiny");
  const std::string own = state_dir_ + "/elsewhere";
  sc.mutable_job()->mutable_checkpoint()->set_dir(own);
  const v1::SessionRecord rec = StartAndStop(sc);
  EXPECT_EQ(rec.job().checkpoint().dir(), own);
  EXPECT_FALSE(fs::exists(fs::path(state_dir_) / "sessions"));
}

}  // namespace
}  // namespace firedrill::controller
