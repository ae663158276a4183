#include "agent/zero.h"

#include <ATen/ATen.h>
#include <google/protobuf/text_format.h>

#include <algorithm>

#include "agent/comm/process_group.h"
#include "agent/data.h"
#include "agent/error_text.h"

namespace firedrill::agent {

ZeroLayout MakeZeroLayout(int64_t numel, int world) {
  ZeroLayout l;
  l.numel = numel;
  l.world = std::max(1, world);
  l.chunk = (numel + l.world - 1) / l.world;
  return l;
}

ZeroOptimizer::ZeroOptimizer(std::vector<at::Tensor> params, ZeroLayout layout, int rank)
    : params_(std::move(params)), layout_(layout), rank_(rank) {}

StatusOr<std::unique_ptr<ZeroOptimizer>> ZeroOptimizer::Create(const v1::OptimSpec& spec,
                                                               std::vector<at::Tensor> params, int rank,
                                                               int world) {
  int64_t n = 0;
  for (const auto& p : params) {
    if (p.scalar_type() != at::kFloat)
      return InvalidArgument("optim.zero_stage 1 partitions fp32 master parameters; one is " +
                             std::string(c10::toString(p.scalar_type())));
    n += p.numel();
  }
  const ZeroLayout layout = MakeZeroLayout(n, world);
  if (rank < 0 || rank >= layout.world)
    return InvalidArgument("rank " + std::to_string(rank) + " outside the world");
  std::unique_ptr<ZeroOptimizer> z(new ZeroOptimizer(std::move(params), layout, rank));
  try {
    const int64_t mine = layout.End(rank) - layout.Begin(rank);
    z->own_ = at::zeros({mine}, at::kFloat);
    z->own_.mutable_grad() = at::zeros({mine}, at::kFloat);
  } catch (const std::exception& e) {
    return ResourceExhausted("allocating this rank's ZeRO partition: " + ErrorText(e));
  }
  auto inner = Optimizer::Create(spec, {z->own_});
  if (!inner.ok()) return inner.status();
  z->inner_ = std::move(inner).value();
  return z;
}

void ZeroOptimizer::Slice(const std::vector<at::Tensor>& from, at::Tensor& to) const {
  const int64_t begin = layout_.Begin(rank_), end = layout_.End(rank_);
  int64_t offset = 0;  // of parameter k in the flattened index space
  for (size_t k = 0; k < params_.size() && offset < end; ++k) {
    const int64_t n = params_[k].numel();
    const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
    if (lo < hi) {
      at::Tensor dst = to.narrow(0, lo - begin, hi - lo);
      if (from[k].defined()) {
        dst.copy_(from[k].detach().reshape({-1}).narrow(0, lo - offset, hi - lo));
      } else {
        dst.zero_();  // a parameter without a gradient: as if zero
      }
    }
    offset += n;
  }
}

double ZeroOptimizer::Step(double lr, bool zero_grad) {
  at::NoGradGuard no_grad;
  // The parameters are the authority (a restore or the start-of-run
  // broadcast wrote them): this rank's chunk of them, and of their averaged
  // gradients.
  std::vector<at::Tensor> grads(params_.size());
  double sum = 0;
  for (size_t k = 0; k < params_.size(); ++k) {
    grads[k] = params_[k].grad();
    if (grads[k].defined() && grads[k].numel() > 0) {
      const double g = grads[k].norm().item<double>();
      sum += g * g;
    }
  }
  Slice(params_, own_);
  at::Tensor g = own_.mutable_grad();
  Slice(grads, g);
  (void)inner_->Step(lr, /*zero_grad=*/true);
  if (zero_grad)
    for (auto& gk : grads)
      if (gk.defined()) gk.zero_();
  return sum;
}

void ZeroOptimizer::Place(const at::Tensor& src, int64_t begin, int64_t end) {
  const int64_t stop = std::min(end, begin + src.numel());
  int64_t offset = 0;  // of parameter k in the flattened index space
  for (size_t k = 0; k < params_.size() && offset < stop; ++k) {
    const int64_t n = params_[k].numel();
    const int64_t lo = std::max(begin, offset), hi = std::min(stop, offset + n);
    if (lo < hi)
      params_[k]
          .detach()
          .view({-1})
          .narrow(0, lo - offset, hi - lo)
          .copy_(src.narrow(0, lo - begin, hi - lo));
    offset += n;
  }
}

Status ZeroOptimizer::Gather(comm::ProcessGroup& pg, int64_t step) {
  at::NoGradGuard no_grad;
  const int64_t slice = std::max<int64_t>(1, std::min(kGatherSlice, layout_.chunk));
  at::Tensor send, all;
  try {
    send = at::empty({slice}, at::kFloat);
    all = at::empty({slice * layout_.world}, at::kFloat);
  } catch (const std::exception& e) {
    return ResourceExhausted("rank " + std::to_string(rank_) + " step " + std::to_string(step) +
                             ": allocating the ZeRO all-gather: " + ErrorText(e));
  }
  const int64_t mine = own_.numel();  // the last rank's chunk is short: padded with zeros
  for (int64_t from = 0; from < layout_.chunk; from += slice) {
    const int64_t len = std::min(slice, layout_.chunk - from);
    at::Tensor out = send.narrow(0, 0, len), in = all.narrow(0, 0, len * layout_.world);
    out.zero_();
    if (from < mine)
      out.narrow(0, 0, std::min(len, mine - from)).copy_(own_.narrow(0, from, std::min(len, mine - from)));
    FD_RETURN_IF_ERROR(pg.AllGather(out, in, step));
    for (int r = 0; r < layout_.world; ++r)
      Place(in.narrow(0, r * len, len), layout_.Begin(r) + from, layout_.End(r));
  }
  return Status::Ok();
}

Status ZeroOptimizer::LoadStateUnchecked(const std::vector<std::pair<std::string, at::Tensor>>& state) {
  return inner_->LoadState(state);
}

std::map<std::string, TensorPlacement> PlacePartitionedState(
    const std::vector<std::pair<std::string, int64_t>>& model, const std::vector<std::string>& state,
    const ZeroLayout& layout) {
  std::map<std::string, TensorPlacement> out;
  for (const auto& [name, numel] : model) out[name] = {"once", numel, {{ShardFileName(0), 0, numel}}};
  for (const auto& name : state) {
    TensorPlacement p{"partitioned", layout.numel, {}};
    for (int r = 0; r < layout.world; ++r)
      p.chunks.push_back({ShardFileName(r), layout.Begin(r), layout.End(r) - layout.Begin(r)});
    out[name] = std::move(p);
  }
  return out;
}

namespace {

// The data cursor of a job at another world size: the same samples
// consumed, in the loading job's micro-batches. Only where that names the
// same samples: the data settings other than the batch's shape must be the
// checkpoint's (the loaders' fingerprints differ by world size and batch,
// so they are compared here without them), and a finite dataset's position
// is carried within its first epoch only, a token dataset's by a random
// sampler only (an epoch's length, and a length-bucketed order, depend on
// the global batch).
StatusOr<std::string> CarryCursor(const ShardData& own, const Manifest& m, const v1::JobSpec& job,
                                  const std::string& step_dir) {
  auto cursor_text = own.blobs.find("data_cursor");
  auto job_text = own.blobs.find("job");
  if (cursor_text == own.blobs.end() || job_text == own.blobs.end())
    return DataLoss("checkpoint " + step_dir + ": a shard without its data cursor or job");
  auto cursor = DataCursor::Parse(cursor_text->second);
  if (!cursor.ok()) return DataLoss("checkpoint " + step_dir + ": " + cursor.status().message());
  v1::JobSpec saved;
  if (!google::protobuf::TextFormat::ParseFromString(job_text->second, &saved) ||
      saved.data().batch_size() <= 0)
    return DataLoss("checkpoint " + step_dir + ": its job settings do not parse");
  auto cant = [&](const std::string& why) {
    return FailedPrecondition("checkpoint " + step_dir + " was written by " + std::to_string(m.world_size) +
                              " ranks: " + why + ": its data position cannot be carried over to " +
                              std::to_string(job.world_size()) + " ranks (checkpoint.restore without data "
                              "starts the data afresh)");
  };
  auto then = DataOptionsFromJob(saved, 0, 0, 1);
  auto now = DataOptionsFromJob(job, 0, 0, 1);
  if (!then.ok()) return cant("its data settings: " + then.status().message());
  if (!now.ok()) return now.status();
  then->world_size = now->world_size;
  then->batch_size = now->batch_size;
  if (DataFingerprint(*then, nullptr) != DataFingerprint(*now, nullptr) || then->source != now->source ||
      then->vocab_size != now->vocab_size || saved.data().seed() != job.data().seed() ||
      saved.data().dataset_size() != job.data().dataset_size())
    return cant("its data settings other than the batch differ from this job's");
  if (now->kind == DataKind::kTokens) {
    if (now->sampler == Sampler::kLengthBucketed) return cant("a length-bucketed order depends on the global batch");
    if (cursor->epoch != 0)
      return cant("it is in epoch " + std::to_string(cursor->epoch) +
                  ", and how many steps an epoch has depends on the global batch");
  }
  const int64_t samples_per_batch = static_cast<int64_t>(job.world_size()) * job.data().batch_size();
  const int64_t consumed = cursor->next_batch * m.world_size * saved.data().batch_size();
  if (now->kind == DataKind::kClassification && job.data().dataset_size() > 0 &&
      consumed >= job.data().dataset_size())
    return cant("it consumed " + std::to_string(consumed) + " samples of a dataset of " +
                std::to_string(job.data().dataset_size()) +
                ", and how many steps an epoch has depends on the global batch");
  if (samples_per_batch <= 0 || consumed % samples_per_batch != 0)
    return FailedPrecondition(
        "checkpoint " + step_dir + " consumed " + std::to_string(consumed) + " samples (" +
        std::to_string(m.world_size) + " ranks x " + std::to_string(saved.data().batch_size()) +
        " a micro-batch), not a whole number of this job's micro-batches of " +
        std::to_string(samples_per_batch) + ": its data position cannot be carried over");
  DataCursor carried;
  carried.next_batch = consumed / samples_per_batch;
  carried.fingerprint = 0;  // the loader's own covers world size and batch: compared above without them
  return carried.Serialize();
}

}  // namespace

StatusOr<ShardData> LoadRankState(const std::string& step_dir, int rank, const v1::JobSpec& job,
                                  const LoadExpect& expect, bool carry_data) {
  const int world = job.world_size();
  auto m = ReadManifest(step_dir);
  if (!m.ok()) return m.status();
  if (m->format_version < 2 || m->tensors.empty()) {
    LoadExpect e = expect;
    e.world_size = world;
    return LoadShard(step_dir, rank, e);
  }
  // Every shard read is checked as a resume checks it; the world size is
  // free (that is the point), the configuration is not.
  LoadExpect any_world = expect;
  any_world.world_size = 0;
  std::map<std::string, ShardData> loaded;  // by file
  auto shard = [&](const std::string& file) -> StatusOr<const ShardData*> {
    if (auto it = loaded.find(file); it != loaded.end()) return &it->second;
    // ReadManifest checked that every chunk lies in a shard it lists.
    auto listed = std::find_if(m->shards.begin(), m->shards.end(), [&](const ShardInfo& s) { return s.file == file; });
    const int r = listed == m->shards.end() ? -1 : listed->rank;
    if (r < 0) return DataLoss("checkpoint " + step_dir + ": the manifest maps a tensor to '" + file + "'");
    auto s = LoadShard(step_dir, r, any_world);
    if (!s.ok()) return s.status();
    return &(loaded[file] = std::move(s).value());
  };
  const std::string own_file = ShardFileName(rank < m->world_size ? rank : 0);
  auto own = shard(own_file);
  if (!own.ok()) return own.status();
  ShardData out = **own;  // tensors share storage with the cache: copied below where assembled
  try {
    for (const auto& [name, p] : m->tensors) {
      out.tensors.erase(name);  // the old rank's chunk, or its copy of a tensor stored once
      if (p.layout == "once") {
        auto from = shard(p.chunks.front().file);
        if (!from.ok()) return from.status();
        auto it = (*from)->tensors.find(name);
        if (it == (*from)->tensors.end())
          return DataLoss("checkpoint " + step_dir + ": " + p.chunks.front().file + " holds no " + name +
                          ", which the manifest places there");
        out.tensors[name] = it->second;
        continue;
      }
      // Only the layout ZeroOptimizer writes: a chunk's bytes do not say
      // which range they are, so a map that swapped two equal chunks would
      // otherwise load them swapped.
      const ZeroLayout written = MakeZeroLayout(p.numel, m->world_size);
      bool as_written = p.chunks.size() == static_cast<size_t>(m->world_size);
      for (int r = 0; as_written && r < m->world_size; ++r) {
        const TensorChunk& c = p.chunks[r];
        as_written = c.file == ShardFileName(r) && c.offset == written.Begin(r) &&
                     c.numel == written.End(r) - written.Begin(r);
      }
      if (!as_written)
        return DataLoss("checkpoint " + step_dir + ": the manifest maps " + name + " to chunks other than the " +
                        std::to_string(m->world_size) + " ranks' partitions, in rank order, that ZeRO-1 writes");
      const ZeroLayout l = MakeZeroLayout(p.numel, world);
      const int64_t begin = l.Begin(rank), end = l.End(rank);
      at::Tensor part;
      for (const auto& c : p.chunks) {
        const int64_t lo = std::max(begin, c.offset), hi = std::min(end, c.offset + c.numel);
        if (lo >= hi) continue;
        auto from = shard(c.file);
        if (!from.ok()) return from.status();
        auto it = (*from)->tensors.find(name);
        if (it == (*from)->tensors.end() || it->second.dim() != 1 || it->second.numel() != c.numel)
          return DataLoss("checkpoint " + step_dir + ": " + c.file + " does not hold the " +
                          std::to_string(c.numel) + " elements of " + name + " the manifest places there");
        if (it->second.scalar_type() != at::kFloat)
          return DataLoss("checkpoint " + step_dir + ": " + c.file + " holds " + name + " as " +
                          std::string(c10::toString(it->second.scalar_type())) + ", not fp32");
        if (!part.defined()) part = at::empty({end - begin}, it->second.options());
        part.narrow(0, lo - begin, hi - lo).copy_(it->second.narrow(0, lo - c.offset, hi - lo));
      }
      if (!part.defined()) part = at::empty({end - begin}, at::kFloat);  // an empty partition
      out.tensors[name] = part;
    }
  } catch (const std::exception& e) {
    return Internal("assembling rank " + std::to_string(rank) + "'s state from " + step_dir + ": " +
                    ErrorText(e));
  }
  if (world != m->world_size && carry_data) {
    auto carried = CarryCursor(out, *m, job, step_dir);
    if (!carried.ok()) return carried.status();
    out.blobs["data_cursor"] = *carried;
  }
  return out;
}

}  // namespace firedrill::agent
