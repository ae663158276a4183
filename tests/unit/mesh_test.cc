#include "parallel/mesh.h"

#include <gtest/gtest.h>

#include <set>

namespace firedrill::parallel {
namespace {

using Groups = std::vector<std::vector<int>>;

// Megatron-LM's initialize_model_parallel docstring, 16 GPUs, TP 2, PP 4
// (so DP 2), its default order: the same groups, rank for rank.
TEST(Mesh, MatchesMegatronsExampleForSixteenRanks) {
  auto m = Mesh::Create(16, 2, 4, "");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->size(Dim::kDp), 2);
  EXPECT_EQ(m->order_text(), "tp-dp-pp");
  EXPECT_EQ(m->Groups(Dim::kTp),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(m->Groups(Dim::kPp), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(m->Groups(Dim::kDp),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
}

TEST(Mesh, CoordinatesRoundTripAndGroupsPartitionTheWorld) {
  for (const char* order : {"tp-dp-pp", "dp-tp-pp", "pp-tp-dp", "tp-pp-dp", "dp-pp-tp", "pp-dp-tp"}) {
    auto m = Mesh::Create(24, 2, 3, order);
    ASSERT_TRUE(m.ok()) << order << ": " << m.status().message();
    EXPECT_EQ(m->order_text(), order);
    std::set<std::vector<int>> seen_coords;
    for (int r = 0; r < 24; ++r) {
      const Coords c = m->CoordsOf(r);
      EXPECT_EQ(m->RankOf(c), r) << order;
      EXPECT_LT(c.tp, 2);
      EXPECT_LT(c.pp, 3);
      EXPECT_LT(c.dp, 4);
      seen_coords.insert({c.tp, c.dp, c.pp});
    }
    EXPECT_EQ(seen_coords.size(), 24u) << order;
    for (Dim d : {Dim::kTp, Dim::kDp, Dim::kPp}) {
      std::vector<int> count(24, 0);
      const auto groups = m->Groups(d);
      EXPECT_EQ(static_cast<int>(groups.size()), 24 / m->size(d)) << order << " " << DimName(d);
      for (const auto& g : groups) {
        ASSERT_EQ(static_cast<int>(g.size()), m->size(d));
        for (int i = 0; i < m->size(d); ++i) {
          ++count[g[i]];
          // Element i holds coordinate i; the other coordinates are shared.
          Coords c = m->CoordsOf(g[i]), c0 = m->CoordsOf(g[0]);
          EXPECT_EQ(c[d], i);
          c[d] = 0;
          c0[d] = 0;
          EXPECT_TRUE(c == c0) << order << " " << DimName(d);
          EXPECT_EQ(m->Group(d, g[i]), g);
        }
      }
      for (int r = 0; r < 24; ++r) EXPECT_EQ(count[r], 1) << order << " " << DimName(d) << " rank " << r;
    }
  }
}

// Two ranks per host: the default order keeps every TP pair on one host;
// data-parallel innermost splits each TP pair across two hosts.
TEST(Mesh, TheOrderDecidesWhichGroupsCrossHosts) {
  auto good = Mesh::Create(8, 2, 2, "tp-dp-pp");
  auto bad = Mesh::Create(8, 2, 2, "dp-tp-pp");
  ASSERT_TRUE(good.ok() && bad.ok());
  for (const auto& g : good->Groups(Dim::kTp)) EXPECT_FALSE(CrossesHosts(g, 2)) << g[0] << "," << g[1];
  for (const auto& g : bad->Groups(Dim::kTp)) EXPECT_TRUE(CrossesHosts(g, 2)) << g[0] << "," << g[1];
  EXPECT_EQ(bad->Groups(Dim::kTp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(HostOfRank(5, 2), 2);
  EXPECT_EQ(HostOfRank(5, 0), 0);
}

TEST(Mesh, PlainDataParallelIsTheDegenerateMesh) {
  auto m = Mesh::Create(4, 1, 1, "");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->size(Dim::kDp), 4);
  EXPECT_EQ(m->Groups(Dim::kDp), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(m->Groups(Dim::kTp).size(), 4u);
  EXPECT_EQ(m->Group(Dim::kPp, 3), (std::vector<int>{3}));
}

TEST(Mesh, BadShapesAndOrdersSayWhatIsWrong) {
  auto not_dividing = Mesh::Create(8, 3, 1, "");
  ASSERT_FALSE(not_dividing.ok());
  EXPECT_NE(not_dividing.status().message().find("must divide world_size 8"), std::string::npos)
      << not_dividing.status().message();
  EXPECT_FALSE(Mesh::Create(8, 0, 1, "").ok());
  EXPECT_FALSE(Mesh::Create(0, 1, 1, "").ok());
  for (const char* order :
       {"tp-dp", "tp-dp-pp-cp", "tp-tp-pp", "tp-dp-xx", "tpdppp", "tp-dp-pp-", "-tp-dp"}) {
    auto m = Mesh::Create(8, 2, 2, order);
    ASSERT_FALSE(m.ok()) << order;
    EXPECT_NE(m.status().message().find("parallel.order '" + std::string(order) + "'"), std::string::npos)
        << m.status().message();
    EXPECT_NE(m.status().message().find("tp-dp-pp"), std::string::npos) << m.status().message();
  }
}

}  // namespace
}  // namespace firedrill::parallel
