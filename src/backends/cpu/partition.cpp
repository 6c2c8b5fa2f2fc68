// src/backends/cpu/partition.cpp — chunk plans of the chunked products and the gated delta net's
// plan (see partition.h).
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

int64_t delta_net_thread_work(const delta_net_plan &plan, int64_t n_head, int64_t d_v, int ith, int nth) {
    int64_t work = 0;
    for_each_delta_net_share(plan, n_head, d_v, ith, nth, [&](int64_t, int64_t begin, int64_t end) {
        work += end - begin + delta_net_piece_cost;
    });
    return work;
}

delta_net_plan plan_delta_net(int64_t n_head, int64_t d_v, int nth) {
    // every thread plans each node (a few thousand steps at 64 threads); the last shape's plan is kept
    thread_local struct {
        int64_t n_head = -1, d_v = -1;
        int nth = -1;
        delta_net_plan plan;
    } last;
    if (last.n_head == n_head && last.d_v == d_v && last.nth == nth) return last.plan;
    auto busiest = [&](const delta_net_plan &plan) {
        int64_t most = 0;
        for (int ith = 0; ith < nth; ++ith)
            most = std::max(most, delta_net_thread_work(plan, n_head, d_v, ith, nth));
        return most;
    };
    delta_net_plan best{d_v, 1};
    int64_t best_busiest = busiest(best);
    for (const int64_t columns : {int64_t(64), int64_t(32), int64_t(16)}) {
        if (columns >= d_v) continue;
        const delta_net_plan plan{columns, (d_v + columns - 1) / columns};
        const int64_t most = busiest(plan);
        if (most * 32 < best_busiest * 31) {
            best = plan;
            best_busiest = most;
        }
    }
    last = {n_head, d_v, nth, best};
    return best;
}

}  // namespace weft::cpu
