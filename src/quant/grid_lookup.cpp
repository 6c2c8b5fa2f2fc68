// src/quant/grid_lookup.cpp — building the pattern → grid point map and the neighbour lists of the
// grid quantizers, and the lookups of the iq3 and iq1 grids.
#include "quant/grid_lookup.h"

#include <limits>

#include "quant/iq_grids.h"
#include "weft/core/error.h"

namespace weft::quant {

grid_lookup::grid_lookup(std::vector<uint16_t> points, int elements, int code_bits, int max_code,
                         int n_distances)
    : points_(std::move(points)),
      elements_(elements),
      code_bits_(code_bits),
      code_mask_((1 << code_bits) - 1) {
    WEFT_ASSERT(elements * code_bits <= 24 && max_code <= code_mask_ && n_distances > 0);
    const uint32_t n_patterns = 1u << (elements * code_bits);
    // Patterns with a code above max_code never occur; they keep this slot.
    constexpr int32_t never = std::numeric_limits<int32_t>::min();
    slot_.assign(n_patterns, never);
    for (size_t g = 0; g < points_.size(); ++g) slot_[points_[g]] = int32_t(g);

    // Squared distances are small integers (in code units; the established quantizer measures in
    // levels 2 code + 1, four times these, which orders the points the same way).
    const int max_d2 = elements * max_code * max_code;
    std::vector<int> d2(points_.size());
    std::vector<int> count(size_t(max_d2) + 1);
    int8_t codes[8];
    for (uint32_t u = 0; u < n_patterns; ++u) {
        if (slot_[u] != never) continue;  // on the grid
        bool valid = true;
        for (int j = 0; j < elements; ++j) {
            codes[j] = int8_t((u >> (code_bits * j)) & uint32_t(code_mask_));
            valid = valid && codes[j] <= max_code;
        }
        if (!valid) continue;
        std::fill(count.begin(), count.end(), 0);
        for (size_t g = 0; g < points_.size(); ++g) {
            int sum = 0;
            for (int j = 0; j < elements; ++j) {
                const int diff = code(int(g), j) - codes[j];
                sum += diff * diff;
            }
            d2[g] = sum;
            ++count[size_t(sum)];
        }
        // The n_distances smallest distances that occur, then their points by distance and index.
        int limit = 0;
        for (int d = 0, seen = 0; d <= max_d2 && seen < n_distances; ++d)
            if (count[size_t(d)]) {
                ++seen;
                limit = d;
            }
        const size_t at = neighbours_.size();
        slot_[u] = -1 - int32_t(at);
        neighbours_.push_back(0);
        for (int d = 0; d <= limit; ++d) {
            if (!count[size_t(d)]) continue;
            for (size_t g = 0; g < points_.size(); ++g)
                if (d2[g] == d) neighbours_.push_back(uint16_t(g));
        }
        neighbours_[at] = uint16_t(neighbours_.size() - at - 1);
    }
}

namespace {

// The codes of a grid of 4-element points stored as byte magnitudes.
std::vector<uint16_t> codes_of(const uint32_t *grid, int size, int (*code_of)(int magnitude)) {
    std::vector<uint16_t> points(size_t(size), 0);
    for (int g = 0; g < size; ++g)
        for (int j = 0; j < 4; ++j) points[size_t(g)] |= uint16_t(code_of(grid_byte(grid[g], j)) << (3 * j));
    return points;
}

// The codes of a grid of 8-element points stored as byte magnitudes 8, 25, 43 (the iq2 grids).
std::vector<uint16_t> iq2_codes_of(const uint64_t *grid, int size) {
    std::vector<uint16_t> points(size_t(size), 0);
    for (int g = 0; g < size; ++g)
        for (int j = 0; j < 8; ++j) {
            const int m = grid_byte(grid[g], j);
            WEFT_ASSERT(m == 8 || m == 25 || m == 43);
            points[size_t(g)] |= uint16_t((m == 8 ? 0 : m == 25 ? 1 : 2) << (2 * j));
        }
    return points;
}

}  // namespace

// iq3_xxs magnitudes are 8 code + 4 (the last level stored as 62, not 60), iq3_s ones 2 code + 1.
const grid_lookup &iq3xxs_lookup() {
    static const grid_lookup lookup(codes_of(iq3xxs_grid, 256, [](int m) { return m / 8; }), 4, 3, 7, 2);
    return lookup;
}

const grid_lookup &iq3s_lookup() {
    static const grid_lookup lookup(codes_of(iq3s_grid, 512, [](int m) { return (m - 1) / 2; }), 4, 3, 7, 3);
    return lookup;
}

const grid_lookup &iq1s_lookup() {
    static const grid_lookup lookup(std::vector<uint16_t>(iq1s_grid_codes, iq1s_grid_codes + 2048), 8, 2, 2,
                                    3);
    return lookup;
}

// The established search's neighbour lists cover 2 distances for the 256- and 512-point grids, 1 for
// the 1024-point one.
const grid_lookup &iq2xxs_lookup() {
    static const grid_lookup lookup(iq2_codes_of(iq2xxs_grid, 256), 8, 2, 2, 2);
    return lookup;
}

const grid_lookup &iq2xs_lookup() {
    static const grid_lookup lookup(iq2_codes_of(iq2xs_grid, 512), 8, 2, 2, 2);
    return lookup;
}

const grid_lookup &iq2s_lookup() {
    static const grid_lookup lookup(iq2_codes_of(iq2s_grid, 1024), 8, 2, 2, 1);
    return lookup;
}

}  // namespace weft::quant
