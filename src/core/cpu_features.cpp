// src/core/cpu_features.cpp — cpuid/xgetbv probing of the host ISA, with a scalar override.
#include "weft/core/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace weft {
namespace {

cpu_features detect() {
    cpu_features f;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = (c >> 27) & 1;
    const bool avx = (c >> 28) & 1;
    f.fma = (c >> 12) & 1;
    f.f16c = (c >> 29) & 1;
    unsigned long long xcr0 = 0;
    if (osxsave) {
        unsigned lo = 0, hi = 0;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
    }
    const bool ymm_os = (xcr0 & 0x6) == 0x6;
    const bool zmm_os = (xcr0 & 0xe6) == 0xe6;
    if (!avx || !ymm_os) {
        f.fma = f.f16c = false;
        return f;
    }
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        const unsigned max_subleaf = a;
        f.avx2 = (b >> 5) & 1;
        if (zmm_os) {
            f.avx512f = (b >> 16) & 1;
            f.avx512bw = (b >> 30) & 1;
            f.avx512vl = (b >> 31) & 1;
            f.avx512vnni = (c >> 11) & 1;
        }
        if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) {
            f.avxvnni = f.avx2 && ((a >> 4) & 1);
            f.avx512bf16 = f.avx512f && ((a >> 5) & 1);
        }
    }
#endif
    return f;
}

enum isa_limit : int { no_limit, avxvnni_limit, avx2_limit };

isa_limit limit_from_environment() {
    const char *v = std::getenv("WEFT_MAX_ISA");
    if (v == nullptr) return no_limit;
    if (std::string(v) == "avx2") return avx2_limit;
    if (std::string(v) == "avxvnni") return avxvnni_limit;
    return no_limit;
}

std::atomic<bool> g_forced{std::getenv("WEFT_FORCE_SCALAR") != nullptr};
std::atomic<int> g_limit{limit_from_environment()};
const cpu_features g_detected = detect();
const cpu_features g_avxvnni_part = [] {
    cpu_features f = g_detected;
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512vnni = f.avx512bf16 = false;
    return f;
}();
const cpu_features g_avx2_part = [] {
    cpu_features f = g_avxvnni_part;
    f.avxvnni = false;
    return f;
}();
const cpu_features g_none{};

}  // namespace

const cpu_features &host_cpu_features() {
    if (g_forced.load()) return g_none;
    switch (g_limit.load()) {
        case avx2_limit:
            return g_avx2_part;
        case avxvnni_limit:
            return g_avxvnni_part;
        default:
            return g_detected;
    }
}
void limit_to_avx2(bool on) {
    g_limit.store(on ? avx2_limit : no_limit);
}
void limit_to_avxvnni(bool on) {
    g_limit.store(on ? avxvnni_limit : no_limit);
}
void force_scalar(bool on) {
    g_forced.store(on);
}
bool scalar_forced() {
    return g_forced.load();
}

}  // namespace weft
