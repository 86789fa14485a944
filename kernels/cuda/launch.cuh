// SUBDP_LAUNCH(grid, block, shared_bytes, stream, kernel)(args...): the one way kernels/cuda
// launches a kernel. Under nvcc it is the triple-chevron launch; in the emulated build
// (cmake -DSUBDP_CUDA=EMULATE, kernels/emu) the same source goes to the emulator's launcher,
// so a kernel body exists once. The kernel comes last so that a template-id with commas
// (partial_sum_kernel<T, Square>) needs no parentheses.
#pragma once

#if defined(SUBDP_CUDA_EMULATED)
#include "kernels/emu/launch.h"
#define SUBDP_LAUNCH(grid, block, shared_bytes, stream, ...) \
  ::subdp::emu::launcher(&__VA_ARGS__, #__VA_ARGS__, grid, block, shared_bytes, stream)
#else
#define SUBDP_LAUNCH(grid, block, shared_bytes, stream, ...) __VA_ARGS__<<<grid, block, shared_bytes, stream>>>
#endif
