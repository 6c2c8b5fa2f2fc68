// src/backends/cpu/activations.cpp — the scalar build of the activations and the run-time choice.
#include "backends/cpu/activations_impl.h"
#include "backends/cpu/simd_level.h"

WEFT_DEFINE_ACTIVATIONS(scalar)

namespace weft::cpu {

swiglu_row_fn best_swiglu_row() {
    return best_of({swiglu_row_scalar, swiglu_row_avx2, swiglu_row_avx512});
}

swiglu_oai_row_fn best_swiglu_oai_row() {
    return best_of({swiglu_oai_row_scalar, swiglu_oai_row_avx2, swiglu_oai_row_avx512});
}

silu_row_fn best_silu_row() {
    return best_of({silu_row_scalar, silu_row_avx2, silu_row_avx512});
}

softplus_row_fn best_softplus_row() {
    return best_of({softplus_row_scalar, softplus_row_avx2, softplus_row_avx512});
}

ssm_scan_step_fn best_ssm_scan_step() {
    return best_of({ssm_scan_step_scalar, ssm_scan_step_avx2, ssm_scan_step_avx512});
}

ssm_scan_mamba2_step_fn best_ssm_scan_mamba2_step() {
    return best_of({ssm_scan_mamba2_step_scalar, ssm_scan_mamba2_step_avx2, ssm_scan_mamba2_step_avx512});
}

}  // namespace weft::cpu
