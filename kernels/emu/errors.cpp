// Error state and strings of the emulated runtime (errors.h).
#include "kernels/emu/errors.h"

namespace subdp::emu {

namespace {

struct State {
  cudaError_t last = cudaSuccess;
  cudaError_t sticky = cudaSuccess;
  cudaError_t detail_code = cudaSuccess;
  std::string detail;
  std::string text;  // storage of the latest error_string
};

State& state() {
  static State& s = *new State;  // never destroyed: the run's backend, a static, is torn down after it
  return s;
}

const char* base_string(cudaError_t code) {
  switch (code) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return "unknown error";
  }
}

}  // namespace

cudaError_t set_error(cudaError_t code, const std::string& detail, bool sticky) {
  State& s = state();
  s.last = code;
  s.detail_code = code;
  s.detail = detail;
  if (sticky && s.sticky == cudaSuccess) s.sticky = code;
  return code;
}

cudaError_t sticky_error() { return state().sticky; }

cudaError_t take_last_error() {
  State& s = state();
  if (s.sticky != cudaSuccess) return s.sticky;
  const cudaError_t e = s.last;
  s.last = cudaSuccess;
  return e;
}

cudaError_t peek_last_error() {
  const State& s = state();
  return s.sticky != cudaSuccess ? s.sticky : s.last;
}

void clear_errors() { state() = State{}; }

const char* error_string(cudaError_t code) {
  State& s = state();
  if (code != cudaSuccess && code == s.detail_code && !s.detail.empty()) {
    s.text = std::string(base_string(code)) + " [CUDA emulator: " + s.detail + "]";
    return s.text.c_str();
  }
  return base_string(code);
}

const char* error_name(cudaError_t code) {
  switch (code) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}

}  // namespace subdp::emu
