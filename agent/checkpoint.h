// Sharded, verified checkpoints.
//
// Layout: <root>/step-<N>/rank-<r>.pt (one shard per rank) + manifest.json.
// A checkpoint is complete only once manifest.json exists; the manifest lists
// every shard with its size and SHA-256, so a torn, truncated or tampered
// checkpoint is refused on load instead of silently resuming from bad state.
//
// Write protocol (the trainer drives it; nothing here talks to c10d):
//   1. every rank:  WriteShard(step_dir, rank, data, &info)
//      (atomic: temp file in step_dir, fsync, rename, fsync of the directory;
//      size and SHA-256 are computed from the bytes as written, no re-read)
//   2. gather the ShardInfos on rank 0 (e.g. sizes + the 32 digest bytes via an
//      all-gather), or, with a shared file system, barrier and call
//      DescribeShard() on rank 0 for each rank (re-reads and hashes the file)
//   3. rank 0:      WriteManifest(step_dir, manifest) - written last, atomically
//   4. rank 0:      PruneCheckpoints(root, keep) if wanted
// Every WriteShard first removes a manifest left in step_dir by an earlier
// write of the same step, before its own shard replaces the old one, so a
// crash mid-rewrite reads as "incomplete", never as a stale manifest that
// vouches for a different set of shards.
//
// Shard format: torch::jit::pickle_save of one c10::Dict<std::string, Tensor>
// (the zip container of Python's torch.save; Python's torch.load opens it).
// Keys are "tensor/<name>" for ShardData::tensors and "blob/<name>" for
// ShardData::blobs, a blob stored as a 1-D uint8 tensor of its bytes. The
// pickle stores each storage's raw bytes plus dtype/sizes/strides, so values
// (NaN payloads, -0.0, denormals, any dtype) round-trip bitwise. Tensors are
// saved detached, on CPU and compact (a view is cloned first, so a shard never
// drags in a whole foreign storage and loaded tensors never alias each other).
//
// Tensor naming convention: model parameters/buffers are "model/<name>"
// (ExportConsolidated exports exactly these, prefix stripped); optimiser state
// is "optim/<...>". Blob names are free-form (e.g. "loss_scaler", "rng",
// "data_cursor", "step").
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agent/state_dict_file.h"
#include "common/status.h"

namespace firedrill::agent {

// The newest format this build reads. 1: every shard holds its rank's whole
// state. 2: partitioned state (agent/zero.h): the manifest's `tensors` says
// where each tensor that is not every rank's own lives.
inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr const char* kManifestFileName = "manifest.json";
inline constexpr const char* kModelTensorPrefix = "model/";

struct ShardData {
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::string> blobs;  // arbitrary bytes
};

struct ShardInfo {
  std::string file;    // "rank-<r>.pt", relative to the step directory
  int rank = -1;
  int64_t bytes = 0;
  std::string sha256;  // 64 lowercase hex digits
};

// Format 2: where one tensor of the checkpoint lives, in the manner of
// torch.distributed.checkpoint's metadata (which maps every chunk of every
// tensor to a file and an offset). "once": a single copy, in one shard (the
// replicated parameters, written by rank 0 alone). "partitioned": the
// tensor is a range of the flattened parameters' index space (ZeRO-1's
// optimiser state), cut into chunks; chunk i, stored in shard `file` under
// the tensor's own name, holds elements [offset, offset + numel). A tensor
// the map does not name is each rank's own and in every shard (the RNG,
// the optimiser's step count).
struct TensorChunk {
  std::string file;
  int64_t offset = 0;
  int64_t numel = 0;
};
struct TensorPlacement {
  std::string layout;  // "once" | "partitioned"
  int64_t numel = 0;   // of the whole tensor
  std::vector<TensorChunk> chunks;  // by offset, covering [0, numel) once
};

struct Manifest {
  int format_version = 1;  // 2 when `tensors` is set
  int64_t step = 0;
  int world_size = 0;
  std::string config_hash;      // opaque, from the caller (e.g. hash of the JobSpec)
  int64_t created_unix_ms = 0;  // 0: WriteManifest stamps the current time
  std::vector<ShardInfo> shards;
  std::map<std::string, TensorPlacement> tensors;  // format 2; empty in format 1
};

// What the loading job expects; empty/zero fields are not checked.
struct LoadExpect {
  int world_size = 0;
  std::string config_hash;
};

struct CheckpointSummary {
  int64_t step = 0;
  std::string dir;              // full path of the step directory
  int world_size = 0;           // from the manifest; 0 if unreadable
  int shards = 0;               // shards listed in the manifest (files on disk if none)
  int64_t bytes = 0;            // sum of shard file sizes on disk
  int64_t created_unix_ms = 0;  // from the manifest; 0 if unreadable
  bool valid = false;
  bool manifest = false;        // manifest.json is there (readable or not): `latest` may pick it
  std::string reason;           // why invalid: short, names the file ("rank-1.pt: SHA-256 mismatch ...")
  std::string error;            // the full message VerifyCheckpoint returns
};

// "<root>/step-<step>"; "rank-<rank>.pt".
std::string StepDir(const std::string& root, int64_t step);
std::string ShardFileName(int rank);

// Writes this rank's shard atomically (creates step_dir if needed). `out`
// (may be null) receives the manifest entry for the shard.
Status WriteShard(const std::string& step_dir, int rank, const ShardData& data, ShardInfo* out);

// Stats and hashes an existing shard file (for rank 0 when the other ranks'
// ShardInfos were not gathered).
StatusOr<ShardInfo> DescribeShard(const std::string& step_dir, int rank);

// Validates the manifest (one shard per rank 0..world_size-1, each file on
// disk with the listed size) and writes it atomically. Does not re-hash.
Status WriteManifest(const std::string& step_dir, const Manifest& manifest);

// Parses and validates manifest.json (structure only; shards are not read).
StatusOr<Manifest> ReadManifest(const std::string& step_dir);

// Verifies manifest, world size / config hash against `expect`, presence,
// size and SHA-256 of this rank's shard, then decodes it. The bytes hashed are
// the bytes decoded (one read), so a file changing underneath cannot slip by.
StatusOr<ShardData> LoadShard(const std::string& step_dir, int rank, const LoadExpect& expect = {});

// Checks the manifest and size + SHA-256 of every shard. OK iff loadable.
Status VerifyCheckpoint(const std::string& step_dir);

// Every step-<N> directory under root, newest first, each fully verified.
StatusOr<std::vector<CheckpointSummary>> ListCheckpoints(const std::string& root);

// The newest checkpoint that verifies; NotFound if there is none. Stops
// hashing at the first valid one.
StatusOr<std::string> LatestValidCheckpoint(const std::string& root);

// What `checkpoint.resume_from: latest` resumes from: the newest step
// directory with a manifest.json, as torchtitan takes the newest step with
// its .metadata and DeepSpeed reads its `latest` tag. A save that never got
// its manifest is skipped; the shards are not checked here but when they
// load (LoadShard), so a damaged one fails the resume loudly instead of
// being passed over in silence. NotFound if there is none.
StatusOr<std::string> LatestCheckpoint(const std::string& root);

// Damages `rank`'s shard, as it lies on disk, in each of the newest `count`
// step directories under root that hold it and have a manifest (for drills
// and tests: faults/corrupt_checkpoint.h). "bit_rot" flips one bit at an
// offset drawn from `seed`; "truncated" cuts the file to half its size,
// rounded down to a 4 KiB page (the pages a write-back cache never wrote).
// When the newest directory holding the shard has no manifest yet, waits
// for it up to `manifest_wait_s` (rank 0 writes it right after the save's
// all-reduce). `what` (may be null) gets one line per file damaged.
Status DamageNewestShards(const std::string& root, int rank, const std::string& damage, int count, uint64_t seed,
                          double manifest_wait_s, std::string* what);

// Keeps the newest `keep` valid checkpoints and deletes every checkpoint older
// than the oldest kept one (valid or not). Invalid checkpoints newer than that
// are left alone: one may be in the middle of being written, and a corrupt one
// is evidence a learner may want to inspect. keep <= 0 keeps everything.
// A checkpoint whose step is a multiple of keep_period (> 0) is never
// deleted: a sparse history older than the newest `keep`.
Status PruneCheckpoints(const std::string& root, int keep, int keep_period = 0);

// Writes rank 0's "model/*" tensors (prefix stripped) as one file: what
// torch.save(state_dict) writes, which Python's torch.load reads as a dict
// {name: tensor}, also with weights_only=True; or safetensors
// (agent/state_dict_file.h). Rank 0 suffices because data-parallel ranks
// hold identical replicas after every optimiser step. The whole checkpoint
// is verified first (an export never comes from one we would not resume
// from); the export is written atomically.
Status ExportConsolidated(const std::string& step_dir, const std::string& out_file,
                          StateDictFormat format = StateDictFormat::kTorch);

// One model tensor across a checkpoint's data-parallel replicas.
struct ReplicaTensor {
  std::string name;                 // prefix stripped
  int64_t numel = 0;
  std::vector<std::string> sha256;  // by rank: the tensor's bytes as that rank's shard holds them
};

// Loads every shard of a checkpoint (each verified as a resume would) and
// (format 1; format 2 holds the parameters once: FailedPrecondition)
// hashes each "model/" tensor as each rank saved it, in name order. Every
// rank wrote its own replica, so after healthy data-parallel steps all hold
// the same bytes; a replica that went wrong shows as a different hash.
StatusOr<std::vector<ReplicaTensor>> CompareReplicas(const std::string& step_dir);

// SHA-256 of a file, lowercase hex (OpenSSL EVP).
StatusOr<std::string> Sha256File(const std::string& path);
// SHA-256 of `n` bytes at `data`, lowercase hex; "" if OpenSSL failed.
std::string Sha256Hex(const void* data, size_t n);

// "2024-05-01T12:34:56Z" (UTC), for manifests and listings.
std::string FormatUtc(int64_t unix_ms);

}  // namespace firedrill::agent
