// Memory accounting by measurement: a tracking CPU allocator installed into
// LibTorch counts every byte of tensor storage allocated after it is
// installed (live and peak), and can enforce a simulated device budget whose
// overflow raises an error that reads like CUDA's out-of-memory error.
//
// How the trainer uses it:
//
//   // at startup, before the model is built (so parameters are counted)
//   InstallTrackingAllocator();
//   SetBudget(static_cast<int64_t>(job.memory().device_budget_mb() * 1024 * 1024),
//             /*device_index=*/local_rank);   // 0 = unlimited
//   // per step
//   StepMemoryProbe probe;
//   probe.Begin();                            // before the first forward
//   ...forward + backward of every micro-batch...
//   MemoryBreakdown mb;
//   mb.activation_peak = probe.End();         // before optimizer.step()
//   mb.params = TensorBytes(params);          // model->parameters()
//   mb.grads = TensorBytes(grads);            // p.grad()s, or the flat buffer
//   mb.optimizer_state = TensorBytes(state);  // momentum / exp_avg(_sq) tensors
//   // -> telemetry; all four are cheap (no pass over tensor data).
//   // Around the step: catch (const c10::Error& e) -> Status with
//   // e.what_without_backtrace().
//
// Errors: the allocator runs inside LibTorch, so a budget overflow is thrown
// as c10::OutOfMemoryError (a c10::Error, like CUDA's). The trainer catches
// it around the step and turns it into a firedrill::Status carrying
// e.what_without_backtrace() (the CUDA-like message alone; what() adds an
// "Exception raised from ..." line as PyTorch's does).
// Everything else here returns values, never throws.
//
// The allocator is process-global (one rank = one process = one simulated
// device): allocations from every thread count, including the data loader's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace firedrill::agent {

// Wraps c10::GetDefaultCPUAllocator() and makes it LibTorch's CPU allocator.
// Idempotent and thread-safe; never uninstalled (tensors allocated by it
// must find its deleter until the process ends).
void InstallTrackingAllocator();
bool TrackingAllocatorInstalled();

// Bytes of live tensor storage allocated through the tracker.
int64_t LiveBytes();
// Highest LiveBytes() since install or the last ResetPeak().
int64_t PeakBytes();
// Sets the peak to the current live bytes.
void ResetPeak();

// Simulated device memory: an allocation that would take LiveBytes() above
// `bytes` throws c10::OutOfMemoryError and allocates nothing. <= 0 turns the
// budget off. `device_index` is the "GPU n" the message names.
void SetBudget(int64_t bytes, int device_index = 0);
int64_t Budget();

// PyTorch 1.13's CUDA caching-allocator message (CUDACachingAllocator.cpp),
// with this tracker's numbers: allocated = reserved = live bytes (no cache),
// free = budget - live. Exposed for tests.
std::string OutOfMemoryMessage(int64_t tried, int64_t total, int64_t allocated, int device_index);
// PyTorch's format_size: "512 bytes", "1.50 KiB", "20.00 MiB", "1.25 GiB".
std::string FormatSize(uint64_t bytes);

// Bytes of the distinct storages behind `tensors`: a view or a tensor listed
// twice counts once, and a view into a flat buffer counts the whole buffer
// (what is really held). Undefined tensors count 0.
int64_t TensorBytes(const std::vector<at::Tensor>& tensors);

struct MemoryBreakdown {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer_state = 0;
  int64_t activation_peak = 0;
};

// Activation peak of a forward+backward: Begin() resets the peak and notes
// the live bytes; End() returns peak - live-at-Begin. It includes gradient
// buffers first allocated during that backward (none after step 1 when
// gradients are zeroed rather than set to None, or live in a flat buffer).
class StepMemoryProbe {
 public:
  void Begin();
  int64_t End() const;

 private:
  int64_t start_live_ = 0;
};

}  // namespace firedrill::agent
