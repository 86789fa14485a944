// The emulated runtime's error state: the last error of a call (cudaGetLastError clears it)
// and the sticky error of a faulted kernel or copy, which, as on a GPU, every later call
// returns until cudaDeviceReset. Each error keeps a detail (which call, which argument, which
// kernel) that cudaGetErrorString appends, so CUDA_CHECK's message names the fault.
#pragma once
#include <string>

#include "kernels/emu/types.h"

namespace subdp::emu {

/// Records `code` with its detail; sticky errors poison every later runtime call.
cudaError_t set_error(cudaError_t code, const std::string& detail, bool sticky = false);
/// The sticky error, or cudaSuccess.
cudaError_t sticky_error();
/// cudaGetLastError: the last error (sticky, or the latest call's), cleared unless sticky.
cudaError_t take_last_error();
cudaError_t peek_last_error();
/// Clears every error (cudaDeviceReset).
void clear_errors();
/// Toolkit text of `code`, with the emulator's detail when `code` is the latest error.
const char* error_string(cudaError_t code);
const char* error_name(cudaError_t code);

}  // namespace subdp::emu
