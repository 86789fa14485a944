// Error-checking macros for the CUDA runtime, cuBLAS and NCCL (after llm.c's cudaCheck):
// a failed call throws subdp::Error naming the call text, file, line and the library's own
// error string. CUDA_CHECK_LAUNCH() follows every kernel launch (cudaGetLastError), so a bad
// launch configuration is reported where it happened, not at the next synchronisation.
// The throwing functions live in check.cpp, so .cu files never parse fmt.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#if defined(SUBDP_WITH_NCCL)
#include <nccl.h>
#endif

namespace subdp::cuda {

/// Throw subdp::Error "CUDA error in <call> at <file>:<line>: <string> (<name>)".
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
/// Throw subdp::Error "cuBLAS error in <call> at <file>:<line>: <status string>".
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
/// The body of CUDA_CHECK_LAUNCH: cudaGetLastError, then with SUBDP_CUDA_SYNC_LAUNCHES=1
/// cudaDeviceSynchronize; throws subdp::Error naming the launch's file and line.
void check_launch(const char* file, int line);

#if defined(SUBDP_WITH_NCCL)
/// Throw subdp::Error "NCCL error in <call> at <file>:<line>: <string> (last: <detail>)".
[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line);
#endif

}  // namespace subdp::cuda

#define CUDA_CHECK(call)                                                                                       \
  do {                                                                                                         \
    cudaError_t cuda_status_ = (call);                                                                         \
    if (cuda_status_ != cudaSuccess) ::subdp::cuda::throw_cuda_error(cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

/// After every kernel launch: reports launch errors (bad grid, missing kernel image). With
/// SUBDP_CUDA_SYNC_LAUNCHES=1 in the environment it also waits for the kernel to finish, so
/// that a fault inside it (an illegal address, a trap) is reported at this launch's file and
/// line instead of at some later synchronisation. Slow: for finding a faulting kernel only.
#define CUDA_CHECK_LAUNCH() ::subdp::cuda::check_launch(__FILE__, __LINE__)

#define CUBLAS_CHECK(call)                                                          \
  do {                                                                              \
    cublasStatus_t cublas_status_ = (call);                                         \
    if (cublas_status_ != CUBLAS_STATUS_SUCCESS)                                    \
      ::subdp::cuda::throw_cublas_error(cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)

#if defined(SUBDP_WITH_NCCL)
#define NCCL_CHECK(call)                                                                                       \
  do {                                                                                                         \
    ncclResult_t nccl_status_ = (call);                                                                        \
    if (nccl_status_ != ncclSuccess) ::subdp::cuda::throw_nccl_error(nccl_status_, #call, __FILE__, __LINE__); \
  } while (0)
#endif
