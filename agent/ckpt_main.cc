// firedrill-ckpt: list, verify and export checkpoints without a controller,
// so a learner (or a probe) can find the last good checkpoint to roll back to.
//
//   firedrill-ckpt list ROOT [--json]     newest first, each valid or why not
//   firedrill-ckpt verify STEP_DIR [--json]  exit 0 if loadable, else 1 + one line;
//                                         a loadable one's model replicas compared across ranks
//   firedrill-ckpt export STEP_DIR OUT [--format torch|safetensors]  model state for torch.load (weights_only too) or safetensors
//   firedrill-ckpt diff STEP_A STEP_B [--json]  two checkpoints of one job, part by part, bitwise
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "agent/checkpoint.h"
#include "agent/ckpt_diff.h"
#include "common/format.h"

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
                     {"created_unix_ms", c.created_unix_ms}, {"valid", c.valid}, {"manifest", c.manifest}, {"reason", c.reason},
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

// The replicas' agreement, in words: how many model tensors every rank's
// shard holds alike, and for each other one, which ranks hold which bytes.
std::string ReplicaText(const std::vector<fa::ReplicaTensor>& replicas) {
  int same = 0;
  std::string odd;
  for (const auto& t : replicas) {
    std::map<std::string, std::string> ranks_of;  // hash -> ranks
    for (size_t r = 0; r < t.sha256.size(); ++r)
      ranks_of[t.sha256[r]] += (ranks_of[t.sha256[r]].empty() ? "" : ",") + std::to_string(r);
    if (ranks_of.size() == 1) {
      ++same;
      continue;
    }
    odd += "\n  " + t.name + ":";
    for (const auto& [h, ranks] : ranks_of)
      odd += (ranks.find(',') == std::string::npos ? " rank " + ranks + " holds " : " ranks " + ranks + " hold ") +
             h.substr(0, 8) + ";";
    odd.pop_back();
  }
  return "model replicas: " + std::to_string(same) + " of " + std::to_string(replicas.size()) +
         " tensors are bitwise the same in every rank's shard" + odd;
}

// What rank 0's shard holds, part by part: "holds (rank 0): model 6
// tensors, optim 13 tensors, rng, loss_scaler, data_cursor (batch=520 ...), step 520".
std::string ContentsText(const std::string& step_dir) {
  auto shard = fa::LoadShard(step_dir, 0);
  if (!shard.ok()) return "";
  std::map<std::string, int> tensors;
  for (const auto& [name, t] : shard->tensors) ++tensors[fa::PartOf(name, true)];
  std::string out = "holds (rank 0's shard):";
  for (const char* part : {"model", "optim"})
    out += std::string(" ") + part + " " + std::to_string(tensors[part]) + " tensors,";
  out += tensors["rng"] > 0 ? " rng," : "";
  for (const auto& [name, value] : shard->blobs) {
    if (name == "job") continue;
    out += " " + name + (name == "loss_scaler" ? "" : " " + value) + ",";
  }
  out.pop_back();
  return out;
}

int Verify(const std::string& step_dir, bool as_json) {
  nlohmann::json out = {{"dir", step_dir}, {"valid", false}, {"replicas", nlohmann::json::array()}};
  auto report = [&](int code, const std::string& detail) {
    out["detail"] = detail;
    if (as_json) std::cout << out.dump(2) << "\n";
    else (code == 0 ? std::cout : std::cerr) << detail << "\n";
    return code;
  };
  firedrill::Status st = fa::VerifyCheckpoint(step_dir);
  if (!st.ok()) return report(1, st.message());
  auto m = fa::ReadManifest(step_dir);
  int64_t bytes = 0;
  for (const auto& s : m->shards) bytes += s.bytes;
  std::string detail = "checkpoint " + step_dir + ": valid (step " + std::to_string(m->step) + ", " +
                       std::to_string(m->world_size) + " shards, " + std::to_string(bytes) + " bytes, SHA-256 verified)";
  out["valid"] = true;
  const std::string contents_text = ContentsText(step_dir);
  if (!m->tensors.empty()) {
    // ZeRO-1 (format 2): rank 0 wrote the parameters, the others do not
    // hold a copy to hold them to.
    int partitioned = 0;
    for (const auto& [name, p] : m->tensors) partitioned += p.layout == "partitioned";
    out["layout"] = "partitioned";
    return report(0, detail + (contents_text.empty() ? "" : "\n" + contents_text) +
                         "\nlayout: the parameters written once (rank 0's shard), " + std::to_string(partitioned) +
                         " optimiser tensors partitioned across the " + std::to_string(m->world_size) +
                         " shards (ZeRO-1, format 2): no model replicas to compare in it (`firedrill probe "
                         "checksum` compares the running ranks')");
  }
  auto replicas = fa::CompareReplicas(step_dir);
  if (!replicas.ok()) return report(1, detail + "\nbut its replicas cannot be compared: " + replicas.status().message());
  for (const auto& t : *replicas) out["replicas"].push_back({{"name", t.name}, {"numel", t.numel}, {"sha256", t.sha256}});
  return report(0, detail + (contents_text.empty() ? "" : "\n" + contents_text) + "\n" + ReplicaText(*replicas));
}

int Diff(const std::string& a, const std::string& b, bool as_json) {
  auto d = fa::DiffCheckpoints(a, b);
  if (!d.ok()) {
    std::cerr << "firedrill-ckpt diff: " << d.status().message() << "\n";
    return 2;
  }
  bool same = true;
  nlohmann::json parts = nlohmann::json::array();
  for (const auto& p : d->parts) {
    same = same && p.differ == 0;
    parts.push_back({{"part", p.part}, {"entries", p.entries}, {"differ", p.differ}, {"ranks", p.ranks},
                     {"max_abs_diff", p.max_abs_diff}, {"a_value", p.a_value}, {"b_value", p.b_value},
                     {"first_differing", p.first_differing}, {"missing", p.missing}});
  }
  if (as_json) {
    // Blobs are bytes: any that are not UTF-8 are printed with U+FFFD.
    std::cout << nlohmann::json{{"a", a}, {"b", b}, {"world_size", d->world_size}, {"same", same}, {"parts", parts}}
                     .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    std::printf("%-12s %-8s %-7s %-10s %s\n", "PART", "ENTRIES", "DIFFER", "RANKS", "MAX |A-B|");
    for (const auto& p : d->parts) {
      std::string ranks;
      for (int r : p.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      const std::string what = firedrill::PartDiffText(p.differ, p.missing, p.max_abs_diff, p.a_value, p.b_value);
      std::printf("%-12s %-8d %-7d %-10s %s\n", p.part.c_str(), p.entries, p.differ, ranks.empty() ? "-" : ranks.c_str(),
                  what.c_str());
    }
  }
  return same ? 0 : 1;
}

int Export(const std::string& step_dir, const std::string& out, const std::string& format_name) {
  auto format = fa::ParseStateDictFormat(format_name, out);
  firedrill::Status st = format.ok() ? fa::ExportConsolidated(step_dir, out, *format) : format.status();
  if (!st.ok()) {
    std::cerr << st.message() << "\n";
    return 1;
  }
  std::cout << "exported the model state of " << step_dir << " to " << out
            << (*format == fa::StateDictFormat::kSafetensors
                    ? " (safetensors: safetensors.torch.load_file, or any reader of the format)\n"
                    : " (torch.save's format: torch.load, also with weights_only=True)\n");
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

  auto* verify = app.add_subcommand(
      "verify", "Check the manifest and every shard's size and SHA-256, then compare the ranks' model replicas");
  verify->add_option("STEP_DIR", step_dir, "a step-<N> folder")->required();
  verify->add_flag("--json", as_json, "machine-readable output");

  std::string format = "auto";
  auto* exp = app.add_subcommand("export", "Write the model state as one file: torch.save's format (torch.load, "
                                           "also with weights_only=True) or safetensors");
  exp->add_option("STEP_DIR", step_dir, "a step-<N> folder")->required();
  exp->add_option("OUT_FILE", out, "file to write")->required();
  exp->add_option("--format", format, "torch, safetensors, or auto: safetensors for a .safetensors file, else torch")
      ->capture_default_str();

  std::string other;
  auto* diff = app.add_subcommand("diff", "Compare two checkpoints of one job part by part (model, optim, rng, "
                                          "loss_scaler, data_cursor, step), bitwise; exit 0 if all the same, 1 if not");
  diff->add_option("STEP_A", step_dir, "a step-<N> folder")->required();
  diff->add_option("STEP_B", other, "another step-<N> folder of the same job")->required();
  diff->add_flag("--json", as_json, "machine-readable output");

  CLI11_PARSE(app, argc, argv);
  if (list->parsed()) return List(root, as_json);
  if (verify->parsed()) return Verify(step_dir, as_json);
  if (diff->parsed()) return Diff(step_dir, other, as_json);
  return Export(step_dir, out, format);
}
