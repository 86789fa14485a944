// Error messages for the checking macros of check.h.
#include "kernels/cuda/check.h"

#include <cstdlib>
#include <string>

#include "engine/core/error.h"

namespace subdp::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw Error(fmt::format("CUDA error in {} at {}:{}: {} ({})", call, file, line, cudaGetErrorString(status),
                          cudaGetErrorName(status)));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(fmt::format("cuBLAS error in {} at {}:{}: {}", call, file, line, cublasGetStatusString(status)));
}

namespace {

/// Whether SUBDP_CUDA_SYNC_LAUNCHES=1 (read once).
bool sync_launches() {
  static const bool on = [] {
    const char* v = std::getenv("SUBDP_CUDA_SYNC_LAUNCHES");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

}  // namespace

void check_launch(const char* file, int line) {
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw_cuda_error(status, "the kernel launch", file, line);
  if (!sync_launches()) return;
  status = cudaDeviceSynchronize();
  if (status != cudaSuccess)
    throw_cuda_error(status, "the kernel launched here (SUBDP_CUDA_SYNC_LAUNCHES=1)", file, line);
}

}  // namespace subdp::cuda
