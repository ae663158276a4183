// The device mesh of a model-parallel job: world = tp x dp x pp ranks laid
// out along three dimensions, and which ranks form each tensor-parallel,
// data-parallel and pipeline group.
//
//   auto mesh = Mesh::Create(/*world=*/8, /*tp=*/2, /*pp=*/2, "tp-dp-pp");
//   mesh->CoordsOf(5)                 // {tp 1, dp 0, pp 1}
//   mesh->Group(Dim::kTp, 5)          // {4, 5}: rank 5's tensor-parallel group
//   mesh->Groups(Dim::kDp)            // {{0,2},{1,3},{4,6},{5,7}}
//
// The order names the dimensions from the one whose neighbours are adjacent
// ranks (stride 1) outwards, as Megatron-LM's `order` does ("tp-cp-ep-dp-pp"
// is its default: tensor-parallel partners are consecutive ranks, so they
// share a host, and pipeline stages are the furthest apart). Ranks are
// placed on hosts in rank order, `ranks_per_host` to a host, so the order
// decides which groups cross hosts. No LibTorch.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "common/status.h"

namespace firedrill::parallel {

enum class Dim { kTp = 0, kDp = 1, kPp = 2 };

const char* DimName(Dim d);  // "tp" | "dp" | "pp"

struct Coords {
  int tp = 0, dp = 0, pp = 0;
  int& operator[](Dim d) { return d == Dim::kTp ? tp : d == Dim::kDp ? dp : pp; }
  int operator[](Dim d) const { return d == Dim::kTp ? tp : d == Dim::kDp ? dp : pp; }
  bool operator==(const Coords& o) const { return tp == o.tp && dp == o.dp && pp == o.pp; }
};

// The default order: tensor-parallel partners adjacent, then data-parallel
// replicas, pipeline stages outermost.
inline constexpr const char* kDefaultOrder = "tp-dp-pp";

class Mesh {
 public:
  // dp = world / (tp x pp). `order`: the three of "tp", "dp", "pp" joined by
  // '-', innermost first; empty means kDefaultOrder. Errors say which value
  // is wrong and what would be valid.
  static StatusOr<Mesh> Create(int world, int tp, int pp, const std::string& order);

  int world() const { return world_; }
  int size(Dim d) const { return size_[static_cast<int>(d)]; }
  // Innermost first.
  const std::array<Dim, 3>& order() const { return order_; }
  std::string order_text() const;

  Coords CoordsOf(int rank) const;
  int RankOf(const Coords& c) const;
  // The ranks of `rank`'s group along `d` (those that differ from it only in
  // that coordinate), by that coordinate: element i has coordinate i.
  std::vector<int> Group(Dim d, int rank) const;
  // Every group along `d`, ordered by their first rank.
  std::vector<std::vector<int>> Groups(Dim d) const;

 private:
  Mesh() = default;
  int world_ = 1;
  std::array<int, 3> size_{1, 1, 1};    // by Dim
  std::array<int, 3> stride_{1, 1, 1};  // by Dim
  std::array<Dim, 3> order_{Dim::kTp, Dim::kDp, Dim::kPp};
};

// Hosts in rank order: ranks [h x n, (h+1) x n) are host h.
inline int HostOfRank(int rank, int ranks_per_host) { return ranks_per_host > 0 ? rank / ranks_per_host : 0; }
// Whether the group's ranks sit on more than one host.
bool CrossesHosts(const std::vector<int>& group, int ranks_per_host);

}  // namespace firedrill::parallel
