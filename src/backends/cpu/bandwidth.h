// src/backends/cpu/bandwidth.h — the read loops of the memory bandwidth probe, per ISA.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft::cpu {

// Reads n bytes from p (64-byte aligned, n a multiple of 512) as fast as the ISA allows and
// returns a value that depends on every byte (so the reads cannot be optimized away).
uint64_t read_all_scalar(const void *p, size_t n);
uint64_t read_all_avx2(const void *p, size_t n);
uint64_t read_all_avx512(const void *p, size_t n);

}  // namespace weft::cpu
