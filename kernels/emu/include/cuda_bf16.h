// Emulated build only (cmake -DSUBDP_CUDA=EMULATE): the emulator's bf16 type in place of the
// toolkit's header of this name.
#pragma once
#include "kernels/emu/bf16.h"
