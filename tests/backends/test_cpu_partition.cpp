// How the CPU backend shares work out among 1 to 64 threads: the partition functions (even shares
// at any thread count), the tree barrier under many rounds, the same bits at any thread count, and
// the partition report of a 1.1B llama's products.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/interleaved.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/partition.h"
#include "backends/cpu/thread_pool.h"
#include "backends/cpu_testing.h"

namespace weft {
namespace {

using test::data_context;
using test::fill_uniform;

const int thread_counts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64};

double imbalance(const std::vector<double> &work) {
    const double total = std::accumulate(work.begin(), work.end(), 0.0);
    if (total == 0) return 1.0;
    return *std::max_element(work.begin(), work.end()) / (total / double(work.size()));
}

TEST(CpuPartition, SplitRangeCoversEveryItemOnceAndSharesDifferByAtMostOne) {
    for (const int nth : thread_counts)
        for (int64_t n : {0, 1, 5, 10, 63, 64, 65, 160, 2048, 5632}) {
            int64_t next = 0, least = n, most = 0;
            for (int t = 0; t < nth; ++t) {
                const cpu::index_range r = cpu::split_range(n, t, nth);
                EXPECT_EQ(r.begin, next) << n << " items, thread " << t << " of " << nth;
                next = r.end;
                least = std::min(least, r.size());
                most = std::max(most, r.size());
            }
            EXPECT_EQ(next, n);
            EXPECT_LE(most - least, 1) << n << " items on " << nth << " threads";
            EXPECT_EQ(most, cpu::max_split_share(n, nth));
        }
}

// The products of one decode step of a 1.1B llama (n_embd 2048, 4 KV heads of 64, n_ff 5632, vocab
// 32000), in groups of 16 weight rows: q/k/v together, the output projection, gate/up together, the
// down projection, the output.
const std::vector<std::vector<int64_t>> llama_1b_products = {{128, 16, 16}, {128}, {352, 352}, {128}, {2000}};

TEST(CpuPartition, ChunkedProductsAreEvenUpTo64Threads) {
    for (const auto &groups : llama_1b_products)
        for (const int nth : thread_counts) {
            std::vector<double> work(static_cast<size_t>(nth));
            cpu::chunk_shares(groups, nth, work);
            const double total = std::accumulate(groups.begin(), groups.end(), 0.0);
            EXPECT_EQ(std::accumulate(work.begin(), work.end(), 0.0), total);
            // the least possible: chunks of one group of 16 rows, ⌈groups / threads⌉ on the busiest
            const double best = double(cpu::max_split_share(int64_t(total), nth)) / (total / nth);
            EXPECT_LE(imbalance(work), std::max(1.15, best * (1 + 1.0 / 16)))
                << groups.size() << " products of " << groups[0] << " groups, " << nth << " threads";
        }
    // the case that motivated it: 2048 rows (128 groups) on 64 threads, 2 groups each (chunks of 4
    // groups left half the threads without work)
    std::vector<double> work(64);
    cpu::chunk_shares(std::vector<int64_t>{128}, 64, work);
    EXPECT_EQ(imbalance(work), 1.0);
}

TEST(CpuPartition, RowValuesOfFewRowsAreSharedInPieces) {
    for (const int nth : thread_counts) {
        int64_t next = 0;
        for (int t = 0; t < nth; ++t) {
            const cpu::index_range r = cpu::split_row_values(5632, t, nth);
            EXPECT_EQ(r.begin, next);
            next = r.end;
        }
        EXPECT_EQ(next, 5632);
    }
}

// The gated delta net's shares (plan_delta_net): every column of every head computed by one thread,
// in column ranges of one head each, pieces of whole cache lines (16 floats) when heads are cut;
// whole heads when the heads are a multiple of the threads; never a busier thread than whole heads
// give (the modelled work: columns plus a piece's fixed cost per head). 32 heads of 128 on 64
// threads: halves, the busiest at 64 + 96 against 128 + 96 in whole heads.
TEST(CpuPartition, DeltaNetSharesAreNeverBusierThanWholeHeads) {
    const int delta_net_threads[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64};
    auto busiest = [](const cpu::delta_net_plan &plan, int64_t n_head, int64_t d_v, int nth) {
        int64_t most = 0;
        for (int t = 0; t < nth; ++t)
            most = std::max(most, cpu::delta_net_thread_work(plan, n_head, d_v, t, nth));
        return most;
    };
    int cut = 0;
    for (const int64_t n_head : {3, 5, 8, 12, 16, 24, 32, 48, 64})
        for (const int64_t d_v : {7, 24, 64, 80, 128})
            for (const int nth : delta_net_threads) {
                SCOPED_TRACE(std::to_string(n_head) + " heads of " + std::to_string(d_v) + ", " +
                             std::to_string(nth) + " threads");
                const cpu::delta_net_plan plan = cpu::plan_delta_net(n_head, d_v, nth);
                std::vector<int> times(size_t(n_head * d_v), 0);
                for (int t = 0; t < nth; ++t)
                    cpu::for_each_delta_net_share(
                        plan, n_head, d_v, t, nth, [&](int64_t head, int64_t begin, int64_t end) {
                            ASSERT_TRUE(head >= 0 && head < n_head && begin >= 0 && begin < end &&
                                        end <= d_v);
                            EXPECT_TRUE(begin % 16 == 0 && (end % 16 == 0 || end == d_v))
                                << begin << ", " << end;
                            for (int64_t j = begin; j < end; ++j) ++times[size_t(head * d_v + j)];
                        });
                EXPECT_EQ(std::count(times.begin(), times.end(), 1), n_head * d_v) << "each column once";
                if (n_head % nth == 0) {
                    EXPECT_EQ(plan.pieces_per_head, 1) << "whole heads";
                }
                EXPECT_LE(busiest(plan, n_head, d_v, nth), busiest({d_v, 1}, n_head, d_v, nth));
                cut += plan.pieces_per_head > 1;
            }
    EXPECT_GT(cut, 100) << "heads are cut into pieces where that pays";
    const cpu::delta_net_plan halves = cpu::plan_delta_net(32, 128, 64);
    EXPECT_EQ(halves.piece_columns, 64);
    EXPECT_EQ(busiest(halves, 32, 128, 64), 64 + cpu::delta_net_piece_cost);
    EXPECT_EQ(cpu::plan_delta_net(32, 128, 48).pieces_per_head, 1);
}

// Every thread writes its round into its slot, waits, and checks every slot has the round: a thread
// let through early (or one left behind) sees another round's value.
TEST(CpuPartition, TreeBarrierHoldsEveryThreadUpTo64ThreadsOverManyRounds) {
    cpu::thread_pool pool(1);
    for (const int nth : thread_counts) {
        pool.resize(nth);
        // oversubscribed (threads that sleep at the barrier, woken in turn): correctness, not speed
        const int rounds = nth <= 8 ? 200 : 20;
        std::vector<std::atomic<int>> slot(static_cast<size_t>(nth));
        std::atomic<int> wrong{0};
        pool.run([&](int ith) {
            for (int r = 1; r <= rounds; ++r) {
                slot[size_t(ith)].store(r, std::memory_order_relaxed);
                pool.barrier(ith);
                for (int t = 0; t < nth; ++t)
                    if (slot[size_t(t)].load(std::memory_order_relaxed) != r) wrong.fetch_add(1);
                pool.barrier(ith);
            }
        });
        EXPECT_EQ(wrong.load(), 0) << nth << " threads";
    }
    EXPECT_EQ(cpu::thread_pool::barrier_nodes(1), 1);
    EXPECT_EQ(cpu::thread_pool::barrier_nodes(8), 1);
    EXPECT_EQ(cpu::thread_pool::barrier_nodes(9), 3);
    EXPECT_EQ(cpu::thread_pool::barrier_nodes(64), 9);
    EXPECT_EQ(cpu::thread_pool::barrier_nodes(65), 9 + 2 + 1);
}

// q, k and v of one activation matrix computed together (one chunk dispenser over all rows), with
// 1 or 7 columns: the same bits at every thread count, whatever chunk size the plan picks.
TEST(CpuPartition, SharedProductsHaveTheSameBitsAtAnyThreadCount) {
    for (const dtype type : {dtype::q4_0, dtype::q4_k}) {
        SCOPED_TRACE(type_name(type));
        auto ctx = data_context(size_t(128) << 20);
        const int64_t k = 256;
        std::vector<std::vector<uint8_t>> memory;
        std::vector<tensor *> weights;
        for (const int64_t m : {int64_t(512), int64_t(64), int64_t(64)}) {
            std::vector<float> unused;
            tensor *a = test::make_weights(*ctx, type, k, m, 1, 1, uint32_t(m), unused);
            ASSERT_TRUE(cpu::can_interleave(*a));
            memory.emplace_back(cpu::interleaved_size(*a));
            cpu::interleave_tensor(*a, a->data, memory.back().data());
            a->data = memory.back().data();
            weights.push_back(a);
        }
        for (const int64_t n : {int64_t(1), int64_t(7)}) {
            tensor *b = ctx->new_tensor(dtype::f32, {k, n});
            fill_uniform(*b, 3);
            std::vector<tensor *> outs;
            graph g;
            for (tensor *a : weights) {
                outs.push_back(mul_mat(*ctx, a, b));
                build_forward_expand(g, outs.back());
            }
            std::vector<std::vector<float>> first;
            for (const int nth : thread_counts) {
                cpu_backend backend(nth);
                ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
                if (nth == 1) {
                    for (tensor *out : outs) first.push_back(test::values_of(*out));
                    continue;
                }
                for (size_t j = 0; j < outs.size(); ++j)
                    EXPECT_EQ(test::values_of(*outs[j]), first[j]) << nth << " threads, " << n << " columns";
            }
        }
    }
}

}  // namespace
}  // namespace weft
