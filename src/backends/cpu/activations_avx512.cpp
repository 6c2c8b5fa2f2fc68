// src/backends/cpu/activations_avx512.cpp — activations_impl.h compiled for AVX-512.
#include "backends/cpu/activations_impl.h"

WEFT_DEFINE_ACTIVATIONS(avx512)
