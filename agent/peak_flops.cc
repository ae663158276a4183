#include "agent/peak_flops.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <mutex>

namespace firedrill::agent {

double PeakMatmulFlops(int threads) {
  static std::once_flag once;
  static double peak = 0;
  std::call_once(once, [threads] {
    at::set_num_threads(std::max(1, threads));
    constexpr int64_t n = 512;
    at::NoGradGuard no_grad;
    const at::Tensor a = at::rand({n, n});
    const at::Tensor b = at::rand({n, n});
    at::Tensor c = at::empty({n, n});
    for (int i = 0; i < 2; ++i) at::mm_out(c, a, b);  // warm-up: BLAS threads, caches
    double best_s = 1e9;
    for (int i = 0; i < 8; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      at::mm_out(c, a, b);
      best_s = std::min(best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    peak = 2.0 * n * n * n / std::max(best_s, 1e-9);
  });
  return peak;
}

}  // namespace firedrill::agent
