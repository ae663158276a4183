// The SQLite store: every table round-trips, what a call acknowledged is on
// disk when the process dies without closing anything, and a damaged
// database fails with an error that names the database and the session.
#include "controller/store.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace firedrill::controller {
namespace {

namespace fs = std::filesystem;
using google::protobuf::util::MessageDifferencer;

v1::SessionRecord MakeSession(const std::string& id, int64_t created = 1700000000000) {
  v1::SessionRecord r;
  v1::SessionInfo* info = r.mutable_info();
  info->set_session_id(id);
  info->set_scenario_id("throughput-halved");
  info->set_title("Throughput halved overnight");
  info->set_state("running");
  info->set_seed(42);
  info->set_created_unix_ms(created);
  info->set_world_size(4);
  info->set_total_score(0);
  info->set_max_score(100);
  r.set_answer_cause("straggler");
  r.add_answer_culprit_ranks(2);
  for (int i = 0; i < 4; ++i) r.add_hosts("node-" + std::to_string(i));
  r.set_run_started_unix_ms(created + 500);
  r.set_hints_used(1);
  r.set_next_host_index(4);
  return r;
}

v1::SessionEvent MakeEvent(int64_t ms, const std::string& kind, int rank, const std::string& msg) {
  v1::SessionEvent e;
  e.set_unix_ms(ms);
  e.set_kind(kind);
  e.set_rank(rank);
  e.set_message(msg);
  return e;
}

v1::ScoreReport MakeScore(const std::string& id, int total) {
  v1::ScoreReport r;
  r.set_session_id(id);
  r.set_scenario_id("throughput-halved");
  r.set_final(true);
  r.set_total(total);
  r.set_max_total(100);
  v1::ScoreItem* item = r.add_items();
  item->set_name("cause");
  item->set_points(40);
  item->set_max_points(40);
  item->set_reason("straggler, as in the answer key");
  r.set_answer_cause("straggler");
  r.add_answer_culprit_ranks(2);
  return r;
}

// Raw access for what the Store API does not expose: the mirrored columns,
// pragmas, and planting damage.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
    sqlite3_busy_timeout(db_, 5000);
  }
  ~RawDb() { sqlite3_close_v2(db_); }
  // First column of the first row as text ("" if none).
  std::string Query(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(db_);
    std::string out;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0)) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    }
    sqlite3_finalize(s);
    return out;
  }
  void Exec(const std::string& sql) {
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
  }

 private:
  sqlite3* db_ = nullptr;
};

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fd_store_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/state/firedrill.db";
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }

  std::unique_ptr<Store> OpenStore() {
    auto s = Store::Open(path_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  std::string dir_;
  std::string path_;
};

TEST_F(StoreTest, OpenCreatesParentDirectoriesAndSchema) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->path(), path_);
  EXPECT_TRUE(fs::exists(path_));
  RawDb raw(path_);
  EXPECT_EQ(raw.Query("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.Query("PRAGMA user_version"), "2");
  for (const char* table : {"sessions", "events", "diagnoses", "fixes", "scores"}) {
    EXPECT_EQ(
        raw.Query(std::string("SELECT name FROM sqlite_master WHERE type='table' AND name='") + table + "'"),
        table);
  }
  // Opening again is a no-op on the schema.
  store.reset();
  EXPECT_TRUE(OpenStore());
}

TEST_F(StoreTest, SessionRoundTripMirrorsInfoIntoColumns) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  v1::SessionRecord rec = MakeSession("s-1");
  ASSERT_TRUE(store->SaveSession(rec).ok());

  auto loaded = store->LoadSessions();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_TRUE(MessageDifferencer::Equals((*loaded)[0], rec));

  RawDb raw(path_);
  EXPECT_EQ(raw.Query("SELECT scenario_id FROM sessions WHERE id='s-1'"), "throughput-halved");
  EXPECT_EQ(raw.Query("SELECT state FROM sessions WHERE id='s-1'"), "running");
  EXPECT_EQ(raw.Query("SELECT seed FROM sessions WHERE id='s-1'"), "42");
  EXPECT_EQ(raw.Query("SELECT world_size FROM sessions WHERE id='s-1'"), "4");
  EXPECT_EQ(raw.Query("SELECT created_unix_ms FROM sessions WHERE id='s-1'"), "1700000000000");
}

TEST_F(StoreTest, SaveSessionUpdatesInPlaceAndKeepsItsChildren) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  v1::SessionRecord rec = MakeSession("s-1");
  ASSERT_TRUE(store->SaveSession(rec).ok());
  ASSERT_TRUE(store->AppendEvent("s-1", MakeEvent(1, "started", -1, "go")).ok());
  rec.mutable_info()->set_state("scored");
  rec.mutable_info()->set_total_score(87);
  // An update must not delete the row: the event's foreign key would object.
  Status st = store->SaveSession(rec);
  ASSERT_TRUE(st.ok()) << st.ToString();

  auto loaded = store->LoadSessions();
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].info().state(), "scored");
  EXPECT_EQ(RawDb(path_).Query("SELECT total_score FROM sessions WHERE id='s-1'"), "87");
  auto events = store->LoadEvents("s-1", 10);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 1u);
}

TEST_F(StoreTest, SessionsComeBackInCreationOrder) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->SaveSession(MakeSession("b", 2000)).ok());
  ASSERT_TRUE(store->SaveSession(MakeSession("a", 3000)).ok());
  ASSERT_TRUE(store->SaveSession(MakeSession("c", 1000)).ok());
  auto loaded = store->LoadSessions();
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->size(), 3u);
  EXPECT_EQ((*loaded)[0].info().session_id(), "c");
  EXPECT_EQ((*loaded)[1].info().session_id(), "b");
  EXPECT_EQ((*loaded)[2].info().session_id(), "a");
}

TEST_F(StoreTest, EventsComeBackOldestFirstLimitedToTheLastN) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->SaveSession(MakeSession("s-1")).ok());
  ASSERT_TRUE(store->SaveSession(MakeSession("s-2")).ok());
  for (int i = 0; i < 10; ++i) {
    // Timestamps deliberately out of order: insertion order is the timeline.
    ASSERT_TRUE(
        store->AppendEvent("s-1", MakeEvent(100 - i, "step", i % 4, "event " + std::to_string(i))).ok());
    ASSERT_TRUE(store->AppendEvent("s-2", MakeEvent(i, "other", -1, "noise")).ok());
  }
  auto last3 = store->LoadEvents("s-1", 3);
  ASSERT_TRUE(last3.ok()) << last3.status().ToString();
  ASSERT_EQ(last3->size(), 3u);
  EXPECT_EQ((*last3)[0].message(), "event 7");
  EXPECT_EQ((*last3)[1].message(), "event 8");
  EXPECT_EQ((*last3)[2].message(), "event 9");
  EXPECT_EQ((*last3)[2].unix_ms(), 91);
  EXPECT_EQ((*last3)[2].kind(), "step");
  EXPECT_EQ((*last3)[2].rank(), 1);

  auto all = store->LoadEvents("s-1", 100);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 10u);
  EXPECT_EQ((*all)[0].message(), "event 0");
  auto unlimited = store->LoadEvents("s-1", -1);
  ASSERT_TRUE(unlimited.ok());
  EXPECT_EQ(unlimited->size(), 10u);
  auto none = store->LoadEvents("nobody", 5);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(StoreTest, RowsForAnUnknownSessionAreRejected) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  Status st = store->AppendEvent("ghost", MakeEvent(1, "x", -1, "y"));
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find("ghost"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(path_), std::string::npos) << st.message();

  EXPECT_EQ(store->AddDiagnosis("ghost", {}, "", 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->SaveScore(MakeScore("ghost", 1), 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(store->SaveSession(v1::SessionRecord()).code(), StatusCode::kInvalidArgument);
}

v1::Finding MakeFinding(const std::string& cause, std::initializer_list<int> ranks) {
  v1::Finding f;
  f.set_cause(cause);
  for (int r : ranks) f.add_culprit_ranks(r);
  return f;
}

TEST_F(StoreTest, DiagnosesAreNumberedPerSessionAndKeepEveryFinding) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->SaveSession(MakeSession("s-1")).ok());
  ASSERT_TRUE(store->SaveSession(MakeSession("s-2")).ok());
  auto none = store->LoadDiagnoses("s-1");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  auto n1 = store->AddDiagnosis("s-1", {MakeFinding("data-loader-starvation", {})}, "data_ms is high", 1000);
  ASSERT_TRUE(n1.ok()) << n1.status().ToString();
  EXPECT_EQ(*n1, 1);
  // Another session's first is its own #1.
  auto other = store->AddDiagnosis("s-2", {MakeFinding("straggler", {1})}, "", 950);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, 1);
  auto n2 = store->AddDiagnosis("s-1", {MakeFinding("straggler", {2}), MakeFinding("padding-waste", {})},
                                "rank 2's busy time is 2.5x the median", 900);  // earlier clock, still #2
  ASSERT_TRUE(n2.ok());
  EXPECT_EQ(*n2, 2);

  auto all = store->LoadDiagnoses("s-1");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].number(), 1);
  EXPECT_EQ((*all)[1].number(), 2);
  ASSERT_EQ((*all)[1].findings_size(), 2);
  EXPECT_TRUE(MessageDifferencer::Equals((*all)[1].findings(0), MakeFinding("straggler", {2})));
  EXPECT_TRUE(MessageDifferencer::Equals((*all)[1].findings(1), MakeFinding("padding-waste", {})));
  EXPECT_EQ((*all)[1].note(), "rank 2's busy time is 2.5x the median");
  EXPECT_EQ((*all)[1].unix_ms(), 900);
  // The first finding is mirrored into columns for people reading the table.
  EXPECT_EQ(RawDb(path_).Query("SELECT culprit_ranks FROM diagnoses WHERE session_id='s-1' AND number=2"), "[2]");
  EXPECT_EQ(RawDb(path_).Query("SELECT culprit_ranks FROM diagnoses WHERE session_id='s-1' AND number=1"), "[]");
}

TEST_F(StoreTest, TheDatabaseIsReadableByItsOwnerOnly) {
  // It holds every session's answer key.
  ::umask(022);
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->SaveSession(MakeSession("s-1")).ok());
  for (const std::string& f : {path_, path_ + "-wal", path_ + "-shm"}) {
    struct stat st {};
    ASSERT_EQ(::stat(f.c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
  // A database that an older build left world-readable is tightened on open.
  store.reset();
  ::chmod(path_.c_str(), 0644);
  store = OpenStore();
  ASSERT_TRUE(store);
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(StoreTest, ASchemaOneDatabaseIsUpgradedWithItsDiagnoses) {
  {
    fs::create_directories(fs::path(path_).parent_path());
    std::ofstream(path_).flush();  // an empty file is an empty database
    RawDb raw(path_);
    raw.Exec(R"sql(
      CREATE TABLE sessions (id TEXT PRIMARY KEY, scenario_id TEXT NOT NULL, seed INTEGER, state TEXT NOT NULL,
        created_unix_ms INTEGER, updated_unix_ms INTEGER, world_size INTEGER, total_score INTEGER,
        record BLOB NOT NULL);
      CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
        unix_ms INTEGER, kind TEXT, rank INTEGER, message TEXT);
      CREATE TABLE diagnoses (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
        unix_ms INTEGER, cause TEXT, culprit_ranks TEXT, note TEXT);
      CREATE TABLE fixes (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
        unix_ms INTEGER, replace_host_ranks TEXT, settings TEXT, request BLOB);
      CREATE TABLE scores (session_id TEXT PRIMARY KEY REFERENCES sessions(id), unix_ms INTEGER, total INTEGER,
        max_total INTEGER, report BLOB);
      INSERT INTO sessions (id, scenario_id, state, record) VALUES ('old', 'x', 'scored', X'');
      INSERT INTO diagnoses (session_id, unix_ms, cause, culprit_ranks, note) VALUES ('old', 5, 'straggler', '[3]', 'n');
      INSERT INTO diagnoses (session_id, unix_ms, cause, culprit_ranks, note) VALUES ('old', 6, 'slow-link', '[]', '');
      PRAGMA user_version = 1;
    )sql");
  }
  auto store = OpenStore();
  ASSERT_TRUE(store);
  auto all = store->LoadDiagnoses("old");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].number(), 1);
  EXPECT_TRUE(MessageDifferencer::Equals((*all)[0].findings(0), MakeFinding("straggler", {3})));
  EXPECT_EQ((*all)[1].number(), 2);
  auto next = store->AddDiagnosis("old", {MakeFinding("no-fault", {})}, "", 7);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(*next, 3);
  EXPECT_EQ(RawDb(path_).Query("PRAGMA user_version"), "2");
}

TEST_F(StoreTest, FixesRoundTripInOrderWithJsonColumns) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->SaveSession(MakeSession("s-1")).ok());
  v1::ApplyFixRequest f1;
  f1.set_session_id("s-1");
  f1.add_replace_host_ranks(1);
  f1.add_replace_host_ranks(3);
  v1::ApplyFixRequest f2;
  f2.set_session_id("s-1");
  auto* kv = f2.add_settings();
  kv->set_key("comm.bucket_mb");
  kv->set_value("25");
  auto id1 = store->AddFix(f1, 10);
  auto id2 = store->AddFix(f2, 20);
  ASSERT_TRUE(id1.ok() && id2.ok()) << id1.status().ToString() << id2.status().ToString();
  EXPECT_GT(*id2, *id1);

  auto fixes = store->LoadFixes("s-1");
  ASSERT_TRUE(fixes.ok()) << fixes.status().ToString();
  ASSERT_EQ(fixes->size(), 2u);
  EXPECT_TRUE(MessageDifferencer::Equals((*fixes)[0], f1));
  EXPECT_TRUE(MessageDifferencer::Equals((*fixes)[1], f2));

  RawDb raw(path_);
  const std::string where = " FROM fixes WHERE id=";
  EXPECT_EQ(raw.Query("SELECT replace_host_ranks" + where + std::to_string(*id1)), "[1,3]");
  EXPECT_EQ(raw.Query("SELECT settings" + where + std::to_string(*id1)), "{}");
  EXPECT_EQ(raw.Query("SELECT settings" + where + std::to_string(*id2)), R"({"comm.bucket_mb":"25"})");
  EXPECT_EQ(raw.Query("SELECT unix_ms" + where + std::to_string(*id2)), "20");

  auto other = store->LoadFixes("s-2");
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->empty());
}

TEST_F(StoreTest, SaveScoreReplacesThePreviousScore) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->SaveSession(MakeSession("s-1")).ok());
  auto none = store->LoadScore("s-1");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  v1::ScoreReport provisional = MakeScore("s-1", 40);
  provisional.set_final(false);
  ASSERT_TRUE(store->SaveScore(provisional, 1).ok());
  v1::ScoreReport final_report = MakeScore("s-1", 87);
  ASSERT_TRUE(store->SaveScore(final_report, 2).ok());

  auto loaded = store->LoadScore("s-1");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_TRUE(loaded->has_value());
  EXPECT_TRUE(MessageDifferencer::Equals(**loaded, final_report));
  RawDb raw(path_);
  EXPECT_EQ(raw.Query("SELECT COUNT(*) FROM scores"), "1");
  EXPECT_EQ(raw.Query("SELECT total || '/' || max_total || '@' || unix_ms FROM scores"), "87/100@2");
}

TEST_F(StoreTest, EverythingSurvivesCloseAndReopen) {
  v1::SessionRecord rec = MakeSession("s-1");
  v1::ApplyFixRequest f;
  f.set_session_id("s-1");
  f.add_replace_host_ranks(2);
  v1::ScoreReport score = MakeScore("s-1", 87);
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->SaveSession(rec).ok());
    ASSERT_TRUE(store->AppendEvent("s-1", MakeEvent(5, "fault", 2, "rank 2 slowed")).ok());
    ASSERT_TRUE(store->AddDiagnosis("s-1", {MakeFinding("straggler", {2})}, "", 6).ok());
    ASSERT_TRUE(store->AddFix(f, 7).ok());
    ASSERT_TRUE(store->SaveScore(score, 8).ok());
  }  // destroyed: closed

  auto store = OpenStore();
  ASSERT_TRUE(store);
  auto sessions = store->LoadSessions();
  ASSERT_TRUE(sessions.ok());
  ASSERT_EQ(sessions->size(), 1u);
  EXPECT_TRUE(MessageDifferencer::Equals((*sessions)[0], rec));
  auto events = store->LoadEvents("s-1", 10);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].message(), "rank 2 slowed");
  auto diag = store->LoadDiagnoses("s-1");
  ASSERT_TRUE(diag.ok() && diag->size() == 1u);
  EXPECT_TRUE(MessageDifferencer::Equals((*diag)[0].findings(0), MakeFinding("straggler", {2})));
  auto fixes = store->LoadFixes("s-1");
  ASSERT_TRUE(fixes.ok());
  ASSERT_EQ(fixes->size(), 1u);
  EXPECT_TRUE(MessageDifferencer::Equals((*fixes)[0], f));
  auto loaded_score = store->LoadScore("s-1");
  ASSERT_TRUE(loaded_score.ok() && loaded_score->has_value());
  EXPECT_TRUE(MessageDifferencer::Equals(**loaded_score, score));
}

// The controller crashing: a child process writes through the Store and then
// dies without destructors, close or checkpoint. Every call that returned OK
// must be readable by the next process ("nothing acknowledged is lost").
class StoreCrashTest : public StoreTest, public ::testing::WithParamInterface<bool> {};

TEST_P(StoreCrashTest, AcknowledgedWritesSurviveAChildThatDies) {
  const bool use_sigkill = GetParam();
  const int kEvents = 25;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: no gtest assertions here; the exit code says what failed.
    auto store = Store::Open(path_);
    if (!store.ok()) _exit(10);
    if (!(*store)->SaveSession(MakeSession("crash-1")).ok()) _exit(11);
    for (int i = 0; i < kEvents; ++i) {
      if (!(*store)->AppendEvent("crash-1", MakeEvent(i, "step", 0, std::to_string(i))).ok()) _exit(12);
    }
    if (!(*store)->SaveScore(MakeScore("crash-1", 55), 99).ok()) _exit(13);
    if (use_sigkill) kill(getpid(), SIGKILL);
    _exit(0);  // skips the Store destructor: the database is never closed
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  if (use_sigkill) {
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited with " << WEXITSTATUS(wstatus);
    ASSERT_EQ(WTERMSIG(wstatus), SIGKILL);
  } else {
    ASSERT_TRUE(WIFEXITED(wstatus));
    ASSERT_EQ(WEXITSTATUS(wstatus), 0);
  }
  // Whatever was acknowledged lives in the WAL until a checkpoint; the next
  // opener must find it there.
  EXPECT_TRUE(fs::exists(path_ + "-wal"));

  auto store = OpenStore();
  ASSERT_TRUE(store);
  auto sessions = store->LoadSessions();
  ASSERT_TRUE(sessions.ok()) << sessions.status().ToString();
  ASSERT_EQ(sessions->size(), 1u);
  EXPECT_TRUE(MessageDifferencer::Equals((*sessions)[0], MakeSession("crash-1")));
  auto events = store->LoadEvents("crash-1", 1000);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), static_cast<size_t>(kEvents));
  EXPECT_EQ(events->back().message(), std::to_string(kEvents - 1));
  auto score = store->LoadScore("crash-1");
  ASSERT_TRUE(score.ok() && score->has_value());
  EXPECT_EQ((*score)->total(), 55);
}

INSTANTIATE_TEST_SUITE_P(ChildDies, StoreCrashTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("SigKill") : std::string("UnderscoreExit");
                         });

TEST_F(StoreTest, GarbageRecordBlobIsSkippedAndReportedNamingTheSession) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->SaveSession(MakeSession("good-1", 1)).ok());
    ASSERT_TRUE(store->SaveSession(MakeSession("bad-7", 2)).ok());
  }
  // 0xff... is a field tag whose varint never ends: no parser accepts it.
  RawDb(path_).Exec("UPDATE sessions SET record = X'FFFFFFFFFFFFFFFFFFFFFF' WHERE id = 'bad-7'");

  auto store = OpenStore();
  ASSERT_TRUE(store);
  std::vector<std::string> problems;
  auto loaded = store->LoadSessions(&problems);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].info().session_id(), "good-1");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("bad-7"), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find(path_), std::string::npos) << problems[0];
}

TEST_F(StoreTest, RecordOfAnotherSessionIsSkipped) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->SaveSession(MakeSession("a")).ok());
    ASSERT_TRUE(store->SaveSession(MakeSession("b")).ok());
  }
  // A blob that parses but belongs elsewhere (a bad manual edit).
  RawDb(path_).Exec("UPDATE sessions SET record = (SELECT record FROM sessions WHERE id='a') WHERE id='b'");
  auto store = OpenStore();
  ASSERT_TRUE(store);
  std::vector<std::string> problems;
  auto loaded = store->LoadSessions(&problems);
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->size(), 1u);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("'b'"), std::string::npos) << problems[0];
}

TEST_F(StoreTest, OpenUnderARegularFileFailsClearly) {
  // A regular file where a directory should be defeats root as well, unlike
  // permission bits.
  std::ofstream(dir_ + "/not-a-dir") << "x";
  const std::string path = dir_ + "/not-a-dir/state/firedrill.db";
  auto store = Store::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status().message();
  EXPECT_NE(store.status().message().find("cannot create directory"), std::string::npos)
      << store.status().message();
}

TEST_F(StoreTest, OpenInAReadOnlyDirectoryFailsClearly) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  const std::string ro = dir_ + "/ro";
  fs::create_directories(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  const std::string path = ro + "/firedrill.db";
  auto store = Store::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status().message();
  fs::permissions(ro, fs::perms::owner_all);
}

TEST_F(StoreTest, OpenOfAFileThatIsNotADatabaseFailsClearly) {
  fs::create_directories(fs::path(path_).parent_path());
  std::ofstream(path_) << std::string(4096, 'z');
  auto store = Store::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kDataLoss) << store.status().ToString();
  EXPECT_NE(store.status().message().find(path_), std::string::npos) << store.status().message();
  EXPECT_NE(store.status().message().find("not a database"), std::string::npos) << store.status().message();
}

TEST_F(StoreTest, NewerSchemaVersionIsRefused) {
  ASSERT_TRUE(OpenStore());
  RawDb(path_).Exec("PRAGMA user_version = 3");
  auto store = Store::Open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("newer"), std::string::npos) << store.status().message();
}

TEST_F(StoreTest, ConcurrentCallsFromManyThreadsAreAllKept) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->SaveSession(MakeSession("s-1")).ok());
  const int kThreads = 8, kPerThread = 40;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        if (!store->AppendEvent("s-1", MakeEvent(i, "t", t, "x")).ok()) ++failures;
        if (i % 10 == 0 && !store->LoadEvents("s-1", 5).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  auto events = store->LoadEvents("s-1", -1);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), static_cast<size_t>(kThreads * kPerThread));
}

TEST_F(StoreTest, GrantsKeepTheirDigestAndRolesAcrossAReopen) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->SaveGrant("d1", {"ada", kRoleCandidate, "infra", "", 5, false}).ok());
    ASSERT_TRUE(store->SaveGrant("d2", {"lee", kRoleProctor | kRoleInstructor, "", "", 6, false}).ok());
    ASSERT_TRUE(store->SaveGrant("d1", {"ada", kRoleCandidate, "infra", "", 5, true}).ok());  // revoked
  }
  auto store = OpenStore();
  ASSERT_TRUE(store);
  auto grants = store->LoadGrants();
  ASSERT_TRUE(grants.ok()) << grants.status().ToString();
  ASSERT_EQ(grants->size(), 2u);
  std::map<std::string, Grant> by(grants->begin(), grants->end());
  EXPECT_TRUE(by["d1"].revoked);
  EXPECT_EQ(by["d1"].exam_id, "infra");
  EXPECT_EQ(by["d2"].roles, kRoleProctor | kRoleInstructor);
}

TEST_F(StoreTest, TheDatabaseHoldsATokensDigestNeverTheToken) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  TokenBook book;
  std::string digest;
  const std::string token = book.Issue({"ada", kRoleCandidate, "infra", "", 5, false}, &digest);
  ASSERT_TRUE(store->SaveGrant(digest, *book.Find(token)).ok());
  store.reset();
  std::ifstream in(path_, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes.find(token.substr(4)), std::string::npos);  // its random part
  EXPECT_NE(bytes.find(digest), std::string::npos);
}

TEST_F(StoreTest, AnExamIdIsTakenOnce) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  v1::ExamSpec spec;
  spec.set_id("infra");
  spec.set_pass_mark(66);
  spec.add_items()->set_scenario("epoch-end-hang");
  ASSERT_TRUE(store->AddExam(spec, std::string(32, '\x01'), 10).ok());
  Status again = store->AddExam(spec, std::string(32, '\x02'), 11);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again.ToString();
  auto exams = store->LoadExams();
  ASSERT_TRUE(exams.ok());
  ASSERT_EQ(exams->size(), 1u);
  EXPECT_EQ((*exams)[0].secret, std::string(32, '\x01'));
  EXPECT_TRUE(MessageDifferencer::Equals((*exams)[0].spec, spec));
}

TEST_F(StoreTest, ConcurrentAuditAppendsMakeOneChainPerScope) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  constexpr int kThreads = 4, kPerThread = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string scope = i % 2 ? "exam-a" : "exam-b";
        auto r = store->AppendAudit(scope, 1000 + i, "candidate:" + std::to_string(t), "RunProbe",
                                    "{\"i\":" + std::to_string(i) + "}");
        if (!r.ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  int total = 0;
  for (const char* scope : {"exam-a", "exam-b"}) {
    auto trail = store->LoadAudit(scope);
    ASSERT_TRUE(trail.ok());
    auto head = VerifyAuditText(AuditText(*trail), scope);
    ASSERT_TRUE(head.ok()) << head.status().ToString();
    EXPECT_EQ(head->count, static_cast<int64_t>(trail->size()));
    total += static_cast<int>(trail->size());
  }
  EXPECT_EQ(total, kThreads * kPerThread);
  // An edited row shows in the export.
  RawDb raw(path_);
  raw.Exec("UPDATE audit SET action = 'Hint' WHERE scope = 'exam-a' AND seq = 3");
  auto trail = store->LoadAudit("exam-a");
  ASSERT_TRUE(trail.ok());
  auto head = VerifyAuditText(AuditText(*trail), "exam-a");
  ASSERT_FALSE(head.ok());
  EXPECT_NE(head.status().message().find("exam-a:3:"), std::string::npos) << head.status().message();
}

}  // namespace
}  // namespace firedrill::controller
