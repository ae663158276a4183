#include "agent/comm/shm_transport.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace firedrill::agent::comm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMagic = 0x3144455248534446ULL;  // "FDSHRED1"
// Descriptors of the last kRing collectives stay readable for the desync
// check; Start() waits if it would run further ahead than that.
constexpr int kRing = 64;
constexpr int64_t kPage = 4096;

int64_t AlignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

struct Desc {
  int64_t offset;
  int64_t numel;
  float prescale;
};

// One per rank, written only by that rank.
struct alignas(64) Slot {
  std::atomic<int64_t> arrived;  // last collective this rank started
  std::atomic<int64_t> done;     // last collective whose slice this rank summed
  std::atomic<int32_t> closed;   // this rank left the group
  std::atomic<int32_t> pid;
  Desc desc[kRing];  // written before `arrived` is published
};

struct alignas(64) Header {
  uint64_t magic;
  uint64_t token;
  int32_t world;
  int64_t region_bytes;
  // Bumped after every change of any slot; waiters sleep on it (a futex on
  // shared memory wakes waiters in every process).
  alignas(64) std::atomic<uint32_t> word;
};

static_assert(std::atomic<int64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared-memory atomics must be lock-free");

struct Mapping {
  void* base = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (base != MAP_FAILED) munmap(base, size);
  }
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

void FutexWakeAll(std::atomic<uint32_t>* w) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Returns false on timeout.
bool FutexWait(std::atomic<uint32_t>* w, uint32_t seen, std::chrono::nanoseconds d) {
  timespec ts{static_cast<time_t>(d.count() / 1000000000), static_cast<long>(d.count() % 1000000000)};
  const long r = syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAIT, seen, &ts, nullptr, 0);
  return !(r == -1 && errno == ETIMEDOUT);
}

// p[0..world) point at the same slice in every rank's copy: sums them, each
// times `scale`, in rank order (one fixed order, so every element has one
// value everywhere) and writes the sum back to all. No FMA: multiply and add
// round separately, as scaling in place and then summing would.
template <bool kScale>
void SumIntoAll(float* const* p, int world, int64_t n, float scale) {
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128 vs = _mm_set1_ps(scale);
  auto ld = [&](const float* q) { return kScale ? _mm_mul_ps(_mm_loadu_ps(q), vs) : _mm_loadu_ps(q); };
  for (; i + 8 <= n; i += 8) {
    __m128 a = ld(p[0] + i), b = ld(p[0] + i + 4);
    for (int w = 1; w < world; ++w) {
      a = _mm_add_ps(a, ld(p[w] + i));
      b = _mm_add_ps(b, ld(p[w] + i + 4));
    }
    for (int w = 0; w < world; ++w) {
      _mm_storeu_ps(p[w] + i, a);
      _mm_storeu_ps(p[w] + i + 4, b);
    }
  }
#endif
  for (; i < n; ++i) {
    float s = kScale ? p[0][i] * scale : p[0][i];
    for (int w = 1; w < world; ++w) s += kScale ? p[w][i] * scale : p[w][i];
    for (int w = 0; w < world; ++w) p[w][i] = s;
  }
}

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

struct ShmAllReduce::Impl {
  int rank = 0, world = 1;
  std::chrono::milliseconds timeout{30000};
  std::shared_ptr<Mapping> map;
  Header* hdr = nullptr;
  Slot* slots = nullptr;
  char* regions = nullptr;
  int64_t region_bytes = 0;
  int64_t alloc_off = 0;
  int64_t next = 0;  // last ticket started

  struct Job {
    int64_t ticket, offset, numel;
    float prescale;
    Clock::time_point started;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> queue;
  int64_t completed = 0;
  int64_t completed_ns[kRing] = {};
  Status failed;
  std::atomic<bool> stop{false};
  std::thread worker;

  char* Region(int r) const { return regions + static_cast<int64_t>(r) * region_bytes; }
  void Bump() {
    hdr->word.fetch_add(1, std::memory_order_acq_rel);
    FutexWakeAll(&hdr->word);
  }
  std::vector<int> Behind(std::atomic<int64_t> Slot::*field, int64_t ticket) const {
    std::vector<int> out;
    for (int r = 0; r < world; ++r) {
      if ((slots[r].*field).load(std::memory_order_acquire) < ticket) out.push_back(r);
    }
    return out;
  }
  Status WaitFor(std::atomic<int64_t> Slot::*field, int64_t ticket, Clock::time_point deadline,
                 const char* what);
  Status Process(const Job& j);
  void WorkerLoop();
};

Status ShmAllReduce::Impl::WaitFor(std::atomic<int64_t> Slot::*field, int64_t ticket,
                                   Clock::time_point deadline, const char* what) {
  for (;;) {
    const uint32_t seen = hdr->word.load(std::memory_order_acquire);
    const auto behind = Behind(field, ticket);
    if (behind.empty()) return Status::Ok();
    if (stop.load()) return Status(StatusCode::kCancelled, "process group shut down");
    for (int r : behind) {
      if (slots[r].closed.load()) return Unavailable("rank " + std::to_string(r) + " left the group");
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(timeout).count());
      return DeadlineExceeded(std::string("timed out after ") + buf + " waiting for rank(s) " +
                              RankList(behind) + " to " + what + " (shared-memory transport)");
    }
    const auto slice = std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(50));
    if (!FutexWait(&hdr->word, seen, slice)) {
      // Quiet for a while: a peer process may have died without closing.
      for (int r : behind) {
        const pid_t pid = slots[r].pid.load();
        if (pid > 0 && pid != getpid() && kill(pid, 0) == -1 && errno == ESRCH) {
          return Unavailable("rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ") died");
        }
      }
    }
  }
}

Status ShmAllReduce::Impl::Process(const Job& j) {
  const auto deadline = j.started + timeout;
  FD_RETURN_IF_ERROR(WaitFor(&Slot::arrived, j.ticket, deadline, "start it"));
  for (int r = 0; r < world; ++r) {
    const Desc d = slots[r].desc[j.ticket % kRing];
    if (d.offset != j.offset || d.numel != j.numel || d.prescale != j.prescale) {
      return Aborted("collective desync: rank " + std::to_string(r) + " started an all-reduce of " +
                     std::to_string(d.numel) + " floats at offset " + std::to_string(d.offset) + ", rank " +
                     std::to_string(rank) + " one of " + std::to_string(j.numel) + " at " +
                     std::to_string(j.offset));
    }
  }
  // Slices of 16 floats: whole cache lines, so ranks never write the same one.
  const int64_t part = AlignUp((j.numel + world - 1) / world, 16);
  const int64_t lo = std::min(j.numel, rank * part), hi = std::min(j.numel, lo + part);
  if (hi > lo && (world > 1 || j.prescale != 1.0f)) {
    std::vector<float*> p(world);
    for (int r = 0; r < world; ++r) p[r] = reinterpret_cast<float*>(Region(r) + j.offset) + lo;
    if (j.prescale != 1.0f) {
      SumIntoAll<true>(p.data(), world, hi - lo, j.prescale);
    } else {
      SumIntoAll<false>(p.data(), world, hi - lo, 1.0f);
    }
  }
  slots[rank].done.store(j.ticket, std::memory_order_release);
  Bump();
  return WaitFor(&Slot::done, j.ticket, deadline, "finish it");
}

void ShmAllReduce::Impl::WorkerLoop() {
  for (;;) {
    Job j;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stop.load() || !queue.empty(); });
      if (stop.load()) return;
      j = queue.front();
      queue.pop_front();
    }
    Status st;
    try {
      st = Process(j);
    } catch (const std::exception& e) {  // nothing may escape this thread
      st = Internal(std::string("shared-memory all-reduce failed: ") + e.what());
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      if (st.ok()) {
        completed = j.ticket;
        completed_ns[j.ticket % kRing] = NowNs();
      } else if (failed.ok()) {
        failed = st;  // this collective and every later one fail with it
        queue.clear();
      }
    }
    cv.notify_all();
  }
}

ShmAllReduce::ShmAllReduce(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ShmAllReduce::~ShmAllReduce() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.stop.store(true);
  }
  m.slots[m.rank].closed.store(1);
  m.Bump();
  m.cv.notify_all();
  if (m.worker.joinable()) m.worker.join();
}

StatusOr<std::shared_ptr<ShmAllReduce>> ShmAllReduce::Create(int rank, int world, int64_t bytes_per_rank,
                                                             std::chrono::milliseconds timeout, bool allow,
                                                             const std::string& tag, const StoreOps& store) {
  const int64_t slots_off = AlignUp(sizeof(Header), 64);
  const int64_t header_bytes = AlignUp(slots_off + static_cast<int64_t>(world) * sizeof(Slot), kPage);
  const int64_t region = AlignUp(std::max<int64_t>(bytes_per_rank, 1), kPage);
  const int64_t total = header_bytes + world * region;
  const std::string key = "firedrill/shm/" + tag;
  auto map = std::make_shared<Mapping>();
  std::string name = "none";
  uint64_t token = 0;

  auto map_fd = [&](int fd) {
    void* p = mmap(nullptr, static_cast<size_t>(total), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      map->base = p;
      map->size = static_cast<size_t>(total);
    }
  };
  if (rank == 0) {
    if (allow) {
      std::random_device rd;
      token = (static_cast<uint64_t>(rd()) << 32) ^ rd();
      char buf[64];
      std::snprintf(buf, sizeof buf, "/firedrill-%d-%016llx", static_cast<int>(getpid()),
                    static_cast<unsigned long long>(token));
      const int fd = shm_open(buf, O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd >= 0) {
        // fallocate, not just ftruncate: a full /dev/shm (Docker's is 64 MB)
        // must fail here, not as SIGBUS in the middle of a step.
        if (ftruncate(fd, total) == 0 && posix_fallocate(fd, 0, total) == 0) map_fd(fd);
        close(fd);
        if (map->base == MAP_FAILED) {
          shm_unlink(buf);
        } else {
          name = buf;
          auto* h = new (map->base) Header();
          h->magic = kMagic;
          h->token = token;
          h->world = world;
          h->region_bytes = region;
          for (int r = 0; r < world; ++r)
            new (static_cast<char*>(map->base) + slots_off + r * sizeof(Slot)) Slot();
        }
      }
    }
    FD_RETURN_IF_ERROR(store.set(key, name + " " + std::to_string(token)));
  } else {
    auto v = store.get(key);
    if (!v.ok()) return v.status();
    std::istringstream in(*v);
    in >> name >> token;
    if (allow && name != "none") {
      const int fd = shm_open(name.c_str(), O_RDWR, 0600);
      if (fd >= 0) {
        struct stat st {};
        if (fstat(fd, &st) == 0 && st.st_size == total) map_fd(fd);
        close(fd);
      }
      if (map->base != MAP_FAILED) {
        const auto* h = static_cast<const Header*>(map->base);
        if (h->magic != kMagic || h->token != token || h->world != world || h->region_bytes != region) {
          munmap(map->base, map->size);
          map->base = MAP_FAILED;
        }
      }
    }
  }
  const bool ok = map->base != MAP_FAILED;
  FD_RETURN_IF_ERROR(store.set(key + "/ok/" + std::to_string(rank), ok ? "1" : "0"));
  bool all = true;
  for (int r = 0; r < world; ++r) {
    auto v = store.get(key + "/ok/" + std::to_string(r));
    if (!v.ok()) return v.status();
    all = all && *v == "1";
  }
  // Everyone has mapped it (or given up): the name is no longer needed, and
  // unlinking now means a crash cannot leak the segment.
  if (rank == 0 && name != "none") shm_unlink(name.c_str());
  if (!all) return std::shared_ptr<ShmAllReduce>();

  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->world = world;
  impl->timeout = timeout;
  impl->map = map;
  impl->hdr = static_cast<Header*>(map->base);
  impl->slots = reinterpret_cast<Slot*>(static_cast<char*>(map->base) + slots_off);
  impl->regions = static_cast<char*>(map->base) + header_bytes;
  impl->region_bytes = region;
  impl->slots[rank].pid.store(static_cast<int32_t>(getpid()));
  Impl* raw = impl.get();
  impl->worker = std::thread([raw] { raw->WorkerLoop(); });
  return std::shared_ptr<ShmAllReduce>(new ShmAllReduce(std::move(impl)));
}

StatusOr<float*> ShmAllReduce::Allocate(int64_t numel, std::shared_ptr<void>* keepalive) {
  Impl& m = *impl_;
  const int64_t off = AlignUp(m.alloc_off, 64);
  const int64_t bytes = numel * static_cast<int64_t>(sizeof(float));
  if (numel < 0 || off + bytes > m.region_bytes) {
    return OutOfRange("shared-memory region of " + std::to_string(m.region_bytes) + " bytes cannot hold " +
                      std::to_string(bytes) + " more at offset " + std::to_string(off));
  }
  m.alloc_off = off + bytes;
  *keepalive = m.map;
  return reinterpret_cast<float*>(m.Region(m.rank) + off);
}

bool ShmAllReduce::Contains(const float* p, int64_t numel) const {
  const char* c = reinterpret_cast<const char*>(p);
  const char* base = impl_->Region(impl_->rank);
  return c >= base && c + numel * static_cast<int64_t>(sizeof(float)) <= base + impl_->region_bytes;
}

StatusOr<int64_t> ShmAllReduce::Start(const float* data, int64_t numel, float prescale) {
  Impl& m = *impl_;
  if (!Contains(data, numel)) return InvalidArgument("tensor is not in this rank's shared-memory region");
  const int64_t ticket = m.next + 1;
  {
    std::unique_lock<std::mutex> lock(m.mu);
    // The descriptor slot of collective ticket-kRing is reused below: it
    // must be complete everywhere (it is, once our worker finished it).
    m.cv.wait(lock, [&] { return m.completed >= ticket - kRing || !m.failed.ok(); });
    if (!m.failed.ok()) return m.failed;
  }
  m.next = ticket;
  const int64_t off = reinterpret_cast<const char*>(data) - m.Region(m.rank);
  m.slots[m.rank].desc[ticket % kRing] = Desc{off, numel, prescale};
  m.slots[m.rank].arrived.store(ticket, std::memory_order_release);
  m.Bump();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.queue.push_back(Impl::Job{ticket, off, numel, prescale, Clock::now()});
  }
  m.cv.notify_all();
  return ticket;
}

Status ShmAllReduce::Wait(int64_t ticket, int64_t* completed_ns) {
  Status s;
  WaitFor(ticket, std::chrono::milliseconds(-1), &s, completed_ns);
  return s;
}

bool ShmAllReduce::WaitFor(int64_t ticket, std::chrono::milliseconds timeout, Status* result,
                           int64_t* completed_ns) {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mu);
  const auto finished = [&] { return m.completed >= ticket || !m.failed.ok(); };
  if (timeout.count() < 0) {
    m.cv.wait(lock, finished);
  } else if (!m.cv.wait_for(lock, timeout, finished)) {
    return false;
  }
  if (m.completed >= ticket) {
    if (completed_ns) *completed_ns = m.completed_ns[ticket % kRing];
    *result = Status::Ok();
  } else {
    *result = m.failed;
  }
  return true;
}

namespace {

class ShmWork : public Work {
 public:
  ShmWork(std::shared_ptr<ShmAllReduce> shm, int64_t ticket) : shm_(std::move(shm)), ticket_(ticket) {}
  bool Wait(std::chrono::milliseconds timeout, Status* result) override {
    int64_t ns = 0;
    if (!shm_->WaitFor(ticket_, timeout, result, &ns)) return false;
    if (result->ok()) done_ns_.store(ns);
    return true;
  }
  std::chrono::steady_clock::time_point completed() const override {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(done_ns_.load()));
  }

 private:
  std::shared_ptr<ShmAllReduce> shm_;
  int64_t ticket_;
  std::atomic<int64_t> done_ns_{0};
};

class ShmBackendImpl : public Backend {
 public:
  explicit ShmBackendImpl(std::shared_ptr<ShmAllReduce> shm) : shm_(std::move(shm)) {}
  const char* name() const override { return "shm"; }
  bool Supports(const Op& op) const override {
    const at::Tensor& t = op.tensor;
    return op.type == OpType::kAllReduce && t.scalar_type() == at::kFloat && t.is_contiguous() &&
           shm_->Contains(t.data_ptr<float>(), t.numel());
  }
  StatusOr<WorkPtr> Post(const Op& op) override {
    // The transport's code says what happened: a peer gone (Unavailable),
    // too slow (DeadlineExceeded) or out of step (Aborted, a desync).
    auto ticket = shm_->Start(op.tensor.data_ptr<float>(), op.tensor.numel(), static_cast<float>(op.prescale));
    if (!ticket.ok()) return ticket.status();
    return WorkPtr(std::make_shared<ShmWork>(shm_, *ticket));
  }

 private:
  std::shared_ptr<ShmAllReduce> shm_;
};

}  // namespace

std::shared_ptr<Backend> ShmBackend(std::shared_ptr<ShmAllReduce> shm) {
  return std::make_shared<ShmBackendImpl>(std::move(shm));
}

}  // namespace firedrill::agent::comm
