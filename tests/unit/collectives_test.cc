// The collectives' one-place definitions: nccl-tests' bus bandwidth factors,
// the ring's link bytes, and a probe's validation checked against a
// reference computed here from the definitions of the collectives.
#include "collectives/collective.h"

#include <gtest/gtest.h>

#include <vector>

namespace firedrill::collectives {
namespace {

TEST(Collectives, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(Find("allreduce")->busbw_factor(4), 1.5);
  EXPECT_DOUBLE_EQ(Find("allreduce")->busbw_factor(2), 1.0);
  EXPECT_DOUBLE_EQ(Find("allgather")->busbw_factor(4), 0.75);
  EXPECT_DOUBLE_EQ(Find("reducescatter")->busbw_factor(8), 0.875);
  EXPECT_DOUBLE_EQ(Find("allreduce")->busbw_factor(1), 0.0);
  EXPECT_DOUBLE_EQ(Find("p2p")->busbw_factor(4), 1.0);
  EXPECT_EQ(Find("gremlin"), nullptr);
  EXPECT_EQ(ProbeNames(), "allreduce, allgather, reducescatter, p2p");
}

TEST(Collectives, LinkBytesAreWhatARingMovesAndAgreeWithBusBandwidth) {
  EXPECT_EQ(Find("allreduce")->link_bytes(1000, 4), 1500);
  EXPECT_EQ(Find("allgather")->link_bytes(1000, 4), 750);
  EXPECT_EQ(Find("reducescatter")->link_bytes(1000, 4), 750);
  EXPECT_EQ(Find("broadcast")->link_bytes(1000, 4), 1000);
  EXPECT_EQ(Find("send")->link_bytes(1000, 4), 1000);
  EXPECT_EQ(Find("barrier")->link_bytes(1000, 4), 0);
  EXPECT_EQ(Find("allreduce")->link_bytes(1000, 1), 0) << "nothing crosses a link";
  // busbw is link bytes per byte of buffer, for every collective.
  for (const Collective* c : All())
    for (int n : {2, 4, 8}) EXPECT_DOUBLE_EQ(c->busbw_factor(n), c->link_bytes(1 << 20, n) / double(1 << 20)) << c->name << " n=" << n;
}

// Runs a sweeping collective by its definition over `n` simulated ranks and
// compares with the collective's expected output.
TEST(Collectives, ValidationInputsAndExpectedOutputsAgree) {
  const int n = 4;
  for (const char* name : {"allreduce", "allgather", "reducescatter"}) {
    const Collective& c = *Find(name);
    const Buffers b = c.buffers(1000, n);  // 250 elements, rounded to a multiple of 4 where split
    if (b.out > 0 || b.in != b.count) ASSERT_EQ(b.count % n, 0) << name;
    const int64_t part = b.count / n;
    std::vector<std::vector<float>> in(n);
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < b.in; ++i) in[r].push_back(c.input(r, n, part, i));
    for (int r = 0; r < n; ++r) {
      const int64_t outs = b.out > 0 ? b.out : b.in;
      for (int64_t i = 0; i < outs; ++i) {
        float want = 0;
        if (std::string(name) == "allreduce") {
          for (int q = 0; q < n; ++q) want += in[q][i];
        } else if (std::string(name) == "allgather") {
          want = in[i / part][i % part];
        } else {
          for (int q = 0; q < n; ++q) want += in[q][r * part + i];
        }
        ASSERT_EQ(c.expected(r, n, part, i), want) << name << " rank " << r << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace firedrill::collectives
