// src/backends/cpu/delta_net_avx512.cpp — delta_net_impl.h compiled for AVX-512.
#include "backends/cpu/delta_net_impl.h"

WEFT_DEFINE_DELTA_NET(avx512)
