// What each collective is, in one place, for everything that needs it: the
// agent (which runs it and counts the bytes a degraded link must carry), the
// controller (which turns probe times into bus bandwidth) and the CLI (which
// prints nccl-tests' tables). One file per collective, as nccl-tests has one
// per test (all_reduce.cu, all_gather.cu, ...); no LibTorch here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace firedrill::collectives {

// A probe sweep's buffers for one size (nccl-tests' size: the whole buffer,
// in fp32 elements): `in` elements per rank go in, `out` come out (0: the
// result replaces the input, in place).
struct Buffers {
  int64_t count = 0;  // nccl-tests' count column
  int64_t in = 0;
  int64_t out = 0;
};

struct Collective {
  const char* name;       // as the API, the flight recorder and `firedrill probe` spell it
  const char* nccl_test;  // the nccl-tests binary it mirrors ("" for none)
  const char* redop;      // "sum" or "none"
  bool probe;             // `firedrill probe NAME` sweeps it (p2p: pair by pair)
  // What one rank moves over its link for a buffer of `bytes`, as a ring
  // algorithm would.
  int64_t (*link_bytes)(int64_t bytes, int world);
  // nccl-tests' busbw = algbw x factor: the same ring count per byte of
  // buffer, so that busbw reads as what each rank's link carried.
  double (*busbw_factor)(int world);
  // Validation as nccl-tests' -c 1 (sweeping collectives): known inputs,
  // every output element compared with what the collective must give.
  Buffers (*buffers)(int64_t size_bytes, int world);
  float (*input)(int rank, int world, int64_t part, int64_t i);
  float (*expected)(int rank, int world, int64_t part, int64_t i);
};

// nullptr for a name that is none of them.
const Collective* Find(std::string_view name);
const std::vector<const Collective*>& All();
// "allreduce, allgather, reducescatter, p2p": what `firedrill probe` takes.
std::string ProbeNames();

// Small integers, exact in fp32 and in their sums: element i of rank r.
inline float Pattern(int rank, int64_t i) { return static_cast<float>((rank + 1) * ((i % 13) + 1)); }
// The sum of Pattern over every rank, element i.
inline float PatternSum(int world, int64_t i) {
  return static_cast<float>(world * (world + 1) / 2) * static_cast<float>((i % 13) + 1);
}

}  // namespace firedrill::collectives
