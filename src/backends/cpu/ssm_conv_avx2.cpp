// src/backends/cpu/ssm_conv_avx2.cpp — ssm_conv_impl.h compiled for AVX2 + FMA.
#include "backends/cpu/ssm_conv_impl.h"

WEFT_DEFINE_SSM_CONV(avx2)
