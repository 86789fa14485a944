// FLOP counter: layers add the FLOPs of every GEMM they run (2*M*N*K), so the metrics
// report what a step really computed (skipped masked GEMMs are not counted).
#pragma once
#include <cstdint>

namespace subdp {

/// Process-wide count of floating-point operations since the last reset.
struct FlopCounter {
  static int64_t& count() {
    static int64_t n = 0;
    return n;
  }
  static void add_gemm(int64_t M, int64_t N, int64_t K) { count() += 2 * M * N * K; }
  static int64_t take() {
    int64_t n = count();
    count() = 0;
    return n;
  }
};

}  // namespace subdp
