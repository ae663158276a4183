#include "controller/exam/audit_chain.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace firedrill::controller {
namespace {

std::vector<AuditRecord> Trail(int n) {
  std::vector<AuditRecord> out;
  AuditHead head;
  for (int i = 0; i < n; ++i) {
    auto r = NextAuditRecord(head, 1'700'000'000'000 + i * 1000, i % 3 ? "candidate:ada" : "controller",
                             i % 2 ? "RunProbe" : "Diagnose",
                             R"({"kind":"allreduce","ranks":[0,1,2,3],"note":"rank 2 \"slow\", é"})");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    out.push_back(*r);
    head = HeadAfter(*r);
  }
  return out;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    out.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

TEST(AuditChain, ATrailVerifiesAndEndsAtItsHead) {
  const auto trail = Trail(40);
  auto head = VerifyAuditText(AuditText(trail), "audit.jsonl");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(*head, HeadAfter(trail.back()));
  EXPECT_EQ(head->count, 40);
  EXPECT_EQ(trail[0].prev, kAuditGenesis);
  EXPECT_EQ(trail[1].prev, trail[0].hash);
  auto empty = VerifyAuditText("", "audit.jsonl");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->count, 0);
}

TEST(AuditChain, AnEditedRecordIsNamedByItsLine) {
  auto lines = Lines(AuditText(Trail(10)));
  const size_t at = lines[5].find("RunProbe");  // record 6
  ASSERT_NE(at, std::string::npos);
  lines[5].replace(at, 8, "RunProbf");
  auto v = VerifyAuditText(Join(lines), "audit.jsonl");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("audit.jsonl:6: record 6's hash does not match its contents"),
            std::string::npos)
      << v.status().message();
}

TEST(AuditChain, ARemovedOrReorderedRecordIsNamed) {
  auto lines = Lines(AuditText(Trail(10)));
  auto removed = lines;
  removed.erase(removed.begin() + 4);
  auto v = VerifyAuditText(Join(removed), "audit.jsonl");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("audit.jsonl:5: holds record 6 where record 5 belongs"),
            std::string::npos)
      << v.status().message();
  auto swapped = lines;
  std::swap(swapped[2], swapped[3]);
  v = VerifyAuditText(Join(swapped), "audit.jsonl");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("audit.jsonl:3:"), std::string::npos) << v.status().message();
}

TEST(AuditChain, ACutOffOrRewrittenTrailFailsAgainstTheAnchoredHead) {
  const auto trail = Trail(10);
  const AuditHead anchored = HeadAfter(trail.back());
  // The last two records cut off: the rest still chains, the anchor does not.
  const std::vector<AuditRecord> cut(trail.begin(), trail.end() - 2);
  std::vector<std::string> hashes;
  auto head = VerifyAuditText(AuditText(cut), "audit.jsonl", &hashes);
  ASSERT_TRUE(head.ok());
  Status s = CheckAuditAnchor(hashes, anchored, "audit.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cut off"), std::string::npos) << s.message();
  // Record 3 edited and every hash after it recomputed: a valid chain, but not
  // the one the result anchors.
  AuditHead h;
  std::vector<AuditRecord> rewritten;
  for (const auto& r : trail) {
    auto n = NextAuditRecord(h, r.unix_ms, r.actor, r.seq == 3 ? "Hint" : r.action, r.args);
    ASSERT_TRUE(n.ok());
    rewritten.push_back(*n);
    h = HeadAfter(*n);
  }
  head = VerifyAuditText(AuditText(rewritten), "audit.jsonl", &hashes);
  ASSERT_TRUE(head.ok());
  s = CheckAuditAnchor(hashes, anchored, "audit.jsonl");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rewritten"), std::string::npos) << s.message();
  // Records added after the result (a rescore) leave its anchor in place.
  auto later = NextAuditRecord(anchored, 99, "proctor:lee", "Rescore", "{}");
  ASSERT_TRUE(later.ok());
  std::vector<AuditRecord> longer = trail;
  longer.push_back(*later);
  head = VerifyAuditText(AuditText(longer), "audit.jsonl", &hashes);
  ASSERT_TRUE(head.ok());
  EXPECT_TRUE(CheckAuditAnchor(hashes, anchored, "audit.jsonl").ok());
  EXPECT_FALSE(CheckAuditAnchor(hashes, {0, kAuditGenesis}, "audit.jsonl").ok());
}

TEST(AuditChain, EveryRandomByteChangeIsDetected) {
  const auto trail = Trail(30);
  const std::string text = AuditText(trail);
  const AuditHead anchored = HeadAfter(trail.back());
  std::mt19937_64 rng(20261206);
  int detected = 0;
  const int kTrials = 2000;
  for (int t = 0; t < kTrials; ++t) {
    std::string bad = text;
    const size_t pos = rng() % bad.size();
    char c;
    do c = static_cast<char>(rng() & 0xff);
    while (c == bad[pos]);
    bad[pos] = c;
    std::vector<std::string> hashes;
    auto head = VerifyAuditText(bad, "audit.jsonl", &hashes);
    if (!head.ok() || !CheckAuditAnchor(hashes, anchored, "audit.jsonl").ok()) ++detected;
  }
  EXPECT_EQ(detected, kTrials);
}

TEST(AuditChain, ArgumentsMustBeAJsonObject) {
  EXPECT_FALSE(NextAuditRecord({}, 1, "proctor", "Rescore", "[1,2]").ok());
  EXPECT_FALSE(NextAuditRecord({}, 1, "proctor", "Rescore", "{oops").ok());
  EXPECT_TRUE(NextAuditRecord({}, 1, "proctor", "Rescore", "").ok());
}

TEST(AuditChain, BytesThatAreNotUtf8AreRecordedAsTheyWillReadBack) {
  auto r = NextAuditRecord({}, 1, std::string("candidate:\xff\xfe"), "Note", "{}");
  ASSERT_TRUE(r.ok());
  auto head = VerifyAuditText(AuditText({*r}), "audit.jsonl");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->hash, r->hash);
}

}  // namespace
}  // namespace firedrill::controller
