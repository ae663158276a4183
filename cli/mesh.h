// `firedrill mesh`: the device mesh of the session's job, or of one given
// on the command line: each rank's tensor-, data- and pipeline-parallel
// coordinates and host, and which ranks form each group, with the hosts
// each group spans (what decides whether its traffic stays inside a host).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "parallel/mesh.h"

namespace firedrill::cli {

struct MeshCommand;

std::shared_ptr<MeshCommand> AddMeshCommand(CLI::App& app);
// Offline (--world given): nothing is asked of a controller. Otherwise the
// current session's job and hosts. nullopt when `mesh` was not the command.
std::optional<int> RunMeshOffline(MeshCommand& cmd, CliContext& ctx);
std::optional<int> RunMeshCommand(MeshCommand& cmd, CliContext& ctx, DrillClient& client);

// The table and the group maps; `hosts` by rank (empty: "-").
void PrintMesh(const parallel::Mesh& mesh, const std::vector<std::string>& hosts, std::ostream& out);
std::string MeshJson(const parallel::Mesh& mesh, const std::vector<std::string>& hosts);

}  // namespace firedrill::cli
