// src/backends/cpu/rope_rotate_avx512.cpp — rope_rotate_impl.h compiled for AVX-512.
#include "backends/cpu/rope_rotate_impl.h"

WEFT_DEFINE_ROPE_ROTATE(avx512)
