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
    bool avx512bf16 = false;  // vdpbf16ps: two bf16 products per f32 lane (bf16 weights' products)
    bool avxvnni = false;     // AVX-VNNI: vpdpbusd on ymm with a VEX encoding (no AVX-512 needed)
};

// The detected features, with everything turned off when the environment variable
// WEFT_FORCE_SCALAR is set (or after force_scalar(true)) so the scalar paths can be tested; the
// AVX-512 ones and AVX-VNNI turned off under WEFT_MAX_ISA=avx2 (or after limit_to_avx2(true)) so the
// plain AVX2 paths can be tested on a CPU that has more, and only the AVX-512 ones under
// WEFT_MAX_ISA=avxvnni (or after limit_to_avxvnni(true)), the ISA of Intel's client cores.
const cpu_features &host_cpu_features();
void force_scalar(bool on);
bool scalar_forced();
void limit_to_avx2(bool on);
void limit_to_avxvnni(bool on);

}  // namespace weft
