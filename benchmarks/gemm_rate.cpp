// Measures the sustained OpenBLAS cblas_sgemm rate, the ceiling the benchmarks compare the
// engine's achieved GFLOP/s against (benchmarks/throughput.py).
//   subdp_gemm_rate [N=1024] [SECONDS=2]: square N x N x N products with the current
//   OMP_NUM_THREADS; prints one JSON line {"n", "threads", "gflops"}.
#include <cblas.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1024;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 2.0;
  if (n < 1 || seconds <= 0) {
    std::fprintf(stderr, "usage: subdp_gemm_rate [N >= 1] [SECONDS > 0]\n");
    return 2;
  }
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.f);
  auto product = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
  };
  product();  // warm-up: thread pool and page faults
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  long reps = 0;
  double elapsed = 0;
  while (elapsed < seconds) {
    product();
    ++reps;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  }
  const double gflops = 2.0 * n * n * static_cast<double>(n) * reps / elapsed / 1e9;
  std::printf("{\"n\": %d, \"threads\": %d, \"gflops\": %.2f}\n", n, omp_get_max_threads(), gflops);
  return 0;
}
