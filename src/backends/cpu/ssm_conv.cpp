// src/backends/cpu/ssm_conv.cpp — the scalar build of ssm_conv_impl.h and the run-time choice.
#include "backends/cpu/simd_level.h"
#include "backends/cpu/ssm_conv_impl.h"

WEFT_DEFINE_SSM_CONV(scalar)

namespace weft::cpu {

ssm_conv_channels_fn best_ssm_conv_channels() {
    return best_of({ssm_conv_channels_scalar, ssm_conv_channels_avx2, ssm_conv_channels_avx512});
}

}  // namespace weft::cpu
