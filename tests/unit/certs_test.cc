// `firedrill certs`: the CA and server pair it writes, checked with OpenSSL's
// own chain verification.
#include "cli/certs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace firedrill::cli {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

unsigned Mode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 0777) : 0;
}

class CertsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fd_certs_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST_F(CertsTest, TheServerCertificateNamesItsHostsAndChainsToTheCa) {
  auto f = MakeCerts(dir_ + "/tls", {"drills.example.org", "127.0.0.1", "::1"}, 30);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(Mode(f->ca_key), 0600u);
  EXPECT_EQ(Mode(f->server_key), 0600u);
  EXPECT_EQ(Mode(dir_ + "/tls"), 0700u);
  auto names = CertNames(Slurp(f->server_cert));
  ASSERT_TRUE(names.ok()) << names.status().message();
  EXPECT_EQ(*names, (std::vector<std::string>{"DNS:drills.example.org", "IP:127.0.0.1", "IP:::1"}));
  auto signed_by = CertSignedBy(Slurp(f->server_cert), Slurp(f->ca_cert));
  ASSERT_TRUE(signed_by.ok()) << signed_by.status().message();
  EXPECT_TRUE(*signed_by);

  // Another CA did not sign it.
  auto other = MakeCerts(dir_ + "/other", {"localhost"}, 30);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(*CertSignedBy(Slurp(f->server_cert), Slurp(other->ca_cert)));
}

TEST_F(CertsTest, AnExistingCaSignsTheNextPairAndNothingIsOverwritten) {
  auto first = MakeCerts(dir_, {"localhost"}, 30);
  ASSERT_TRUE(first.ok()) << first.status().message();
  const std::string ca = Slurp(first->ca_cert);
  const std::string server = Slurp(first->server_cert);
  auto again = MakeCerts(dir_, {"localhost"}, 30);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("never overwrites"), std::string::npos) << again.status().message();
  EXPECT_EQ(Slurp(first->server_cert), server);

  fs::remove(first->server_cert);
  fs::remove(first->server_key);
  auto next = MakeCerts(dir_, {"10.0.0.7"}, 30);
  ASSERT_TRUE(next.ok()) << next.status().message();
  EXPECT_EQ(Slurp(next->ca_cert), ca);  // the same CA: clients need nothing new
  EXPECT_NE(Slurp(next->server_cert), server);
  EXPECT_TRUE(*CertSignedBy(Slurp(next->server_cert), ca));
}

TEST_F(CertsTest, BadArgumentsAreNamed) {
  EXPECT_EQ(MakeCerts(dir_, {}, 30).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeCerts(dir_, {"a b"}, 30).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeCerts(dir_, {"localhost"}, 0).status().code(), StatusCode::kInvalidArgument);
  std::ofstream(dir_ + "/ca.pem") << "not a certificate\n";
  auto half = MakeCerts(dir_, {"localhost"}, 30);
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("without the other"), std::string::npos) << half.status().message();
}

TEST_F(CertsTest, AHalfServerPairOrACaThatExpiresTooSoonIsRefusedBeforeAnythingIsWritten) {
  auto first = MakeCerts(dir_, {"localhost"}, 2);
  ASSERT_TRUE(first.ok()) << first.status().message();
  fs::remove(first->server_key);
  auto half = MakeCerts(dir_, {"localhost"}, 2);
  ASSERT_FALSE(half.ok());
  EXPECT_FALSE(fs::exists(first->server_key));  // no key written beside a certificate it does not match
  fs::remove(first->server_cert);
  // The CA has 2 days left: a 30-day server certificate would outlive it.
  auto longer = MakeCerts(dir_, {"localhost"}, 30);
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.status().message().find("expires"), std::string::npos) << longer.status().message();
  EXPECT_FALSE(fs::exists(first->server_cert));
  EXPECT_TRUE(MakeCerts(dir_, {"localhost"}, 1).ok());
}

}  // namespace
}  // namespace firedrill::cli
