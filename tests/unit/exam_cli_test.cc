// `firedrill exam check|verify|verify-audit`: the checks a proctor or an
// auditor runs without a controller.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "controller/exam/audit_chain.h"
#include "controller/exam/signing.h"

namespace firedrill::cli {
namespace {

namespace fs = std::filesystem;

struct Result {
  int code;
  std::string out;
  std::string err;
};

class ExamCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fd-exam-cli-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(Path(name), std::ios::binary) << text;
  }
  Result Run(std::vector<std::string> args) const {
    args.insert(args.begin(), {"firedrill", "--state-dir", dir_, "--controller", "127.0.0.1:1"});
    std::ostringstream out, err;
    const int code = RunCli(args, out, err);
    return {code, out.str(), err.str()};
  }

  // A trail of `n` records, and a result signed over its head.
  void MakeSignedResultAndTrail(int n) {
    std::vector<controller::AuditRecord> trail;
    controller::AuditHead head;
    for (int i = 0; i < n; ++i) {
      auto r = controller::NextAuditRecord(head, 1000 + i, "candidate:ada", "RunProbe", "{}");
      ASSERT_TRUE(r.ok());
      trail.push_back(*r);
      head = controller::HeadAfter(*r);
    }
    Write("audit.jsonl", controller::AuditText(trail));
    std::vector<controller::AuditRecord> cut(trail.begin(), trail.end() - 1);
    Write("audit-cut.jsonl", controller::AuditText(cut));
    auto signer = controller::ResultSigner::LoadOrCreate(Path("signing.pem"));
    ASSERT_TRUE(signer.ok());
    Write("pub.pem", (*signer)->PublicKeyPem());
    const std::string result =
        R"({"format":"firedrill-exam-result/1","candidate":"ada","exam":{"id":"infra"},"sitting":1,"total":105,"max":150,)"
        R"("passed":true,"audit":{"records":)" +
        std::to_string(head.count) + R"(,"head":")" + head.hash + R"("}})";
    auto text = (*signer)->SignResult(nlohmann::json::parse(result));
    ASSERT_TRUE(text.ok());
    Write("result.json", *text);
    std::string changed = *text;
    changed.replace(changed.find("\"total\":105"), 11, "\"total\":150");
    Write("result-changed.json", changed);
  }

  std::string dir_;
};

TEST_F(ExamCliTest, VerifyAcceptsASignedResultAndRefusesAChangedOne) {
  MakeSignedResultAndTrail(5);
  Result ok = Run({"exam", "verify", Path("result.json"), "--pubkey", Path("pub.pem")});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("signature valid (Ed25519, key "), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("105 of 150 points, passed"), std::string::npos) << ok.out;
  Result bad = Run({"exam", "verify", Path("result-changed.json"), "--pubkey", Path("pub.pem")});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("the signature does not match the result"), std::string::npos) << bad.err;
  Result json = Run({"--json", "exam", "verify", Path("result.json"), "--pubkey", Path("pub.pem")});
  EXPECT_EQ(json.code, 0);
  EXPECT_NE(json.out.find("\"valid\":true"), std::string::npos) << json.out;
}

TEST_F(ExamCliTest, VerifyAuditChecksTheChainAndWhereTheResultSaysItEnds) {
  MakeSignedResultAndTrail(5);
  Result ok = Run({"exam", "verify-audit", Path("audit.jsonl"), "--result", Path("result.json"), "--pubkey",
                   Path("pub.pem")});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("5 records, every one chained"), std::string::npos) << ok.out;
  Result cut = Run({"exam", "verify-audit", Path("audit-cut.jsonl"), "--result", Path("result.json"),
                    "--pubkey", Path("pub.pem")});
  EXPECT_EQ(cut.code, 1);
  EXPECT_NE(cut.err.find("cut off"), std::string::npos) << cut.err;
  Result alone = Run({"exam", "verify-audit", Path("audit-cut.jsonl")});
  EXPECT_EQ(alone.code, 0) << alone.err;  // a cut trail still chains: only a result can tell
  EXPECT_NE(alone.out.find("not anchored"), std::string::npos) << alone.out;
  Result no_key = Run({"exam", "verify-audit", Path("audit.jsonl"), "--result", Path("result.json")});
  EXPECT_EQ(no_key.code, 1);
  EXPECT_NE(no_key.err.find("--result needs --pubkey"), std::string::npos);
}

TEST_F(ExamCliTest, ASignedResultOfAnotherShapeIsReadWithoutCrashing) {
  auto signer = controller::ResultSigner::LoadOrCreate(Path("signing.pem"));
  ASSERT_TRUE(signer.ok());
  Write("pub.pem", (*signer)->PublicKeyPem());
  auto text = (*signer)->SignResult(nlohmann::json::parse(
      R"({"format":"firedrill-exam-result/1","exam":"infra","total":"many","audit":5})"));
  ASSERT_TRUE(text.ok());
  Write("odd.json", *text);
  Result r = Run({"exam", "verify", Path("odd.json"), "--pubkey", Path("pub.pem")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("signature valid"), std::string::npos) << r.out;
  Write("audit.jsonl", "");
  Result a = Run({"exam", "verify-audit", Path("audit.jsonl"), "--result", Path("odd.json"), "--pubkey",
                  Path("pub.pem")});
  EXPECT_EQ(a.code, 1);
  EXPECT_NE(a.err.find("anchors no audit trail"), std::string::npos) << a.err;
}

TEST_F(ExamCliTest, CheckReadsAnExamFileAgainstTheShippedCatalogue) {
  Write("good.yaml",
        "id: infra\ntitle: T\ntime_limit_min: 60\npass_mark: 60\nitems:\n  - scenario: epoch-end-hang\n"
        "  - skill: straggler rank identification\n    points: 50\n");
  Write("bad.yaml",
        "id: infra\ntitle: T\ntime_limit_min: 60\npass_mark: 60\nitems:\n  - scenario: epoch-end\n");
  const std::string shipped = std::string(FIREDRILL_SOURCE_DIR) + "/scenarios";
  Result good = Run({"exam", "check", Path("good.yaml"), "--scenarios", shipped});
  EXPECT_EQ(good.code, 0) << good.err;
  EXPECT_NE(good.out.find("2 items, 150 points, pass mark 60%, 60 minutes"), std::string::npos) << good.out;
  EXPECT_NE(good.out.find("drawn per candidate"), std::string::npos) << good.out;
  Result bad = Run({"exam", "check", Path("bad.yaml"), "--scenarios", shipped});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("bad.yaml:6:"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace firedrill::cli
