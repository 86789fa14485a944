// Emulated build only (cmake -DSUBDP_CUDA=EMULATE): the emulator's CUB radix sort in place of
// the toolkit's header of this name.
#pragma once
#include "kernels/emu/cub_sort.h"
