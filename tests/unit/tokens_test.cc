#include "controller/exam/tokens.h"

#include <gtest/gtest.h>

namespace firedrill::controller {
namespace {

TEST(Tokens, ATokenFindsItsGrantAndTheBookKeepsOnlyItsDigest) {
  TokenBook book;
  std::string digest;
  const std::string token = book.Issue({"ada", kRoleCandidate, "infra", "", 1, false}, &digest);
  EXPECT_EQ(token.rfind("fdt_", 0), 0u);
  EXPECT_EQ(token.size(), 4u + 64u);
  auto g = book.Find(token);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->name, "ada");
  EXPECT_EQ(g->exam_id, "infra");
  for (const auto& [d, grant] : book.All()) {
    EXPECT_EQ(d, digest);
    EXPECT_EQ(d.find(token.substr(4)), std::string::npos);
  }
  EXPECT_EQ(digest, TokenDigest(token));
}

TEST(Tokens, UnknownEmptyAndRevokedTokensFindNothing) {
  TokenBook book;
  const std::string token = book.Issue({"bob", kRoleCandidate, "infra", "", 1, false});
  const std::string other = book.Issue({"cy", kRoleProctor, "", "", 1, false});
  EXPECT_FALSE(book.Find("").has_value());
  EXPECT_FALSE(book.Find(token + "0").has_value());
  EXPECT_FALSE(book.Find(token.substr(0, token.size() - 1)).has_value());
  EXPECT_EQ(book.Revoke("bob"), std::vector<std::string>{TokenDigest(token)});
  EXPECT_TRUE(book.Revoke("bob").empty());
  EXPECT_FALSE(book.Find(token).has_value());
  EXPECT_TRUE(book.Find(other).has_value());
  EXPECT_NE(token, other);
}

TEST(Tokens, ARestoredGrantAnswersTheSameToken) {
  TokenBook a;
  std::string digest;
  const std::string token = a.Issue({"lee", kRoleProctor | kRoleInstructor, "", "", 7, false}, &digest);
  TokenBook b;
  b.Restore(digest, *a.Find(token));
  auto g = b.Find(token);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->roles, kRoleProctor | kRoleInstructor);
}

TEST(Tokens, RolesParseAndPrint) {
  auto r = ParseRoles("commander+scribe");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, kRoleCommander | kRoleScribe);
  EXPECT_EQ(RoleNames(*r), "commander+scribe");
  auto bad = ParseRoles("investigater");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("did you mean 'investigator'"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(ParseRoles("").ok());
  auto empty = ParseRoles("proctor+");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("an empty role name in 'proctor+'"), std::string::npos);
}

}  // namespace
}  // namespace firedrill::controller
