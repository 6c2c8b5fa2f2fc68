// src/quant/iq_grids.h — the codebooks ("grids") of the grid i-quant types, constants of the file
// format (iq_grids.cpp), and the sign patterns they share.
#pragma once

#include <bit>
#include <cstdint>

namespace weft::quant {

// Each grid entry packs 4 (iq3) or 8 (iq2) unsigned magnitudes, element j in byte j (bits 8j..8j+7).
extern const uint32_t iq3s_grid[512];         // iq3_s: magnitudes 1, 3, ..., 15
extern const uint64_t iq2xxs_grid[256];       // iq2_xxs: magnitudes 8, 25, 43
extern const uint64_t iq2xs_grid[512];        // iq2_xs: magnitudes 8, 25, 43
extern const uint64_t iq2s_grid[1024];        // iq2_s: magnitudes 8, 25, 43
extern const uint32_t iq3xxs_grid[256];       // iq3_xxs: magnitudes 4, 12, ..., 52, 62
extern const uint16_t iq1s_grid_codes[2048];  // iq1_s, iq1_m: values -1, 0, 1, two bits each

// Byte j of a grid entry.
inline int grid_byte(uint64_t entry, int j) {
    return int((entry >> (8 * j)) & 0xff);
}

// Element j (< 8) of an iq1s grid point: -1, 0 or 1.
inline int iq1s_value(int index, int j) {
    return int((iq1s_grid_codes[index] >> (2 * j)) & 3) - 1;
}

// The iq2 / iq3_xxs sign patterns: 7 stored bits give the signs of elements 0..6 of a group of 8
// (bit j set: element j negative); the eighth sign makes the number of negative elements even.
inline uint8_t even_signs(uint32_t seven_bits) {
    const uint32_t s = seven_bits & 127;
    return uint8_t(s | ((std::popcount(s) & 1u) << 7));
}

}  // namespace weft::quant
