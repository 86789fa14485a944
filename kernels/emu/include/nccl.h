// Emulated build only (cmake -DSUBDP_CUDA=EMULATE): the emulator's NCCL, carried over MPI,
// in place of the library's header of this name.
#pragma once
#include "kernels/emu/nccl.h"
