#include "parallel/mesh.h"

#include <algorithm>

namespace firedrill::parallel {

const char* DimName(Dim d) {
  switch (d) {
    case Dim::kTp:
      return "tp";
    case Dim::kDp:
      return "dp";
    case Dim::kPp:
      return "pp";
  }
  return "?";
}

namespace {

int Index(Dim d) { return static_cast<int>(d); }

bool ParseDim(const std::string& s, Dim* out) {
  for (Dim d : {Dim::kTp, Dim::kDp, Dim::kPp}) {
    if (s == DimName(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

}  // namespace

StatusOr<Mesh> Mesh::Create(int world, int tp, int pp, const std::string& order) {
  if (world < 1) return InvalidArgument("world_size must be >= 1, got " + std::to_string(world));
  if (tp < 1) return InvalidArgument("parallel.tp must be >= 1, got " + std::to_string(tp));
  if (pp < 1) return InvalidArgument("parallel.pp must be >= 1, got " + std::to_string(pp));
  if (world % (tp * pp) != 0) {
    return InvalidArgument("parallel.tp x parallel.pp (" + std::to_string(tp) + " x " + std::to_string(pp) +
                           " = " + std::to_string(tp * pp) + ") must divide world_size " +
                           std::to_string(world) + "; the data-parallel size is what is left");
  }
  Mesh m;
  m.world_ = world;
  m.size_[Index(Dim::kTp)] = tp;
  m.size_[Index(Dim::kPp)] = pp;
  m.size_[Index(Dim::kDp)] = world / (tp * pp);
  const std::string text = order.empty() ? kDefaultOrder : order;
  std::vector<std::string> parts(1);  // "tp-dp-pp-" has an empty fourth part
  for (char c : text) {
    if (c == '-') {
      parts.emplace_back();
    } else {
      parts.back().push_back(c);
    }
  }
  std::array<bool, 3> seen{false, false, false};
  const std::string valid = " (the three of tp, dp and pp joined by '-', innermost first, e.g. tp-dp-pp)";
  if (parts.size() != 3)
    return InvalidArgument("parallel.order '" + text + "' must name three dimensions" + valid);
  for (size_t i = 0; i < 3; ++i) {
    Dim d;
    if (!ParseDim(parts[i], &d))
      return InvalidArgument("parallel.order '" + text + "': unknown dimension '" + parts[i] + "'" + valid);
    if (seen[Index(d)])
      return InvalidArgument("parallel.order '" + text + "' names " + parts[i] + " twice" + valid);
    seen[Index(d)] = true;
    m.order_[i] = d;
  }
  int stride = 1;
  for (Dim d : m.order_) {
    m.stride_[Index(d)] = stride;
    stride *= m.size_[Index(d)];
  }
  return m;
}

std::string Mesh::order_text() const {
  return std::string(DimName(order_[0])) + "-" + DimName(order_[1]) + "-" + DimName(order_[2]);
}

Coords Mesh::CoordsOf(int rank) const {
  Coords c;
  for (Dim d : order_) c[d] = (rank / stride_[Index(d)]) % size_[Index(d)];
  return c;
}

int Mesh::RankOf(const Coords& c) const {
  int r = 0;
  for (Dim d : order_) r += c[d] * stride_[Index(d)];
  return r;
}

std::vector<int> Mesh::Group(Dim d, int rank) const {
  Coords c = CoordsOf(rank);
  std::vector<int> g;
  for (int i = 0; i < size(d); ++i) {
    c[d] = i;
    g.push_back(RankOf(c));
  }
  return g;
}

std::vector<std::vector<int>> Mesh::Groups(Dim d) const {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < world_; ++r) {
    if (CoordsOf(r)[d] == 0) out.push_back(Group(d, r));
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool CrossesHosts(const std::vector<int>& group, int ranks_per_host) {
  for (int r : group) {
    if (HostOfRank(r, ranks_per_host) != HostOfRank(group.front(), ranks_per_host)) return true;
  }
  return false;
}

}  // namespace firedrill::parallel
