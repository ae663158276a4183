// The denominator of MFU: this process's measured peak fp32 matmul rate.
#pragma once

namespace firedrill::agent {

// Best of several timed 512x512x512 fp32 GEMMs (2*n^3 FLOPs each) on the
// calling thread with `threads` intra-op threads, measured once per process
// and cached. Ranks that share a machine's cores measure their share, which
// is the "device" each of them really has. Returns FLOP/s (> 0).
double PeakMatmulFlops(int threads);

}  // namespace firedrill::agent
