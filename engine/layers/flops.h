// FLOP counter: layers add the FLOPs of every GEMM they run (2*M*N*K), so the metrics
// report what a step really computed (skipped masked GEMMs are not counted).
#pragma once
#include <cstdint>

namespace subdp {

/// Process-wide count of floating-point operations since the last reset.
struct FlopCounter {
  /// The running count (FLOPs, a multiply-add counting 2), to add to or read.
  static int64_t& count() {
    static int64_t n = 0;
    return n;
  }
  /// Adds one (M, K) x (K, N) GEMM: 2 M N K FLOPs.
  static void add_gemm(int64_t M, int64_t N, int64_t K) { count() += 2 * M * N * K; }
  /// Returns the count and resets it to 0.
  static int64_t take() {
    int64_t n = count();
    count() = 0;
    return n;
  }
};

}  // namespace subdp
