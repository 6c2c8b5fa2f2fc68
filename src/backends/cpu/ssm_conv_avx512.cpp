// src/backends/cpu/ssm_conv_avx512.cpp — ssm_conv_impl.h compiled for AVX-512.
#include "backends/cpu/ssm_conv_impl.h"

WEFT_DEFINE_SSM_CONV(avx512)
