#include "agent/memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_set>

namespace firedrill::agent {
namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_budget{0};  // <= 0: unlimited
std::atomic<int> g_device{0};
std::atomic<bool> g_installed{false};
// The wrapped allocator's raw deleter: DataPtr deleters are plain function
// pointers with one word of context, so it has to live in a global.
c10::DeleterFnPtr g_base_deleter = nullptr;

// Each block carries its size in a header in front of the data. The header
// is one alignment unit (64 bytes) so the data keeps LibTorch's alignment,
// and data == context so Allocator::raw_allocate/raw_deallocate keep
// working (a separate context struct would break raw_allocate's assert).
constexpr size_t kHeader = c10::gAlignment;
static_assert(kHeader >= sizeof(uint64_t), "header too small");

void RaisePeak(int64_t live) {
  int64_t p = g_peak.load(std::memory_order_relaxed);
  while (live > p && !g_peak.compare_exchange_weak(p, live, std::memory_order_relaxed)) {
  }
}

// Accounts n bytes before the memory exists, so two threads cannot both
// squeeze under the budget. Throws the OOM error instead of reserving.
void Reserve(int64_t n) {
  const int64_t budget = g_budget.load(std::memory_order_relaxed);
  int64_t live;
  if (budget <= 0) {
    live = g_live.fetch_add(n, std::memory_order_relaxed) + n;
  } else {
    int64_t cur = g_live.load(std::memory_order_relaxed);
    do {
      if (cur + n > budget) {
        // c10::OutOfMemoryError is what CUDA's allocator throws in 1.13.
        // what_without_backtrace() is the message alone; what() adds this
        // line where PyTorch names CUDACachingAllocator.cpp.
        throw c10::OutOfMemoryError(
            OutOfMemoryMessage(n, budget, cur, g_device.load()),
            "Exception raised from the simulated device-memory budget (agent/memory.cc)");
      }
    } while (!g_live.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed));
    live = cur + n;
  }
  RaisePeak(live);
}

void Release(int64_t n) { g_live.fetch_sub(n, std::memory_order_relaxed); }

void Delete(void* data) {
  // raw_allocate(0) hands out the base allocator's nullptr, and
  // raw_deallocate later brings it here (GELU's CPU kernel does this).
  if (data == nullptr) return;
  char* base = static_cast<char*>(data) - kHeader;
  uint64_t n;
  std::memcpy(&n, base, sizeof(n));
  Release(static_cast<int64_t>(n));
  g_base_deleter(base);
}

class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) const override {
    // Empty tensors hold no memory: the base allocator's nullptr, uncounted.
    if (n == 0) return base_->allocate(0);
    Reserve(static_cast<int64_t>(n));
    void* raw = nullptr;
    try {
      raw = base_->raw_allocate(n + kHeader);
    } catch (...) {
      Release(static_cast<int64_t>(n));  // a real OOM leaves no phantom bytes
      throw;
    }
    const uint64_t size = n;
    std::memcpy(raw, &size, sizeof(size));
    void* data = static_cast<char*>(raw) + kHeader;
    return {data, data, &Delete, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }

 private:
  c10::Allocator* base_;
};

}  // namespace

void InstallTrackingAllocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* base = c10::GetDefaultCPUAllocator();
    g_base_deleter = base->raw_deleter();
    // The default CPU allocator has a raw deleter (data == context); without
    // one the header trick is impossible, so stay untracked rather than
    // corrupt memory.
    if (g_base_deleter == nullptr) return;
    // Leaked on purpose: tensors allocated by it may outlive every static.
    static auto* tracker = new TrackingAllocator(base);
    // Priority above the default's registration (0) so it wins; the
    // registry keeps the pointer for the life of the process.
    c10::SetCPUAllocator(tracker, /*priority=*/1);
    g_installed.store(true);
  });
}

bool TrackingAllocatorInstalled() { return g_installed.load(); }

int64_t LiveBytes() { return g_live.load(std::memory_order_relaxed); }
int64_t PeakBytes() { return g_peak.load(std::memory_order_relaxed); }
void ResetPeak() { g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

void SetBudget(int64_t bytes, int device_index) {
  g_device.store(device_index);
  g_budget.store(bytes > 0 ? bytes : 0);
}
int64_t Budget() { return g_budget.load(); }

std::string FormatSize(uint64_t size) {
  // c10/cuda/CUDACachingAllocator.cpp's format_size, as in PyTorch 1.13.
  std::ostringstream os;
  os.precision(2);
  os << std::fixed;
  if (size <= 1024) {
    os << size << " bytes";
  } else if (size <= 1048576) {
    os << (size / 1024.0) << " KiB";
  } else if (size <= 1073741824ULL) {
    os << (size / 1048576.0) << " MiB";
  } else {
    os << (size / 1073741824.0) << " GiB";
  }
  return os.str();
}

std::string OutOfMemoryMessage(int64_t tried, int64_t total, int64_t allocated, int device_index) {
  // Modelled on PyTorch 1.13's CUDA caching allocator message, including its
  // double space before "See". There is no cache here, so "reserved in
  // total by PyTorch" equals "already allocated".
  const int64_t free_bytes = total > allocated ? total - allocated : 0;
  std::ostringstream os;
  os << "CUDA out of memory. Tried to allocate " << FormatSize(tried) << " (GPU " << device_index << "; "
     << FormatSize(total) << " total capacity; " << FormatSize(allocated) << " already allocated; "
     << FormatSize(free_bytes) << " free; " << FormatSize(allocated) << " reserved in total by PyTorch)"
     << " If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation. "
     << " See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF";
  return os.str();
}

int64_t TensorBytes(const std::vector<at::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  int64_t total = 0;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.has_storage()) continue;
    const auto& st = t.storage();
    // Key on the StorageImpl: shared by every view of the same memory.
    if (!seen.insert(st.unsafeGetStorageImpl()).second) continue;
    total += static_cast<int64_t>(st.nbytes());
  }
  return total;
}

void StepMemoryProbe::Begin() {
  start_live_ = LiveBytes();
  ResetPeak();
}

int64_t StepMemoryProbe::End() const {
  const int64_t d = PeakBytes() - start_live_;
  return d > 0 ? d : 0;
}

}  // namespace firedrill::agent
