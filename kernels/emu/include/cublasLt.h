// Emulated build only (cmake -DSUBDP_CUDA=EMULATE): the emulator's cuBLASLt in place of the
// toolkit's header of this name.
#pragma once
#include "kernels/emu/cublaslt.h"
