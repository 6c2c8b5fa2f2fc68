// src/backends/cpu/partition.h — how the CPU kernels share a node's work out among threads: pure
// functions of the node's size and the thread count, called by the kernels themselves and by the
// partition report (cpu_partition_report in weft/backends/cpu.h), so what the report shows is what
// the kernels do. Who computes an element never changes its value (each is computed whole, in a
// fixed order), so a partition may change without changing a bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

namespace weft::cpu {

// [begin, end) of n items for thread ith of nth, in contiguous blocks.
struct index_range {
    int64_t begin;
    int64_t end;
    int64_t size() const { return end - begin; }
};
// The blocks differ by at most one item (the first n % nth threads get one more), so no thread idles
// while another has two items more than it: 10 rows on 4 threads are 3, 3, 2, 2.
inline index_range split_range(int64_t n, int ith, int nth) {
    const int64_t base = n / nth, extra = n % nth;
    const int64_t begin = base * ith + std::min<int64_t>(ith, extra);
    return {begin, begin + base + (ith < extra ? 1 : 0)};
}
// The most items split_range gives one thread.
inline int64_t max_split_share(int64_t n, int nth) {
    return (n + nth - 1) / nth;
}

// The products of one chunked node (a layer's q/k/v computed together, the used experts of a
// mul_mat_id) share one chunk dispenser: chunks of groups of 16 weight rows, product after product,
// one contiguous region of chunks per thread (chunk_dispenser in kernels.h). Chunks of 4 groups keep
// a prefill's activations in L1 over more weight rows, but a decode's 2048-row product has only 32
// of them: above 32 threads some threads had none. So the chunk is the largest of 4, 2 and 1 groups
// whose busiest thread (taking its own region, all threads equally fast) has at most 1/16 more groups
// than the least a busiest thread can have (⌈groups / threads⌉, with chunks of one group). The bound
// used for a chunk of g groups, ⌈chunks / threads⌉ · g, is exact or above: the plan is a few integer
// operations per product, computed by every thread at the node's start.
struct chunk_plan {
    int64_t groups_per_chunk = 4;
    int64_t n_chunks = 0;  // over all products
};
// Chunks of the products of `groups` (groups of 16 rows per product) at `groups_per_chunk`.
inline int64_t chunks_of(std::span<const int64_t> groups, int64_t groups_per_chunk) {
    int64_t n = 0;
    for (const int64_t g : groups) n += (g + groups_per_chunk - 1) / groups_per_chunk;
    return n;
}
// Groups (rows / 16) in each of thread ith's chunks summed: its share when no thread helps another.
int64_t groups_of_thread(std::span<const int64_t> groups, int64_t groups_per_chunk, int ith, int nth);
// The plan for products of total groups in all whose chunks at g groups are chunks(g).
template <class chunks_at>
chunk_plan plan_chunks_for(int64_t total, int nth, chunks_at chunks) {
    const int64_t least = max_split_share(total, nth);
    for (const int64_t per_chunk : {int64_t(4), int64_t(2)}) {
        const int64_t n_chunks = chunks(per_chunk);
        if (max_split_share(n_chunks, nth) * per_chunk <= least + least / 16) return {per_chunk, n_chunks};
    }
    return {1, total};
}
inline chunk_plan plan_chunks(std::span<const int64_t> groups, int nth) {
    int64_t total = 0;
    for (const int64_t g : groups) total += g;
    return plan_chunks_for(total, nth, [&](int64_t per_chunk) { return chunks_of(groups, per_chunk); });
}
// n_products products of `groups_each` groups each (the experts a mul_mat_id uses).
inline chunk_plan plan_equal_chunks(int64_t groups_each, int64_t n_products, int nth) {
    return plan_chunks_for(groups_each * n_products, nth, [&](int64_t per_chunk) {
        return n_products * ((groups_each + per_chunk - 1) / per_chunk);
    });
}
// Writes each thread's groups under plan_chunks into work[0, nth).
void chunk_shares(std::span<const int64_t> groups, int nth, std::span<double> work);

// A row-wise node of fewer rows than threads (glu at decode: one row of 5632 values) shares each
// row's values out in pieces of 16 floats (a cache line: no two threads write one): thread ith's
// values [begin, end) of a row of ne0. Pieces of 64 left 64 threads at 2 pieces against a mean of
// 1.4 (5632 values); of 16, 6 against 5.5.
constexpr int64_t row_piece = 16;
inline index_range split_row_values(int64_t ne0, int ith, int nth) {
    const index_range pieces = split_range((ne0 + row_piece - 1) / row_piece, ith, nth);
    return {std::min(ne0, pieces.begin * row_piece), std::min(ne0, pieces.end * row_piece)};
}

// The gated delta net (delta_net.cpp) shares out whole value heads or pieces of them. A head's
// output column j and column j of its state S [d_k x d_v] depend on no other column (the op has no
// sum over value columns: delta_net_impl.h), so a head may be computed in column ranges by several
// threads, each range by the head's arithmetic unchanged (the same bits). But a piece repeats the
// head's work that is not per column: the Gram rows k_r · k_s and q_r · k_s of the block's keys, the
// decays e^(G_r - G_s), the copy of the block's keys, a start per row of S0. Measured at d_k = d_v =
// 128 (AVX-512, one thread), a piece costs its columns plus about what 70 (a 512-token prompt) to
// 130 (decoding) columns of the head cost. So a thread's work is modelled as its columns plus
// delta_net_piece_cost per head it computes a part of (whole heads included), and the plan takes,
// of whole heads and pieces of 64, 32 and 16 columns (whole cache lines: no two threads write one
// line of a row), the one whose busiest thread, taking its contiguous region of the pieces head
// after head, has the least work (a smaller piece only when its busiest has 1/32 less). Whole heads
// share out evenly whenever the heads are a multiple of the threads; 32 heads of 128 on 64 threads
// become halves (the busiest has 64 + 96 against 128 + 96); on 48 threads whole heads stay (a thread
// of two thirds of a head in two pieces would have more).
constexpr int64_t delta_net_piece_cost = 96;
struct delta_net_plan {
    int64_t piece_columns = 0;  // value columns of a piece (d_v: whole heads)
    int64_t pieces_per_head = 1;
};
delta_net_plan plan_delta_net(int64_t n_head, int64_t d_v, int nth);
// Calls share(head, column_begin, column_end) for each head thread ith of nth computes columns
// [column_begin, column_end) of under plan, in order (a thread's region of the pieces is
// contiguous: at most its first and last heads are partial).
template <class each_share>
void for_each_delta_net_share(const delta_net_plan &plan, int64_t n_head, int64_t d_v, int ith, int nth,
                              each_share share) {
    const index_range region = split_range(n_head * plan.pieces_per_head, ith, nth);
    for (int64_t piece = region.begin; piece < region.end;) {
        const int64_t head = piece / plan.pieces_per_head, first_piece = head * plan.pieces_per_head;
        const int64_t end = std::min(region.end, first_piece + plan.pieces_per_head);
        share(head, (piece - first_piece) * plan.piece_columns,
              std::min(d_v, (end - first_piece) * plan.piece_columns));
        piece = end;
    }
}
// Thread ith's modelled work under plan: its columns plus delta_net_piece_cost per head it takes part in.
int64_t delta_net_thread_work(const delta_net_plan &plan, int64_t n_head, int64_t d_v, int ith, int nth);

}  // namespace weft::cpu
