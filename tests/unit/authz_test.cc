// The authorisation rules as pure functions, and the gatekeeper's tokens on
// a real store. (tests/e2e/authz_test.cc plays every RPC against a real
// controller.)
#include "controller/authz.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "controller/store.h"

namespace firedrill::controller {
namespace {

namespace fs = std::filesystem;

Grant G(const std::string& name, uint32_t roles, const std::string& session = "") {
  Grant g;
  g.name = name;
  g.roles = roles;
  g.session = session;
  return g;
}

TEST(Authz, BearerTokenTakesOnlyTheBearerScheme) {
  EXPECT_EQ(BearerToken("Bearer fdt_abc"), "fdt_abc");
  EXPECT_EQ(BearerToken("bearer fdt_abc"), "");
  EXPECT_EQ(BearerToken("Basic fdt_abc"), "");
  EXPECT_EQ(BearerToken("Bearer "), "");
  EXPECT_EQ(BearerToken(""), "");
}

TEST(Authz, SessionsBelongToTheirStarterTheirTeamAndAreWatchedByProctors) {
  struct Row {
    Grant who;
    bool watch, investigate, command;
  };
  const std::vector<Row> rows = {
      {G("owner", kRoleOwner), true, true, true},
      {G("alice", kRoleLearner), true, true, true},    // started it
      {G("bob", kRoleLearner), false, false, false},   // another learner
      {G("alice", kRoleProctor), true, false, false},  // same name, no starter role: a proctor only
      {G("carol", kRoleCandidate), false, false, false},
      {G("paula", kRoleProctor), true, false, false},
      {G("ian", kRoleInstructor), false, false, false},
      {G("cmd", kRoleCommander, "s-1"), true, true, true},
      {G("inv", kRoleInvestigator, "s-1"), true, true, false},
      {G("scr", kRoleScribe | kRoleComms, "s-1"), true, false, false},
      {G("cmd2", kRoleCommander, "s-2"), false, false, false},  // another team's commander
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.who.name + " " + RoleNames(r.who.roles));
    EXPECT_EQ(MayUseSession(r.who, "s-1", "alice", SessionUse::kWatch), r.watch);
    EXPECT_EQ(MayUseSession(r.who, "s-1", "alice", SessionUse::kInvestigate), r.investigate);
    EXPECT_EQ(MayUseSession(r.who, "s-1", "alice", SessionUse::kCommand), r.command);
  }
  // A session of nobody (stored before tokens) is the owner's alone.
  EXPECT_FALSE(MaySeeSession(G("", kRoleLearner), "s-1", ""));
  EXPECT_TRUE(MaySeeSession(G("owner", kRoleOwner), "s-1", ""));
}

TEST(Authz, CallsNeedTheirRoles) {
  EXPECT_TRUE(CheckAccess(G("c", kRoleCandidate), Access::kAnyToken).ok());
  EXPECT_EQ(CheckAccess(G("c", kRoleCandidate), Access::kCatalogue).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckAccess(G("c", kRoleCandidate), Access::kStartSession).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckAccess(G("p", kRoleProctor), Access::kStartSession).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckAccess(G("l", kRoleLearner), Access::kStartSession).ok());
  EXPECT_TRUE(CheckAccess(G("i", kRoleInstructor), Access::kStartSession).ok());
  EXPECT_EQ(CheckAccess(G("i", kRoleInstructor), Access::kAdmin).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckAccess(G("o", kRoleOwner), Access::kAdmin).ok());
}

TEST(Authz, TimelinePostsFollowTheTeamRoles) {
  const std::string s = "s-1";
  const Grant scribe = G("sam", kRoleScribe | kRoleComms, s);
  const Grant inv = G("ivan", kRoleInvestigator, s);
  const Grant cmd = G("ada", kRoleCommander, s);
  EXPECT_TRUE(MayPost(scribe, s, "", "note").ok());
  EXPECT_TRUE(MayPost(scribe, s, "", "update").ok());  // holds comms too
  EXPECT_EQ(MayPost(scribe, s, "", "proposal").code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(MayPost(inv, s, "", "proposal").ok());
  EXPECT_TRUE(MayPost(inv, s, "", "note").ok());
  EXPECT_EQ(MayPost(inv, s, "", "update").code(), StatusCode::kPermissionDenied);
  for (const char* kind : {"note", "update", "proposal"}) EXPECT_TRUE(MayPost(cmd, s, "", kind).ok()) << kind;
  // A team token of another session, a proctor, another learner: nothing.
  EXPECT_EQ(MayPost(G("x", kRoleScribe, "s-2"), s, "", "note").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(MayPost(G("p", kRoleProctor), s, "", "note").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(MayPost(G("bob", kRoleLearner), s, "alice", "note").code(), StatusCode::kPermissionDenied);
  // The session's starter and the owner post anything; no other kinds.
  EXPECT_TRUE(MayPost(G("alice", kRoleLearner), s, "alice", "update").ok());
  EXPECT_TRUE(MayPost(G("o", kRoleOwner), s, "", "proposal").ok());
  EXPECT_EQ(MayPost(cmd, s, "", "verdict").code(), StatusCode::kInvalidArgument);

  EXPECT_EQ(ActingRole(scribe, s, "note"), "scribe");
  EXPECT_EQ(ActingRole(scribe, s, "update"), "comms");
  EXPECT_EQ(ActingRole(inv, s, "diagnosis"), "investigator");
  EXPECT_EQ(ActingRole(G("z", kRoleInvestigator | kRoleCommander, s), s, "fix"), "commander");
  EXPECT_EQ(ActingRole(G("o", kRoleOwner), s, "tool"), "owner");
  EXPECT_EQ(ActingRole(G("alice", kRoleLearner), s, "tool"), "learner");
}

TEST(Authz, ExamCallsGoToProctorsAndCandidates) {
  EXPECT_TRUE(CheckAccess(G("p", kRoleProctor), Access::kProctor).ok());
  EXPECT_TRUE(CheckAccess(G("o", kRoleOwner), Access::kProctor).ok());
  EXPECT_EQ(CheckAccess(G("c", kRoleCandidate), Access::kProctor).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckAccess(G("i", kRoleInstructor), Access::kProctor).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckAccess(G("c", kRoleCandidate), Access::kSitting).ok());
  EXPECT_EQ(CheckAccess(G("o", kRoleOwner), Access::kSitting).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckAccess(G("p", kRoleProctor), Access::kSitting).code(), StatusCode::kPermissionDenied);
  for (uint32_t r : {kRoleOwner, kRoleProctor, kRoleCandidate})
    EXPECT_TRUE(CheckAccess(G("x", r), Access::kExamView).ok()) << r;
  EXPECT_EQ(CheckAccess(G("l", kRoleLearner), Access::kExamView).code(), StatusCode::kPermissionDenied);
}

class GatekeeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fd_authz_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto s = Store::Open(dir_ + "/firedrill.db");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string ReadToken() {
    std::ifstream in(dir_ + "/owner.token");
    std::string t;
    std::getline(in, t);
    return t;
  }
  std::string dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(GatekeeperTest, TheOwnerTokenIsWrittenOnceForItsUserAlone) {
  Gatekeeper g(store_.get());
  ASSERT_TRUE(g.Init(dir_ + "/owner.token").ok());
  const std::string token = ReadToken();
  ASSERT_EQ(token.rfind("fdt_", 0), 0u);
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/owner.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto who = g.Authenticate("Bearer " + token);
  ASSERT_TRUE(who.ok());
  EXPECT_TRUE(who->roles & kRoleOwner);
  // A second controller on the same state keeps it.
  Gatekeeper again(store_.get());
  ASSERT_TRUE(again.Init(dir_ + "/owner.token").ok());
  EXPECT_EQ(ReadToken(), token);
  EXPECT_TRUE(again.Authenticate("Bearer " + token).ok());
  // A file holding something else is replaced with a live token.
  std::ofstream(dir_ + "/owner.token") << "fdt_not-a-token\n";
  Gatekeeper third(store_.get());
  ASSERT_TRUE(third.Init(dir_ + "/owner.token").ok());
  EXPECT_NE(ReadToken(), token);
  EXPECT_TRUE(third.Authenticate("Bearer " + ReadToken()).ok());
  // Replacing the file is how a leaked owner token is revoked: the old one
  // stops working, now and after a restart.
  EXPECT_EQ(third.Authenticate("Bearer " + token).status().code(), StatusCode::kUnauthenticated);
  Gatekeeper fourth(store_.get());
  ASSERT_TRUE(fourth.Init(dir_ + "/owner.token").ok());
  EXPECT_EQ(fourth.Authenticate("Bearer " + token).status().code(), StatusCode::kUnauthenticated);
  EXPECT_TRUE(fourth.Authenticate("Bearer " + ReadToken()).ok());
}

TEST_F(GatekeeperTest, UnknownRevokedAndMissingTokensAreUnauthenticated) {
  Gatekeeper g(store_.get());
  ASSERT_TRUE(g.Init(dir_ + "/owner.token").ok());
  EXPECT_EQ(g.Authenticate("").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(g.Authenticate("Bearer fdt_0000").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(g.Authenticate(ReadToken()).status().code(), StatusCode::kUnauthenticated);  // no scheme
  Grant alice = G("alice", kRoleLearner);
  auto t = g.Issue(&alice);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_TRUE(g.Authenticate("Bearer " + *t).ok());
  EXPECT_EQ(g.Issue(&alice).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(g.Revoke("owner").status().code(), StatusCode::kPermissionDenied);
  auto n = g.Revoke("alice");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  EXPECT_EQ(g.Authenticate("Bearer " + *t).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(g.Revoke("alice").status().code(), StatusCode::kNotFound);
  // A name is never another holder's: sessions and audit records name it.
  EXPECT_EQ(g.Issue(&alice).status().code(), StatusCode::kAlreadyExists);
  // A candidate holds no other role (it would open the catalogue and
  // practice sessions to a candidate).
  Grant both = G("carl", kRoleCandidate | kRoleLearner);
  both.exam_id = "e1";
  EXPECT_EQ(g.Issue(&both).status().code(), StatusCode::kInvalidArgument);
  // The revocation is stored: a restarted controller refuses it too.
  Gatekeeper later(store_.get());
  ASSERT_TRUE(later.Init(dir_ + "/owner.token").ok());
  EXPECT_EQ(later.Authenticate("Bearer " + *t).status().code(), StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace firedrill::controller
