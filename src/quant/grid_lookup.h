// src/quant/grid_lookup.h — what the grid quantizers need to know about a codebook: which pattern of
// per-element codes is a grid point, and, for a pattern that is not, the grid points nearest to it.
//
// A grid point of n elements is written as small unsigned codes (3 bits each for the iq3 grids,
// levels 1, 3, ..., 15; 2 bits for the iq2 grids, magnitudes 8, 25, 43, and for the iq1 grid,
// levels -1, 0, 1), element j at bits
// code_bits * j of a pattern. The quantizers round each value to a code, look the pattern up, and
// when it is off the grid choose among its neighbours: every grid point at one of the few smallest
// squared distances from the pattern, in order of distance and then of index, as the established
// quantizer lists them.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "weft/core/error.h"

namespace weft::quant {

class grid_lookup {
  public:
    // points[g]: the codes of grid point g. Patterns whose codes are all <= max_code get
    // neighbour lists, holding the points at the n_distances smallest distances.
    grid_lookup(std::vector<uint16_t> points, int elements, int code_bits, int max_code, int n_distances);

    int elements() const { return elements_; }
    int size() const { return int(points_.size()); }

    // Code j of grid point g.
    int code(int g, int j) const { return (points_[size_t(g)] >> (code_bits_ * j)) & code_mask_; }

    // The pattern of `elements()` codes (each <= max_code).
    uint32_t pattern(const int8_t *codes) const {
        uint32_t u = 0;
        for (int j = 0; j < elements_; ++j) u |= uint32_t(codes[j]) << (code_bits_ * j);
        return u;
    }

    // The grid index of a pattern, or -1 when it is off the grid.
    int find(uint32_t pattern) const { return slot_[pattern] >= 0 ? slot_[pattern] : -1; }

    // The neighbours of an off-grid pattern, nearest first (never empty).
    std::span<const uint16_t> neighbours(uint32_t pattern) const {
        const int32_t s = slot_[pattern];
        WEFT_ASSERT(s < 0 && s != std::numeric_limits<int32_t>::min());
        const size_t at = size_t(-1 - s);
        return {neighbours_.data() + at + 1, neighbours_[at]};
    }

  private:
    std::vector<uint16_t> points_;
    int elements_, code_bits_, code_mask_;
    // Per pattern: its grid index (>= 0), or -1 - the offset in neighbours_ of its list (a count,
    // then the indices).
    std::vector<int32_t> slot_;
    std::vector<uint16_t> neighbours_;
};

// The lookups of the grids, built on first use (thread-safe) from the codebooks of iq_grids.cpp.
const grid_lookup &iq3xxs_lookup();  // 256 points of 4, codes 0..7, neighbours at 2 distances
const grid_lookup &iq3s_lookup();    // 512 points of 4, codes 0..7, neighbours at 3 distances
const grid_lookup &iq1s_lookup();    // 2048 points of 8, codes 0..2, neighbours at 3 distances
const grid_lookup &iq2xxs_lookup();  // 256 points of 8, codes 0..2, neighbours at 2 distances
const grid_lookup &iq2xs_lookup();   // 512 points of 8, codes 0..2, neighbours at 2 distances
const grid_lookup &iq2s_lookup();    // 1024 points of 8, codes 0..2, neighbours at 1 distance

}  // namespace weft::quant
