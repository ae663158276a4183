#include "controller/exam/signing.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace firedrill::controller {
namespace {

namespace fs = std::filesystem;

class SigningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fd-signing-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

const nlohmann::json kResult = nlohmann::json::parse(
    R"({"format":"firedrill-exam-result/1","candidate":"ada","exam":"infra-practical","items":[{"item":1,"points":85,"of":100,"checks":[)"
    R"({"check":"cause","points":40,"reason":"straggler, as the answer key"}]}],"total":85,"pass":true,)"
    R"("audit":{"records":57,"head":"3f1c"}})");

TEST_F(SigningTest, TheKeyIsMadeOwnerOnlyAndLoadedAgain) {
  auto a = ResultSigner::LoadOrCreate(Path("signing.pem"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(Path("signing.pem").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto b = ResultSigner::LoadOrCreate(Path("signing.pem"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*a)->KeyId(), (*b)->KeyId());
  EXPECT_EQ((*a)->KeyId().size(), 16u);
  auto id = PublicKeyId((*a)->PublicKeyPem());
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, (*a)->KeyId());
}

TEST_F(SigningTest, AFileWithoutAKeyIsRefusedAndKept) {
  { std::ofstream(Path("signing.pem")) << "not a key\n"; }
  auto s = ResultSigner::LoadOrCreate(Path("signing.pem"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("holds no Ed25519 private key"), std::string::npos);
  std::ifstream in(Path("signing.pem"));
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "not a key");
}

TEST_F(SigningTest, ASignedResultVerifiesWithItsKeyOnly) {
  auto signer = ResultSigner::LoadOrCreate(Path("signing.pem"));
  auto other = ResultSigner::LoadOrCreate(Path("other.pem"));
  ASSERT_TRUE(signer.ok() && other.ok());
  auto text = (*signer)->SignResult(kResult);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto result = VerifySignedResult(*text, (*signer)->PublicKeyPem(), "result.json");
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(*result), kResult);
  auto wrong = VerifySignedResult(*text, (*other)->PublicKeyPem(), "result.json");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("not by the key given"), std::string::npos);
  EXPECT_FALSE(VerifySignedResult(*text, "not a key", "result.json").ok());
}

TEST_F(SigningTest, OnlyAnExamResultIsSigned) {
  auto signer = ResultSigner::LoadOrCreate(Path("signing.pem"));
  ASSERT_TRUE(signer.ok());
  nlohmann::json other = kResult;
  other.erase("format");
  EXPECT_FALSE((*signer)->SignResult(other).ok());
  EXPECT_FALSE((*signer)->SignResult(nlohmann::json::array()).ok());
  // Text that is not UTF-8 is signed as it reads back, and verifies.
  nlohmann::json odd = kResult;
  odd["candidate"] = std::string("ad\xff");
  auto text = (*signer)->SignResult(odd);
  ASSERT_TRUE(text.ok());
  EXPECT_TRUE(VerifySignedResult(*text, (*signer)->PublicKeyPem(), "result.json").ok());
}

TEST_F(SigningTest, AKeyThatCannotBeReadIsNeverReplaced) {
  // Something is at the key's path that cannot be read as a file (root
  // reads any file, so a directory stands in for an unreadable one).
  fs::create_directories(Path("signing.pem"));
  auto s = ResultSigner::LoadOrCreate(Path("signing.pem"));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(fs::is_directory(Path("signing.pem")));
  fs::remove(Path("signing.pem"));
  auto a = ResultSigner::LoadOrCreate(Path("signing.pem"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto c = ResultSigner::LoadOrCreate(Path("signing.pem"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->KeyId(), (*a)->KeyId());
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename(), "signing.pem");  // no temp files
}

TEST_F(SigningTest, AChangedScoreOrAReformattedFileIsRefused) {
  auto signer = ResultSigner::LoadOrCreate(Path("signing.pem"));
  ASSERT_TRUE(signer.ok());
  auto text = (*signer)->SignResult(kResult);
  ASSERT_TRUE(text.ok());
  std::string changed = *text;
  changed.replace(changed.find("\"total\":85"), 10, "\"total\":95");
  auto v = VerifySignedResult(changed, (*signer)->PublicKeyPem(), "result.json");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("the signature does not match the result"), std::string::npos)
      << v.status().message();
  const std::string pretty = nlohmann::json::parse(*text).dump(2) + "\n";
  v = VerifySignedResult(pretty, (*signer)->PublicKeyPem(), "result.json");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("not a signed result as firedrill writes it"), std::string::npos);
}

TEST_F(SigningTest, EveryRandomByteChangeIsDetected) {
  auto signer = ResultSigner::LoadOrCreate(Path("signing.pem"));
  ASSERT_TRUE(signer.ok());
  auto text = (*signer)->SignResult(kResult);
  ASSERT_TRUE(text.ok());
  const std::string pem = (*signer)->PublicKeyPem();
  std::mt19937_64 rng(4711);
  int detected = 0;
  const int kTrials = 2000;
  for (int t = 0; t < kTrials; ++t) {
    std::string bad = *text;
    const size_t pos = rng() % bad.size();
    char c;
    do c = static_cast<char>(rng() & 0xff);
    while (c == bad[pos]);
    bad[pos] = c;
    if (!VerifySignedResult(bad, pem, "result.json").ok()) ++detected;
  }
  EXPECT_EQ(detected, kTrials);
}

}  // namespace
}  // namespace firedrill::controller
