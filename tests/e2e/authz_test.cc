// Who may call what, over the whole public service: every RPC of the Drill
// service is called with every kind of token (none, a forged one, a revoked
// one, the owner's, the session's learner, another learner, a candidate, a
// proctor, an instructor, and a team's commander, investigator and scribe),
// against a real controller, and each answer is checked against the rules
// written out here (not against the controller's own table).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "cli/certs.h"
#include "cli/commands.h"
#include "tests/e2e/harness.h"

namespace firedrill::e2e {
namespace {

// What a call touches, and so who may make it.
enum class Kind {
  kAnyToken,
  kCatalogue,
  kStart,
  kList,
  kAdmin,
  kProctor,   // exams: create, issue, results, rescore, audit
  kSitting,   // a candidate's own sitting
  kExamView,  // a sitting's state: its candidate or a proctor
  kWatch,
  kNote,  // post a note on the session's timeline: whoever acts on it (not a proctor)
  kInvestigate,
  kCommand
};

enum class Want { kAllowed, kUnauthenticated, kDenied, kHidden };

const char* Name(Want w) {
  switch (w) {
    case Want::kAllowed:
      return "allowed";
    case Want::kUnauthenticated:
      return "UNAUTHENTICATED";
    case Want::kDenied:
      return "PERMISSION_DENIED";
    case Want::kHidden:
      return "answered as no such session";
  }
  return "?";
}

struct Principal {
  std::string name;
  std::string token;
  bool valid = true;
  std::set<Kind> allowed;  // of the non-session kinds
  bool sees = false;       // the session at all
  bool investigates = false;
  bool commands = false;
};

Want Expected(const Principal& p, Kind k) {
  if (!p.valid) return Want::kUnauthenticated;
  switch (k) {
    case Kind::kWatch:
      return p.sees ? Want::kAllowed : Want::kHidden;
    case Kind::kNote:
      return !p.sees ? Want::kHidden : p.name == "a proctor" ? Want::kDenied : Want::kAllowed;
    case Kind::kInvestigate:
      return !p.sees ? Want::kHidden : p.investigates ? Want::kAllowed : Want::kDenied;
    case Kind::kCommand:
      return !p.sees ? Want::kHidden : p.commands ? Want::kAllowed : Want::kDenied;
    default:
      return p.allowed.count(k) ? Want::kAllowed : Want::kDenied;
  }
}

struct Call {
  std::string method;  // as the service names it
  Kind kind;
  std::function<Status(cli::DrillClient&, const std::string& session)> run;
};

template <typename T>
Status Of(const StatusOr<T>& r) {
  return r.ok() ? Status::Ok() : r.status();
}

std::vector<Call> EveryCall() {
  using C = cli::DrillClient;
  using S = const std::string&;
  // Calls that are allowed do nothing: the session has ended, fixes and
  // diagnoses are refused by its state, and the other requests are invalid.
  return {
      {"ListScenarios", Kind::kCatalogue, [](C& c, S) { return Of(c.ListScenarios()); }},
      {"GetScenario", Kind::kCatalogue, [](C& c, S) { return Of(c.GetScenario("throughput-halved")); }},
      {"ListCauses", Kind::kAnyToken, [](C& c, S) { return Of(c.ListCauses()); }},
      {"StartSession", Kind::kStart, [](C& c, S) { return Of(c.StartSession("no-such-scenario", 0)); }},
      {"ListSessions", Kind::kList, [](C& c, S) { return Of(c.ListSessions()); }},
      {"GetStatus", Kind::kWatch, [](C& c, S id) { return Of(c.GetStatus(id)); }},
      {"GetTrace", Kind::kWatch,
       [](C& c, S id) {
         v1::GetTraceRequest r;
         r.set_session_id(id);
         return Of(c.GetTrace(r));
       }},
      {"GetMetrics", Kind::kWatch,
       [](C& c, S id) {
         v1::GetMetricsRequest r;
         r.set_session_id(id);
         return Of(c.GetMetrics(r));
       }},
      {"ListCheckpoints", Kind::kWatch, [](C& c, S id) { return Of(c.ListCheckpoints(id)); }},
      {"VerifyCheckpoint", Kind::kInvestigate, [](C& c, S id) { return Of(c.VerifyCheckpoint(id, 999999)); }},
      {"GetLogs", Kind::kWatch,
       [](C& c, S id) {
         v1::GetLogsRequest r;
         r.set_session_id(id);
         return Of(c.GetLogs(r));
       }},
      {"GetFlightRecorder", Kind::kWatch, [](C& c, S id) { return Of(c.GetFlightRecorder(id)); }},
      {"RunProbe", Kind::kInvestigate,
       [](C& c, S id) {
         v1::RunProbeRequest r;
         r.set_session_id(id);
         r.mutable_spec()->set_op("checksum");
         r.mutable_spec()->set_iters(3);  // checksum takes none: refused as invalid
         return Of(c.RunProbe(r));
       }},
      {"SubmitDiagnosis", Kind::kInvestigate,
       [](C& c, S id) {
         v1::SubmitDiagnosisRequest r;
         r.set_session_id(id);
         r.set_cause("straggler");
         r.add_culprit_ranks(1);
         return Of(c.SubmitDiagnosis(r));
       }},
      {"ApplyFix", Kind::kCommand,
       [](C& c, S id) {
         v1::ApplyFixRequest r;
         r.set_session_id(id);
         r.add_replace_host_ranks(1);
         return Of(c.ApplyFix(r));
       }},
      {"RequestHint", Kind::kInvestigate, [](C& c, S id) { return Of(c.RequestHint(id)); }},
      {"GetScore", Kind::kWatch, [](C& c, S id) { return Of(c.GetScore(id)); }},
      {"EndSession", Kind::kCommand,
       [](C& c, S id) { return Of(c.EndSession(id, std::chrono::seconds(30))); }},
      {"WhoAmI", Kind::kAnyToken, [](C& c, S) { return Of(c.WhoAmI()); }},
      {"IssueToken", Kind::kAdmin,
       [](C& c, S) {
         v1::IssueTokenRequest r;  // no name: invalid
         r.add_roles("learner");
         return Of(c.IssueToken(r));
       }},
      {"RevokeToken", Kind::kAdmin, [](C& c, S) { return Of(c.RevokeToken("nobody-has-this-name")); }},
      {"ListTokens", Kind::kAdmin, [](C& c, S) { return Of(c.ListTokens()); }},
      // Exams: none is there ("exam-1", the candidate's, was never made).
      {"CreateExam", Kind::kProctor, [](C& c, S) { return Of(c.CreateExam("id: [", "bad.yaml")); }},
      {"ListExams", Kind::kProctor, [](C& c, S) { return Of(c.ListExams()); }},
      {"IssueCandidate", Kind::kProctor, [](C& c, S) { return Of(c.IssueCandidate("no-such-exam", "zed")); }},
      {"StartSitting", Kind::kSitting, [](C& c, S) { return Of(c.StartSitting()); }},
      {"GetSitting", Kind::kExamView,
       [](C& c, S) {
         v1::GetSittingRequest r;
         r.set_exam_id("no-such-exam");
         r.set_candidate("carol");
         return Of(c.GetSitting(r));
       }},
      {"OpenItem", Kind::kSitting, [](C& c, S) { return Of(c.OpenItem(1, false)); }},
      {"FinishSitting", Kind::kSitting,
       [](C& c, S) { return Of(c.FinishSitting(std::chrono::seconds(30))); }},
      {"GetExamResult", Kind::kProctor,
       [](C& c, S) {
         v1::GetExamResultRequest r;
         r.set_exam_id("no-such-exam");
         r.set_candidate("carol");
         return Of(c.GetExamResult(r));
       }},
      {"RescoreItem", Kind::kProctor,
       [](C& c, S) {
         v1::RescoreItemRequest r;
         r.set_exam_id("no-such-exam");
         r.set_candidate("carol");
         r.set_item(1);
         r.set_reason("test");
         return Of(c.RescoreItem(r));
       }},
      {"AllowRetake", Kind::kProctor, [](C& c, S) { return Of(c.AllowRetake("no-such-exam", "carol")); }},
      {"GetExamPublicKey", Kind::kAnyToken, [](C& c, S) { return Of(c.GetExamPublicKey()); }},
      {"ExportAudit", Kind::kProctor, [](C& c, S) { return Of(c.ExportAudit("no-such-exam", "carol")); }},
      // Team drills.
      {"PostTimeline", Kind::kNote, [](C& c, S id) { return Of(c.PostTimeline(id, "note", "looking")); }},
      {"WatchTimeline", Kind::kWatch,
       [](C& c, S id) { return c.WatchTimeline(id, true, 0, [](const v1::TimelineItem&) { return true; }); }},
      {"WatchStatus", Kind::kWatch,
       [](C& c, S id) { return c.WatchStatus(id, 500, [](const v1::SessionStatus&) { return true; }); }},
      {"GetPostmortem", Kind::kWatch, [](C& c, S id) { return Of(c.GetPostmortem(id)); }},
  };
}

class AuthzTest : public ControllerTest {
 protected:
  std::string Issue(const std::string& name, std::vector<std::string> roles, const std::string& exam = "",
                    const std::string& session = "") {
    v1::IssueTokenRequest r;
    r.set_name(name);
    for (auto& role : roles) r.add_roles(role);
    r.set_exam_id(exam);
    r.set_session_id(session);
    auto t = c().IssueToken(r);
    EXPECT_TRUE(t.ok()) << name << ": " << t.status().message();
    return t.ok() ? t->token() : "";
  }
  cli::DrillClient As(const std::string& token) {
    cli::DrillClient client(ctl_->address(), std::chrono::seconds(30));
    client.SetToken(token);
    return client;
  }
};

TEST_F(AuthzTest, EveryCallRefusesATokenOfTheWrongRoleOrSession) {
  const std::string alice = Issue("alice", {"learner"});
  // Alice's session, ended at once: every action on it is then refused by
  // its state, so a call that passes the gate changes nothing.
  cli::DrillClient as_alice = As(alice);
  auto info = as_alice.StartSession("throughput-halved", 4242);
  ASSERT_TRUE(info.ok()) << info.status().message();
  const std::string id = info->session_id();
  EXPECT_EQ(info->owner(), "alice");
  ASSERT_TRUE(as_alice.EndSession(id, std::chrono::seconds(60)).ok());
  ASSERT_TRUE(WaitUntil(
                  c(), id, [](const v1::SessionStatus& s) { return s.session().state() == "ended"; }, 120)
                  .ok());

  const std::string rita = Issue("rita", {"learner"});
  ASSERT_TRUE(c().RevokeToken("rita").ok());
  const std::set<Kind> reader = {Kind::kAnyToken, Kind::kCatalogue, Kind::kList};
  const std::set<Kind> proctor = {Kind::kAnyToken, Kind::kCatalogue, Kind::kList, Kind::kProctor,
                                  Kind::kExamView};
  const std::set<Kind> starter = {Kind::kAnyToken, Kind::kCatalogue, Kind::kList, Kind::kStart};
  std::vector<Principal> who = {
      {"no token", "", false},
      {"a forged token", "fdt_" + std::string(64, '7'), false},
      {"a revoked token", rita, false},
      {"the owner",
       cli::ReadOwnerToken(dir_),
       true,
       {Kind::kAnyToken, Kind::kCatalogue, Kind::kList, Kind::kStart, Kind::kAdmin, Kind::kProctor,
        Kind::kExamView},
       true,
       true,
       true},
      {"its learner", alice, true, starter, true, true, true},
      {"another learner", Issue("bob", {"learner"}), true, starter},
      {"a candidate",
       Issue("carol", {"candidate"}, "exam-1"),
       true,
       {Kind::kAnyToken, Kind::kList, Kind::kSitting, Kind::kExamView}},
      {"a proctor", Issue("paula", {"proctor"}), true, proctor, true},
      {"an instructor", Issue("ian", {"instructor"}), true, starter},
      {"its commander", Issue("cmd", {"commander"}, "", id), true, reader, true, true, true},
      {"its investigator", Issue("inv", {"investigator"}, "", id), true, reader, true, true},
      {"its scribe", Issue("scribe", {"scribe+comms"}, "", id), true, reader, true},
  };
  // What "no such session" says, for a session that is not there.
  auto nothing = c().GetStatus("zz-no-such-session");
  ASSERT_FALSE(nothing.ok());
  std::string hidden = nothing.status().message();
  hidden.replace(hidden.find("zz-no-such-session"), std::string("zz-no-such-session").size(), id);

  // What a call that passes the gate answers here: a call that would
  // change something is invalid or refused by the ended session's state.
  // The read calls' answers depend on how far the session got before it
  // ended; for them every admitted token must get the same answer as the
  // first one did. Never a refusal.
  const std::map<std::string, StatusCode> passed = {
      {"ListScenarios", StatusCode::kOk},
      {"GetScenario", StatusCode::kOk},
      {"ListCauses", StatusCode::kOk},
      {"StartSession", StatusCode::kNotFound},  // no such scenario
      {"ListSessions", StatusCode::kOk},
      {"GetStatus", StatusCode::kOk},
      {"VerifyCheckpoint", StatusCode::kNotFound},  // no checkpoint of that step
      {"RunProbe", StatusCode::kInvalidArgument},
      {"SubmitDiagnosis", StatusCode::kFailedPrecondition},  // the session has ended
      {"ApplyFix", StatusCode::kFailedPrecondition},
      {"RequestHint", StatusCode::kFailedPrecondition},
      {"GetScore", StatusCode::kOk},
      {"WhoAmI", StatusCode::kOk},
      {"IssueToken", StatusCode::kInvalidArgument},  // no name
      {"RevokeToken", StatusCode::kNotFound},        // no such token
      {"ListTokens", StatusCode::kOk},
      {"CreateExam", StatusCode::kInvalidArgument},  // not YAML
      {"ListExams", StatusCode::kOk},
      {"IssueCandidate", StatusCode::kNotFound},  // no such exam
      {"StartSitting", StatusCode::kNotFound},    // the candidate's exam is not there
      {"GetSitting", StatusCode::kNotFound},
      {"OpenItem", StatusCode::kFailedPrecondition},  // no sitting
      {"FinishSitting", StatusCode::kFailedPrecondition},
      {"GetExamResult", StatusCode::kNotFound},
      {"RescoreItem", StatusCode::kNotFound},
      {"AllowRetake", StatusCode::kNotFound},
      {"GetExamPublicKey", StatusCode::kOk},
      {"ExportAudit", StatusCode::kNotFound},
      {"PostTimeline", StatusCode::kFailedPrecondition},  // the session has ended
      {"WatchTimeline", StatusCode::kOk},                 // all of it, then the end
      {"WatchStatus", StatusCode::kOk},                   // one last look
      {"GetPostmortem", StatusCode::kOk},
  };
  // Answers that name the caller's own things: the same code for everyone,
  // the message their own (a candidate reads of their sitting, a proctor
  // of the exam asked for).
  const std::set<std::string> per_caller = {"GetSitting"};
  std::map<std::string, Status> first_admitted;
  const auto calls = EveryCall();
  std::set<std::string> covered;
  int checked = 0;
  for (const Call& call : calls) {
    covered.insert(call.method);
    for (const Principal& p : who) {
      cli::DrillClient client = As(p.token);
      const Status st = call.run(client, id);
      const Want want = Expected(p, call.kind);
      const std::string where = call.method + " by " + p.name + " (want " + Name(want) + "): got " +
                                StatusCodeName(st.code()) + " " + st.message();
      switch (want) {
        case Want::kAllowed: {
          EXPECT_NE(st.code(), StatusCode::kUnauthenticated) << where;
          EXPECT_NE(st.code(), StatusCode::kPermissionDenied) << where;
          EXPECT_FALSE(st.code() == StatusCode::kNotFound && st.message() == hidden) << where;
          if (passed.count(call.method)) {
            EXPECT_EQ(st.code(), passed.at(call.method)) << where;
          }
          auto [first, inserted] = first_admitted.emplace(call.method, st);
          if (!inserted) {
            EXPECT_EQ(st.code(), first->second.code()) << where;
            if (!per_caller.count(call.method)) {
              EXPECT_EQ(st.message(), first->second.message()) << where;
            }
          }
          break;
        }
        case Want::kUnauthenticated:
          EXPECT_EQ(st.code(), StatusCode::kUnauthenticated) << where;
          break;
        case Want::kDenied:
          EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << where;
          break;
        case Want::kHidden:
          // The very answer an unknown session gets: nothing says it exists.
          EXPECT_EQ(st.code(), StatusCode::kNotFound) << where;
          EXPECT_EQ(st.message(), hidden) << where;
          break;
      }
      ++checked;
    }
  }
  // The table covers the whole service: a new RPC without a row fails here.
  const auto* service = v1::GetStatusRequest::descriptor()->file()->FindServiceByName("Drill");
  ASSERT_NE(service, nullptr);
  for (int i = 0; i < service->method_count(); ++i)
    EXPECT_TRUE(covered.count(service->method(i)->name())) << service->method(i)->name() << " has no row";
  EXPECT_EQ(checked, static_cast<int>(calls.size() * who.size()));

  // A listing shows each token only what it may see.
  for (const Principal& p : who) {
    if (!p.valid) continue;
    cli::DrillClient client = As(p.token);
    auto list = client.ListSessions();
    ASSERT_TRUE(list.ok()) << p.name << ": " << list.status().message();
    bool listed = false;
    for (const auto& s : list->sessions()) listed |= s.session_id() == id;
    EXPECT_EQ(listed, p.sees) << p.name;
  }
}

TEST_F(AuthzTest, TokensAreNamedOnceShownOnceAndStoredAsDigests) {
  const std::string t = Issue("dana", {"learner"});
  ASSERT_EQ(t.rfind("fdt_", 0), 0u);
  EXPECT_EQ(t.size(), 68u);
  // One live token per name: the audit trail's names mean one holder.
  v1::IssueTokenRequest again;
  again.set_name("dana");
  again.add_roles("learner");
  auto dup = c().IssueToken(again);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);
  // A token never names the owner role, and scoped roles need their scope.
  v1::IssueTokenRequest bad;
  bad.set_name("eve");
  bad.add_roles("owner");
  EXPECT_EQ(c().IssueToken(bad).status().code(), StatusCode::kPermissionDenied);
  bad.clear_roles();
  bad.add_roles("candidate");
  EXPECT_EQ(c().IssueToken(bad).status().code(), StatusCode::kInvalidArgument);
  bad.clear_roles();
  bad.add_roles("commander");
  bad.set_session_id("zz-no-such-session");
  EXPECT_EQ(c().IssueToken(bad).status().code(), StatusCode::kNotFound);

  auto me = As(t).WhoAmI();
  ASSERT_TRUE(me.ok()) << me.status().message();
  EXPECT_EQ(me->token().name(), "dana");
  ASSERT_EQ(me->token().roles_size(), 1);
  EXPECT_EQ(me->token().roles(0), "learner");
  // The list never carries a token.
  auto list = c().ListTokens();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->DebugString().find(t.substr(4)), std::string::npos);
  // Revoked, the token stops working at once; the name stays taken (the
  // sessions it started name it).
  ASSERT_TRUE(c().RevokeToken("dana").ok());
  EXPECT_EQ(As(t).WhoAmI().status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(c().IssueToken(again).status().code(), StatusCode::kAlreadyExists);

  // Across a restart: grants come back from the store (revocations too),
  // and the owner token in the state dir stays the same.
  const std::string owner = cli::ReadOwnerToken(dir_);
  ctl_.reset();
  ctl_ = std::make_unique<ControllerProcess>(dir_);
  ASSERT_TRUE(ctl_->ok());
  EXPECT_EQ(cli::ReadOwnerToken(dir_), owner);
  EXPECT_EQ(As(t).WhoAmI().status().code(), StatusCode::kUnauthenticated);
  // The database (and its write-ahead log) holds no token, only digests.
  for (const std::string file : {"/firedrill.db", "/firedrill.db-wal"}) {
    std::ifstream db(dir_ + file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(db)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.find(owner.substr(4)), std::string::npos) << file;
    EXPECT_EQ(bytes.find(t.substr(4)), std::string::npos) << file;
  }
}

// TLS on the public port: a client that trusts the controller's CA gets in
// (with its token); a plaintext client and one that trusts another CA do
// not reach the service at all.
TEST(TlsTest, ThePublicPortSpeaksTlsToClientsThatTrustItsCa) {
  const std::string dir = MakeTempDir();
  auto ours = cli::MakeCerts(dir + "/tls", {"localhost", "127.0.0.1"}, 2);
  ASSERT_TRUE(ours.ok()) << ours.status().message();
  auto theirs = cli::MakeCerts(dir + "/other", {"127.0.0.1"}, 2);
  ASSERT_TRUE(theirs.ok()) << theirs.status().message();
  {
    ControllerProcess ctl(dir + "/state", {"--tls-cert", ours->server_cert, "--tls-key", ours->server_key});
    ASSERT_TRUE(ctl.ok()) << "see " << dir << "/state/controller.log";
    const std::string owner = cli::ReadOwnerToken(dir + "/state");

    cli::DrillClient tls(ctl.address(), std::chrono::seconds(10), ours->ca_cert);
    tls.SetToken(owner);
    auto me = tls.WhoAmI();
    ASSERT_TRUE(me.ok()) << me.status().message();
    EXPECT_EQ(me->token().name(), "owner");

    cli::DrillClient plain(ctl.address(), std::chrono::seconds(5));
    plain.SetToken(owner);
    EXPECT_EQ(plain.WhoAmI().status().code(), StatusCode::kUnavailable);

    cli::DrillClient wrong_ca(ctl.address(), std::chrono::seconds(5), theirs->ca_cert);
    wrong_ca.SetToken(owner);
    auto refused = wrong_ca.WhoAmI();
    EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(refused.status().message().find("TLS"), std::string::npos) << refused.status().message();

    // The CLI, with the CA and the state dir's owner token.
    std::ostringstream out, err;
    const int rc = cli::RunCli({"firedrill", "--controller", ctl.address(), "--state-dir", dir + "/state",
                                "--tls-ca", ours->ca_cert, "whoami"},
                               out, err);
    EXPECT_EQ(rc, 0) << err.str();
    EXPECT_NE(out.str().find("owner (owner)"), std::string::npos) << out.str();
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace firedrill::e2e
