// src/backends/cpu/rope_rotate_avx2.cpp — rope_rotate_impl.h compiled for AVX2 + FMA.
#include "backends/cpu/rope_rotate_impl.h"

WEFT_DEFINE_ROPE_ROTATE(avx2)
