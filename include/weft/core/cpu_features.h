// weft/core/cpu_features.h — what the CPU can do, read once with cpuid, so kernels pick an ISA.
#pragma once

namespace weft {

struct cpu_features {
    bool avx2 = false;
    bool fma = false;
    bool f16c = false;
    bool avx512f = false;
    bool avx512bw = false;
    bool avx512vl = false;
    bool avx512vnni = false;
};

// The detected features, with everything turned off when the environment variable
// WEFT_FORCE_SCALAR is set (or after force_scalar(true)) so the scalar paths can be tested.
const cpu_features &host_cpu_features();
void force_scalar(bool on);
bool scalar_forced();

}  // namespace weft
