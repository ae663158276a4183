#include "cli/mesh.h"

#include <algorithm>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <set>

namespace firedrill::cli {

using parallel::Dim;

struct MeshCommand {
  CLI::App* cmd = nullptr;
  int world = 0, tp = 1, pp = 1, ranks_per_host = 1;
  std::string order;
};

std::shared_ptr<MeshCommand> AddMeshCommand(CLI::App& app) {
  auto c = std::make_shared<MeshCommand>();
  c->cmd = app.add_subcommand(
      "mesh",
      "the job's device mesh: each rank's TP, DP and PP coordinates and host, and the ranks of each group");
  c->cmd
      ->add_option("--world", c->world,
                   "a mesh of this many ranks instead of the session's job (no controller)")
      ->check(CLI::Range(1, 4096));
  c->cmd->add_option("--tp", c->tp, "with --world: tensor-parallel size")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  c->cmd->add_option("--pp", c->pp, "with --world: pipeline stages")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  c->cmd->add_option("--order", c->order, "with --world: the mesh order, innermost first (default tp-dp-pp)");
  c->cmd->add_option("--ranks-per-host", c->ranks_per_host, "with --world: ranks on each host, in rank order")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  return c;
}

namespace {

std::string HostOf(const std::vector<std::string>& hosts, int rank) {
  return rank < static_cast<int>(hosts.size()) && !hosts[rank].empty() ? hosts[rank] : "-";
}

// The distinct hosts of a group, in the group's order.
std::vector<std::string> HostsOf(const std::vector<int>& group, const std::vector<std::string>& hosts) {
  std::vector<std::string> out;
  for (int r : group) {
    const std::string h = HostOf(hosts, r);
    if (std::find(out.begin(), out.end(), h) == out.end()) out.push_back(h);
  }
  return out;
}

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

const char* WhatItCarries(Dim d) {
  switch (d) {
    case Dim::kTp:
      return "activations: 2 all-reduces forward and 2 backward per block and micro-batch";
    case Dim::kDp:
      return "gradients: the bucketed all-reduce once per step";
    case Dim::kPp:
      return "activations forward and their gradients backward, stage to stage, per micro-batch";
  }
  return "";
}

}  // namespace

void PrintMesh(const parallel::Mesh& m, const std::vector<std::string>& hosts, std::ostream& out) {
  out << "mesh: " << m.world() << " rank" << (m.world() == 1 ? "" : "s") << " = tp " << m.size(Dim::kTp)
      << " x dp " << m.size(Dim::kDp) << " x pp " << m.size(Dim::kPp) << ", order " << m.order_text()
      << " (innermost first: " << DimName(m.order()[0]) << " partners are adjacent ranks)\n\n";
  out << std::left << std::setw(6) << "RANK" << std::setw(16) << "HOST" << std::setw(5) << "TP"
      << std::setw(5) << "DP"
      << "PP\n";
  for (int r = 0; r < m.world(); ++r) {
    const parallel::Coords c = m.CoordsOf(r);
    out << std::setw(6) << r << std::setw(16) << HostOf(hosts, r) << std::setw(5) << c.tp << std::setw(5)
        << c.dp << c.pp << "\n";
  }
  for (Dim d : {Dim::kTp, Dim::kDp, Dim::kPp}) {
    const auto groups = m.Groups(d);
    out << "\n"
        << DimName(d) << " groups: " << groups.size() << " of " << m.size(d) << " rank"
        << (m.size(d) == 1 ? "" : "s") << " each (" << WhatItCarries(d) << ")\n";
    for (const auto& g : groups) {
      const auto spans = HostsOf(g, hosts);
      std::string h;
      for (const auto& s : spans) h += (h.empty() ? "" : ", ") + s;
      out << "  {" << std::setw(12) << (Join(g) + "}") << " " << spans.size() << " host"
          << (spans.size() == 1 ? ": " : "s: ") << h << "\n";
    }
  }
}

std::string MeshJson(const parallel::Mesh& m, const std::vector<std::string>& hosts) {
  nlohmann::json j;
  j["world"] = m.world();
  j["tp"] = m.size(Dim::kTp);
  j["dp"] = m.size(Dim::kDp);
  j["pp"] = m.size(Dim::kPp);
  j["order"] = m.order_text();
  j["ranks"] = nlohmann::json::array();
  for (int r = 0; r < m.world(); ++r) {
    const parallel::Coords c = m.CoordsOf(r);
    j["ranks"].push_back({{"rank", r}, {"host", HostOf(hosts, r)}, {"tp", c.tp}, {"dp", c.dp}, {"pp", c.pp}});
  }
  for (Dim d : {Dim::kTp, Dim::kDp, Dim::kPp}) {
    auto& list = j["groups"][DimName(d)] = nlohmann::json::array();
    for (const auto& g : m.Groups(d)) list.push_back({{"ranks", g}, {"hosts", HostsOf(g, hosts)}});
  }
  return j.dump();
}

namespace {

int Show(const CliContext& ctx, const StatusOr<parallel::Mesh>& mesh, const std::vector<std::string>& hosts) {
  if (!mesh.ok()) return Fail(ctx, mesh.status());
  if (ctx.json) {
    *ctx.out << MeshJson(*mesh, hosts) << "\n";
  } else {
    PrintMesh(*mesh, hosts, *ctx.out);
  }
  return 0;
}

}  // namespace

std::optional<int> RunMeshOffline(MeshCommand& c, CliContext& ctx) {
  if (!c.cmd->parsed()) return std::nullopt;
  const bool shape_given = c.cmd->count("--tp") + c.cmd->count("--pp") + c.cmd->count("--order") +
                               c.cmd->count("--ranks-per-host") >
                           0;
  if (c.world == 0) {
    if (shape_given)
      return Fail(ctx,
                  InvalidArgument("mesh: --tp, --pp, --order and --ranks-per-host describe a mesh of --world "
                                  "ranks; without --world the session's job is shown"));
    return std::nullopt;  // the session's: needs the controller
  }
  std::vector<std::string> hosts;
  for (int r = 0; r < c.world; ++r)
    hosts.push_back("host-" + std::to_string(parallel::HostOfRank(r, c.ranks_per_host)));
  return Show(ctx, parallel::Mesh::Create(c.world, c.tp, c.pp, c.order), hosts);
}

std::optional<int> RunMeshCommand(MeshCommand& c, CliContext& ctx, DrillClient& client) {
  if (!c.cmd->parsed()) return std::nullopt;
  auto id = CurrentSession(ctx);
  if (!id.ok()) return Fail(ctx, id.status());
  auto st = client.GetStatus(*id);
  if (!st.ok()) return Fail(ctx, st.status());
  const v1::JobSpec& job = st->job();
  std::vector<std::string> hosts(job.world_size());
  for (const auto& r : st->ranks())
    if (r.rank() >= 0 && r.rank() < job.world_size()) hosts[r.rank()] = r.host();
  return Show(ctx,
              parallel::Mesh::Create(job.world_size(), std::max(1, job.parallel().tp()),
                                     std::max(1, job.parallel().pp()), job.parallel().order()),
              hosts);
}

}  // namespace firedrill::cli
