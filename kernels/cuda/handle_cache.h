// Library handles (cuBLAS, cuBLASLt) per thread and device: such handles are not thread-safe,
// and one belongs to the device current when it was made.
#pragma once
#include <unordered_map>

#include "kernels/cuda/check.h"

namespace subdp::cuda {

/// The calling thread's handle for the current device: made by Create on first use, destroyed
/// by Destroy at thread exit (errors then ignored). Errors: a failed cudaGetDevice or Create.
template <class Handle, cublasStatus_t (*Create)(Handle*), cublasStatus_t (*Destroy)(Handle)>
Handle thread_device_handle() {
  struct Cache {
    std::unordered_map<int, Handle> handles;
    ~Cache() {
      for (auto& kv : handles) Destroy(kv.second);
    }
  };
  thread_local Cache cache;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  auto it = cache.handles.find(device);
  if (it != cache.handles.end()) return it->second;
  Handle h = nullptr;
  CUBLAS_CHECK(Create(&h));
  cache.handles.emplace(device, h);
  return h;
}

}  // namespace subdp::cuda
