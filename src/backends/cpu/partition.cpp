// src/backends/cpu/partition.cpp — chunk plans of the chunked products (see partition.h).
#include "backends/cpu/partition.h"

namespace weft::cpu {

int64_t groups_of_thread(std::span<const int64_t> groups, int64_t groups_per_chunk, int ith, int nth) {
    const index_range region = split_range(chunks_of(groups, groups_per_chunk), ith, nth);
    // walk the products' chunk ranges, counting the groups of those inside the region
    int64_t total = 0, first = 0;
    for (const int64_t g : groups) {
        const int64_t n = (g + groups_per_chunk - 1) / groups_per_chunk;
        const int64_t lo = std::max(region.begin, first) - first,
                      hi = std::min(region.end, first + n) - first;
        if (lo < hi) total += std::min(g, hi * groups_per_chunk) - lo * groups_per_chunk;
        first += n;
    }
    return total;
}

void chunk_shares(std::span<const int64_t> groups, int nth, std::span<double> work) {
    const chunk_plan plan = plan_chunks(groups, nth);
    for (int t = 0; t < nth; ++t)
        work[size_t(t)] = double(groups_of_thread(groups, plan.groups_per_chunk, t, nth));
}

}  // namespace weft::cpu
