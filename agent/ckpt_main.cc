// firedrill-ckpt: list, verify and export checkpoints without a controller,
// so a learner (or a probe) can find the last good checkpoint to roll back to.
//
//   firedrill-ckpt list ROOT [--json]     newest first, each valid or why not
//   firedrill-ckpt verify STEP_DIR        exit 0 if loadable, else 1 + one line
//   firedrill-ckpt export STEP_DIR OUT    model state for Python's torch.load
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "agent/checkpoint.h"

namespace fa = firedrill::agent;

namespace {

int List(const std::string& root, bool as_json) {
  auto list = fa::ListCheckpoints(root);
  if (!list.ok()) {
    std::cerr << "firedrill-ckpt: " << list.status().message() << "\n";
    return 1;
  }
  if (as_json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& c : *list)
      out.push_back({{"step", c.step}, {"dir", c.dir}, {"world_size", c.world_size}, {"shards", c.shards},
                     {"bytes", c.bytes}, {"created", c.created_unix_ms ? fa::FormatUtc(c.created_unix_ms) : ""},
                     {"created_unix_ms", c.created_unix_ms}, {"valid", c.valid}, {"reason", c.reason},
                     {"error", c.error}});
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (list->empty()) {
    std::cout << "no checkpoints under " << root << "\n";
    return 0;
  }
  std::printf("%-10s %-6s %-7s %-14s %-21s %s\n", "STEP", "WORLD", "SHARDS", "BYTES", "CREATED", "STATUS");
  for (const auto& c : *list) {
    const std::string world = c.world_size ? std::to_string(c.world_size) : "-";
    const std::string created = c.created_unix_ms ? fa::FormatUtc(c.created_unix_ms) : "-";
    const std::string status = c.valid ? "valid" : "INVALID: " + c.reason;
    std::printf("%-10lld %-6s %-7d %-14lld %-21s %s\n", static_cast<long long>(c.step), world.c_str(), c.shards,
                static_cast<long long>(c.bytes), created.c_str(), status.c_str());
  }
  return 0;
}

int Verify(const std::string& step_dir) {
  firedrill::Status st = fa::VerifyCheckpoint(step_dir);
  if (!st.ok()) {
    std::cerr << st.message() << "\n";
    return 1;
  }
  auto m = fa::ReadManifest(step_dir);
  int64_t bytes = 0;
  for (const auto& s : m->shards) bytes += s.bytes;
  std::cout << "checkpoint " << step_dir << ": valid (step " << m->step << ", " << m->world_size << " shards, " << bytes
            << " bytes, SHA-256 verified)\n";
  return 0;
}

int Export(const std::string& step_dir, const std::string& out) {
  firedrill::Status st = fa::ExportConsolidated(step_dir, out);
  if (!st.ok()) {
    std::cerr << st.message() << "\n";
    return 1;
  }
  std::cout << "exported the model state of " << step_dir << " to " << out << " (load it with torch.load)\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"List, verify and export firedrill checkpoints"};
  app.require_subcommand(1);
  std::string root, step_dir, out;
  bool as_json = false;

  auto* list = app.add_subcommand("list", "List the checkpoints under ROOT, newest first, each valid or why not");
  list->add_option("ROOT", root, "checkpoint root (holds step-<N> folders)")->required();
  list->add_flag("--json", as_json, "machine-readable output");

  auto* verify = app.add_subcommand("verify", "Check the manifest and every shard's size and SHA-256");
  verify->add_option("STEP_DIR", step_dir, "a step-<N> folder")->required();

  auto* exp = app.add_subcommand("export", "Write the model state as one file that Python's torch.load reads");
  exp->add_option("STEP_DIR", step_dir, "a step-<N> folder")->required();
  exp->add_option("OUT_FILE", out, "file to write")->required();

  CLI11_PARSE(app, argc, argv);
  if (list->parsed()) return List(root, as_json);
  if (verify->parsed()) return Verify(step_dir);
  return Export(step_dir, out);
}
