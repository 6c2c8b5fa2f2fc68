// src/backends/cpu/activations_avx2.cpp — activations_impl.h compiled for AVX2 + FMA.
#include "backends/cpu/activations_impl.h"

WEFT_DEFINE_ACTIVATIONS(avx2)
