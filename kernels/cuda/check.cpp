// Error messages for the checking macros of check.h.
#include "kernels/cuda/check.h"

#include "engine/error.h"

namespace subdp::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw Error(fmt::format("CUDA error in {} at {}:{}: {} ({})", call, file, line,
                          cudaGetErrorString(status), cudaGetErrorName(status)));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(fmt::format("cuBLAS error in {} at {}:{}: {}", call, file, line,
                          cublasGetStatusString(status)));
}

#if defined(SUBDP_WITH_NCCL)
void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  throw Error(fmt::format("NCCL error in {} at {}:{}: {}{}", call, file, line,
                          ncclGetErrorString(status),
                          last && *last ? fmt::format(" (last: {})", last) : std::string()));
}
#endif

}  // namespace subdp::cuda
