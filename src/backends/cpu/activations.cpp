// src/backends/cpu/activations.cpp — the scalar build of the activations and the run-time choice.
#include "backends/cpu/activations_impl.h"
#include "weft/core/cpu_features.h"

WEFT_DEFINE_ACTIVATIONS(scalar)

namespace weft::cpu {

namespace {
int level() {
    const cpu_features &f = host_cpu_features();
    if (f.avx512f && f.avx512bw && f.avx512vl && f.avx2 && f.fma) return 2;
    if (f.avx2 && f.fma) return 1;
    return 0;
}
}  // namespace

swiglu_row_fn best_swiglu_row() {
    const swiglu_row_fn table[] = {swiglu_row_scalar, swiglu_row_avx2, swiglu_row_avx512};
    return table[level()];
}

silu_row_fn best_silu_row() {
    const silu_row_fn table[] = {silu_row_scalar, silu_row_avx2, silu_row_avx512};
    return table[level()];
}

}  // namespace weft::cpu
