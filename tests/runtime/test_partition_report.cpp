// The partition report of a real step graph: a one-layer llama of the 1.1B's shapes (n_embd 2048,
// 32 heads, 4 KV heads, n_ff 5632), its decode and prefill graphs shared out by the CPU kernels' own
// partition functions among 1 to 64 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "model/model_test_util.h"
#include "weft/backends/cpu.h"
#include "weft/core/graph.h"
#include "weft/core/ops.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"

namespace weft {
namespace {

TEST(PartitionReport, ProductsOfA1bLlamaStepAreEvenUpTo64Threads) {
    synth_spec s;
    s.n_embd = 2048;
    s.n_layer = 1;
    s.n_head = 32;
    s.n_head_kv = 4;
    s.n_ff = 5632;
    s.n_vocab = 2000;
    s.type = dtype::q4_0;
    test::synth_file f("partition-report", s);
    auto m = model::load(f.path());
    inference_params ip;
    ip.n_ctx = 256;
    ip.n_batch = ip.n_ubatch = 64;
    inference_context ctx(*m, ip);
    for (const int32_t n_tokens : {1, 64}) {
        ctx.visit_step_graph(n_tokens, [&](const graph &g) {
            for (const int nth : {1, 2, 4, 8, 16, 32, 64}) {
                int products = 0;
                for (const cpu_node_partition &r : cpu_backend::partition_report(g, nth)) {
                    const std::string what = std::string(op_name(r.node->op)) + " '" + r.node->name + "', " +
                                             std::to_string(n_tokens) + " tokens, " + std::to_string(nth) +
                                             " threads";
                    if (r.alone) {
                        // (a cache store is small by the rows it stores)
                        EXPECT_TRUE(r.node->op == op_kind::set_rows || r.node->nelements() <= 4096)
                            << what << ": serial, yet not small";
                        continue;
                    }
                    if (!r.modelled) {
                        EXPECT_EQ(r.node->op, op_kind::attention) << what << ": not modelled";
                        continue;
                    }
                    ASSERT_EQ(r.work.size(), size_t(nth));
                    const double total = std::accumulate(r.work.begin(), r.work.end(), 0.0);
                    ASSERT_GT(total, 0) << what;
                    const double imbalance = *std::max_element(r.work.begin(), r.work.end()) / (total / nth);
                    if (r.node->op == op_kind::mul_mat) {
                        ++products;
                        // q, k and v together are 160 groups of 16 rows: on 64 threads 3 against a mean
                        // of 2.5
                        EXPECT_LE(imbalance, nth < 64 ? 1.15 : 1.2) << what;
                    } else {
                        EXPECT_LE(imbalance, 1.1) << what;
                    }
                }
                // q/k/v together, the output projection, gate/up together, down, the output
                EXPECT_EQ(products, 5) << n_tokens << " tokens, " << nth << " threads";
            }
        });
    }
}

}  // namespace
}  // namespace weft
