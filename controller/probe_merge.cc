#include "controller/probe_merge.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "collectives/collective.h"
#include "parallel/mesh.h"

namespace firedrill::controller {

StatusOr<v1::ProbeSpec> NormalizeProbeSpec(const v1::ProbeSpec& in) {
  v1::ProbeSpec s = in;
  const std::string& op = s.op();
  // Not collectives: each rank hashes its own parameters, or runs its own
  // forward pass (no sizes).
  // The job's own model on 1, 2, 4, ... ranks: iterations, no sizes.
  if (op == "scaling") {
    if (s.min_bytes() != 0 || s.max_bytes() != 0 || s.factor() != 0)
      return InvalidArgument(
          "probe scaling trains the job's own model: it takes no sizes (--iters, --warmup)");
    if (s.from_step() != 0 || s.resume_steps() != 0)
      return InvalidArgument("probe scaling: --from and --steps are probe resume's");
    if (s.iters() == 0) s.set_iters(10);
    if (s.warmup_iters() == 0) s.set_warmup_iters(2);
    // (Its idle ranks wait out the others' steps: bounded.)
    if (s.iters() < 1 || s.iters() > 50 || s.warmup_iters() < 1 || s.warmup_iters() > 10)
      return InvalidArgument("probe scaling: --iters must be 1 to 50 and --warmup 1 to 10");
    return s;
  }
  if (op == "checksum" || op == "activations") {
    if (s.min_bytes() != 0 || s.max_bytes() != 0 || s.factor() != 0 || s.iters() != 0 || s.warmup_iters() != 0)
      return InvalidArgument(
          op == "checksum" ? "probe checksum hashes every parameter: it takes no sizes or iterations"
                           : "probe activations runs one forward pass: it takes no sizes or iterations");
    if (s.from_step() != 0 || s.resume_steps() != 0)
      return InvalidArgument("probe " + op + ": --from and --steps are probe resume's");
    return s;
  }
  if (op == "resume") {
    if (s.min_bytes() != 0 || s.max_bytes() != 0 || s.factor() != 0 || s.iters() != 0 || s.warmup_iters() != 0)
      return InvalidArgument("probe resume runs the job itself: it takes no sizes or iterations (--from, --steps)");
    if (s.from_step() < 0) return InvalidArgument("probe resume: --from must be a checkpoint's step, got " + std::to_string(s.from_step()));
    if (s.resume_steps() < 0 || s.resume_steps() > 200)
      return InvalidArgument("probe resume: --steps must be between 1 and 200, got " + std::to_string(s.resume_steps()));
    return s;
  }
  if (s.from_step() != 0 || s.resume_steps() != 0)
    return InvalidArgument("probe " + op + ": --from and --steps are probe resume's");
  const collectives::Collective* c = collectives::Find(op);
  if (c == nullptr || !c->probe)
    return InvalidArgument("probe: unknown op '" + op + "'; known: " + collectives::ProbeNames() +
                           ", checksum, resume, activations, scaling");
  constexpr int64_t kMiB = 1 << 20;
  if (s.max_bytes() == 0) s.set_max_bytes(op == "p2p" ? 4 * kMiB : 16 * kMiB);
  if (s.min_bytes() == 0) s.set_min_bytes(op == "p2p" ? s.max_bytes() : 8);
  if (s.factor() == 0) s.set_factor(2);
  if (s.iters() == 0) s.set_iters(20);
  if (s.warmup_iters() == 0) s.set_warmup_iters(5);
  if (s.max_bytes() < 4 || s.max_bytes() > 256 * kMiB)
    return InvalidArgument("probe: --max must be between 4 B and 256 MiB, got " + std::to_string(s.max_bytes()));
  if (s.min_bytes() < 4 || s.min_bytes() > s.max_bytes())
    return InvalidArgument("probe: --min must be between 4 B and --max (" + std::to_string(s.max_bytes()) +
                           "), got " + std::to_string(s.min_bytes()));
  if (s.factor() < 2 || s.factor() > 1024)
    return InvalidArgument("probe: --factor must be between 2 and 1024, got " + std::to_string(s.factor()));
  if (s.iters() < 1 || s.iters() > 1000)
    return InvalidArgument("probe: --iters must be between 1 and 1000, got " + std::to_string(s.iters()));
  if (s.warmup_iters() < 0 || s.warmup_iters() > 100)
    return InvalidArgument("probe: --warmup must be between 0 and 100, got " + std::to_string(s.warmup_iters()));
  return s;
}

namespace {

// Every rank's report at its rank's index; an error when one is missing.
StatusOr<std::vector<const v1::ProbeReport*>> ByRank(int world, const std::vector<v1::ProbeReport>& reports) {
  std::vector<const v1::ProbeReport*> by_rank(world, nullptr);
  for (const auto& r : reports) {
    if (r.rank() < 0 || r.rank() >= world)
      return Internal("probe: a report from rank " + std::to_string(r.rank()));
    by_rank[r.rank()] = &r;
  }
  for (int r = 0; r < world; ++r)
    if (by_rank[r] == nullptr) return Internal("probe: rank " + std::to_string(r) + " did not report");
  return by_rank;
}

// The first rank whose `count` items are not rank 0's, item by item as
// `same` compares them (every rank ran the same model); -1 when none.
template <typename Count, typename Same>
int FirstUnlikeRankZero(const std::vector<const v1::ProbeReport*>& by_rank, Count count, Same same) {
  const v1::ProbeReport& first = *by_rank[0];
  for (int r = 1; r < static_cast<int>(by_rank.size()); ++r) {
    const v1::ProbeReport& other = *by_rank[r];
    bool alike = count(other) == count(first);
    for (int i = 0; alike && i < count(first); ++i) alike = same(other, first, i);
    if (!alike) return r;
  }
  return -1;
}

}  // namespace

namespace {

// The checksum rows of a model-parallel job: per shard place (tp, pp) and
// tensor, its data-parallel replicas' hashes.
StatusOr<bool> MeshChecksums(const std::vector<const v1::ProbeReport*>& by_rank, const v1::ParallelSpec& par,
                             v1::RunProbeResponse* out) {
  const int world = static_cast<int>(by_rank.size());
  auto mesh = parallel::Mesh::Create(world, std::max(1, par.tp()), std::max(1, par.pp()), par.order());
  if (!mesh.ok()) return mesh.status();
  // Places in pipeline order, then tensor-parallel rank.
  std::vector<std::vector<int>> replicas = mesh->Groups(parallel::Dim::kDp);
  std::sort(replicas.begin(), replicas.end(), [&](const std::vector<int>& a, const std::vector<int>& b) {
    const parallel::Coords ca = mesh->CoordsOf(a[0]), cb = mesh->CoordsOf(b[0]);
    return std::make_pair(ca.pp, ca.tp) < std::make_pair(cb.pp, cb.tp);
  });
  for (const auto& group : replicas) {
    const parallel::Coords c = mesh->CoordsOf(group[0]);
    const v1::ProbeReport& first = *by_rank[group[0]];
    for (int r : group) {
      const v1::ProbeReport& other = *by_rank[r];
      bool alike = other.checksums_size() == first.checksums_size();
      for (int i = 0; alike && i < first.checksums_size(); ++i)
        alike = other.checksums(i).name() == first.checksums(i).name() &&
                other.checksums(i).numel() == first.checksums(i).numel();
      if (!alike)
        return Internal("probe checksum: rank " + std::to_string(r) + " holds other parameters than rank " +
                        std::to_string(group[0]) + ", its data-parallel replica");
    }
    const std::string place =
        "[" + (mesh->size(parallel::Dim::kPp) > 1 ? "stage " + std::to_string(c.pp) : "") +
        (mesh->size(parallel::Dim::kPp) > 1 && mesh->size(parallel::Dim::kTp) > 1 ? " " : "") +
        (mesh->size(parallel::Dim::kTp) > 1 ? "tp " + std::to_string(c.tp) : "") + "] ";
    for (int i = 0; i < first.checksums_size(); ++i) {
      v1::ParamChecksums* p = out->add_checksums();
      p->set_name(place + first.checksums(i).name());
      p->set_numel(first.checksums(i).numel());
      std::set<std::string> distinct;
      for (int r = 0; r < world; ++r) p->add_sha256("");
      for (int r : group) {
        p->set_sha256(r, by_rank[r]->checksums(i).sha256());
        distinct.insert(by_rank[r]->checksums(i).sha256());
      }
      p->set_distinct(static_cast<int>(distinct.size()));
    }
  }
  return true;
}

}  // namespace

StatusOr<v1::RunProbeResponse> MergeProbeReports(const v1::ProbeSpec& spec, int world,
                                                 const std::vector<v1::ProbeReport>& reports,
                                                 const v1::ParallelSpec& parallel) {
  v1::RunProbeResponse out;
  *out.mutable_spec() = spec;
  out.set_world_size(world);
  out.set_transport("gloo");
  if (reports.empty()) return Internal("probe: no rank reported");
  out.set_step(reports.front().step());
  if (spec.op() == "checksum") {
    auto ranked = ByRank(world, reports);
    if (!ranked.ok()) return ranked.status();
    const std::vector<const v1::ProbeReport*>& by_rank = *ranked;
    if (std::max(1, parallel.tp()) * std::max(1, parallel.pp()) > 1) {
      auto done = MeshChecksums(by_rank, parallel, &out);
      if (!done.ok()) return done.status();
      return out;
    }
    const v1::ProbeReport& first = *by_rank[0];
    const int unlike = FirstUnlikeRankZero(
        by_rank, [](const v1::ProbeReport& p) { return p.checksums_size(); },
        [](const v1::ProbeReport& a, const v1::ProbeReport& b, int i) {
          return a.checksums(i).name() == b.checksums(i).name() &&
                 a.checksums(i).numel() == b.checksums(i).numel();
        });
    if (unlike >= 0)
      return Internal("probe checksum: rank " + std::to_string(unlike) +
                      " holds other parameters than rank 0 (" +
                      std::to_string(by_rank[unlike]->checksums_size()) + " tensors against " +
                      std::to_string(first.checksums_size()) + ")");
    for (int i = 0; i < first.checksums_size(); ++i) {
      v1::ParamChecksums* p = out.add_checksums();
      p->set_name(first.checksums(i).name());
      p->set_numel(first.checksums(i).numel());
      std::set<std::string> distinct;
      for (int r = 0; r < world; ++r) {
        p->add_sha256(by_rank[r]->checksums(i).sha256());
        distinct.insert(by_rank[r]->checksums(i).sha256());
      }
      p->set_distinct(static_cast<int>(distinct.size()));
    }
    return out;
  }
  if (spec.op() == "activations") {
    // Rank 0's points in forward order; every rank ran the same model.
    auto ranked = ByRank(world, reports);
    if (!ranked.ok()) return ranked.status();
    const std::vector<const v1::ProbeReport*>& by_rank = *ranked;
    const v1::ProbeReport& first = *by_rank[0];
    const int unlike = FirstUnlikeRankZero(
        by_rank, [](const v1::ProbeReport& p) { return p.activations_size(); },
        [](const v1::ProbeReport& a, const v1::ProbeReport& b, int i) {
          return a.activations(i).name() == b.activations(i).name() &&
                 a.activations(i).dtype() == b.activations(i).dtype();
        });
    if (unlike >= 0)
      return Internal("probe activations: rank " + std::to_string(unlike) +
                      " ran other points than rank 0 (" +
                      std::to_string(by_rank[unlike]->activations_size()) + " against " +
                      std::to_string(first.activations_size()) + ")");
    for (int i = 0; i < first.activations_size(); ++i) {
      v1::ActivationStat m = first.activations(i);
      m.set_numel(0);
      m.set_inf(0);
      m.set_nan(0);
      m.set_abs_max(0);
      m.set_abs_min(0);
      for (int r = 0; r < world; ++r) {
        const v1::ActivationStat& a = by_rank[r]->activations(i);
        m.set_numel(m.numel() + a.numel());
        m.set_inf(m.inf() + a.inf());
        m.set_nan(m.nan() + a.nan());
        m.set_abs_max(std::max(m.abs_max(), a.abs_max()));
        if (a.abs_min() > 0 && (m.abs_min() == 0 || a.abs_min() < m.abs_min())) m.set_abs_min(a.abs_min());
        if (a.inf() + a.nan() > 0) m.set_ranks_nonfinite(m.ranks_nonfinite() + 1);
      }
      *out.add_activations() = m;
    }
    return out;
  }
  if (spec.op() == "scaling") {
    // Per size, the ranks that took part: the step is as slow as the
    // slowest of them (they all-reduce every step).
    std::map<int, v1::ScalingRow> by_ranks;
    std::map<int, double> mfu_sum;
    std::map<int, int> took_part;
    for (const auto& rep : reports) {
      for (const auto& row : rep.scaling()) {
        // The first `ranks` ranks take part in a size, each once.
        if (rep.rank() >= row.ranks())
          return Internal("probe scaling: rank " + std::to_string(rep.rank()) + " reported the " +
                          std::to_string(row.ranks()) + "-rank step, which only ranks below " +
                          std::to_string(row.ranks()) + " run");
        v1::ScalingRow& m = by_ranks[row.ranks()];
        m.set_ranks(row.ranks());
        m.set_step_ms(std::max(m.step_ms(), row.step_ms()));
        m.set_comm_ms(std::max(m.comm_ms(), row.comm_ms()));
        m.set_samples_per_step(row.samples_per_step());
        mfu_sum[row.ranks()] += row.mfu();
        ++took_part[row.ranks()];
      }
    }
    if (by_ranks.empty() || !by_ranks.count(1))
      return Internal("probe scaling: no rank measured the one-rank step");
    // The sizes the ranks run: 1, 2, 4, ... below the world, then the world.
    std::set<int> want;
    for (int n = 1; n < world; n *= 2) want.insert(n);
    want.insert(world);
    for (int n : want)
      if (!by_ranks.count(n))
        return Internal("probe scaling: no rank reported the " + std::to_string(n) + "-rank step");
    for (const auto& [n, m] : by_ranks)
      if (!want.count(n))
        return Internal("probe scaling: a " + std::to_string(n) +
                        "-rank step is not one of the sizes run on " + std::to_string(world) + " ranks");
    for (auto& [n, m] : by_ranks) {
      if (took_part[n] != n)
        return Internal("probe scaling: " + std::to_string(took_part[n]) + " rank(s) reported the " +
                        std::to_string(n) + "-rank step, not " + std::to_string(n));
      m.set_mfu(mfu_sum[n] / n);
      m.set_samples_per_s(m.step_ms() > 0 ? n * m.samples_per_step() * 1000.0 / m.step_ms() : 0);
    }
    const double one = by_ranks[1].samples_per_s();
    for (auto& [n, m] : by_ranks) {
      m.set_efficiency(one > 0 ? m.samples_per_s() / (n * one) : 0);
      *out.add_scaling() = m;
    }
    return out;
  }
  if (spec.op() == "p2p") {
    std::map<std::pair<int, int>, v1::ProbePair> pairs;
    for (const auto& r : reports) {
      for (const auto& p : r.pairs()) {
        auto& m = pairs[{p.src(), p.dst()}];
        m.set_src(p.src());
        m.set_dst(p.dst());
        if (p.time_us() > 0) {
          m.set_time_us(p.time_us());
          m.set_bw_gbps(p.bw_gbps());
        }
        m.set_wrong(m.wrong() + p.wrong());
      }
    }
    for (auto& [key, p] : pairs) *out.add_pairs() = p;
    return out;
  }
  const int rows = reports.front().rows_size();
  for (const auto& r : reports) {
    if (r.rows_size() != rows)
      return Internal("probe: rank " + std::to_string(r.rank()) + " reported " + std::to_string(r.rows_size()) +
                      " sizes, rank " + std::to_string(reports.front().rank()) + " " + std::to_string(rows));
  }
  const collectives::Collective* c = collectives::Find(spec.op());
  const double factor = c ? c->busbw_factor(world) : 1.0;
  double busbw_sum = 0;
  for (int i = 0; i < rows; ++i) {
    v1::ProbeRow row = reports.front().rows(i);
    double time_sum = 0;
    int64_t wrong = 0;
    for (const auto& r : reports) {
      time_sum += r.rows(i).time_us();
      wrong += r.rows(i).wrong();
    }
    const double us = time_sum / static_cast<double>(reports.size());
    row.set_time_us(us);
    row.set_wrong(wrong);
    // bytes per microsecond / 1e3 = GB/s
    row.set_algbw_gbps(us > 0 ? static_cast<double>(row.bytes()) / (us * 1e3) : 0.0);
    row.set_busbw_gbps(row.algbw_gbps() * factor);
    busbw_sum += row.busbw_gbps();
    *out.add_rows() = row;
  }
  out.set_avg_busbw_gbps(rows > 0 ? busbw_sum / rows : 0.0);
  return out;
}

}  // namespace firedrill::controller
