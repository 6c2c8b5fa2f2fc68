// src/backends/cpu/delta_net_avx2.cpp — delta_net_impl.h compiled for AVX2 + FMA.
#include "backends/cpu/delta_net_impl.h"

WEFT_DEFINE_DELTA_NET(avx2)
