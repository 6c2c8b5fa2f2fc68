// tests/core/test_allocator.cpp — the memory planner: reuse, in place, views, lifetimes, results.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "host_test_backend.h"
#include "weft/core/allocator.h"
#include "weft/core/error.h"
#include "weft/core/graph.h"
#include "weft/core/ops.h"

using namespace weft;
using weft::test::reference_eval;
using weft::test::test_buffer_type;

namespace {

constexpr int64_t mib_floats = (1 << 20) / 4;  // a 1 MiB f32 tensor

const tensor *root_of(const tensor *t) {
    return t->view_src ? t->view_src : t;
}

// Independent check of a plan: two tensors whose lifetimes overlap never share bytes, except a
// node with the source it took over in place. A lifetime runs from the node that makes a tensor
// (leafs: before the first node) to the last node reading it or any view of it; inputs, outputs,
// leafs and sources of unread views live to the end.
void expect_no_overlap(const graph &g, const graph_allocator::plan &p) {
    const int end = int(g.nodes.size());
    std::unordered_map<const tensor *, int> first, last;
    for (const tensor *l : g.leafs) first[l] = -1, last[l] = end;
    for (int i = 0; i < end; ++i) {
        const tensor *n = g.nodes[size_t(i)];
        first[n] = i;
        last.try_emplace(n, i);
        if (n->flags & (tensor_flag_input | tensor_flag_output)) last[n] = end;
        for (const tensor *s : n->src) {
            if (s == nullptr) continue;
            last[root_of(s)] = std::max(last[root_of(s)], i);
            last[s] = std::max(last[s], i);
        }
    }
    for (int i = 0; i < end; ++i) {  // a view's readers keep its source alive
        const tensor *n = g.nodes[size_t(i)];
        if (n->view_src) last[n->view_src] = std::max(last[n->view_src], last[n] == i ? end : last[n]);
    }
    std::vector<const tensor *> planned;
    for (const auto &[t, off] : p.offsets) planned.push_back(t);
    for (size_t i = 0; i < planned.size(); ++i)
        for (size_t j = i + 1; j < planned.size(); ++j) {
            const tensor *a = planned[i];
            const tensor *b = planned[j];
            const size_t a0 = p.offsets.at(a), a1 = a0 + a->nbytes();
            const size_t b0 = p.offsets.at(b), b1 = b0 + b->nbytes();
            if (a1 <= b0 || b1 <= a0) continue;                      // disjoint bytes
            if (last[a] < first[b] || last[b] < first[a]) continue;  // disjoint lifetimes
            // an in-place chain hands its block from source to result at one node
            auto handed_over = [&](const tensor *from, const tensor *to) {
                auto it = p.inplace.find(to);
                return it != p.inplace.end() && it->second == from && last[from] == first[to];
            };
            EXPECT_TRUE(handed_over(a, b) || handed_over(b, a))
                << "'" << a->name << "' and '" << b->name << "' overlap in memory and in time";
        }
}

struct chain {
    context ctx{context_params{context_overhead(512), true}};
    graph g;
    tensor *x = nullptr;
    tensor *c = nullptr;
    tensor *out = nullptr;
};

// x -> add c -> mul c -> add c ... (n ops), every tensor 1 MiB
void build_chain(chain &ch, int n, bool with_cont) {
    ch.x = ch.ctx.new_tensor(dtype::f32, {mib_floats})->set_name("x");
    ch.x->flags |= tensor_flag_input;
    ch.c = ch.ctx.new_tensor(dtype::f32, {mib_floats})->set_name("c");
    ch.c->flags |= tensor_flag_input;
    tensor *t = ch.x;
    for (int i = 0; i < n; ++i) {
        if (with_cont && i % 2)
            t = cont(ch.ctx, t);
        else
            t = (i % 2 == 0) ? add(ch.ctx, t, ch.c) : mul(ch.ctx, t, ch.c);
        t->format_name("t%d", i);
    }
    ch.out = t;
    ch.out->flags |= tensor_flag_output;
    build_forward_expand(ch.g, ch.out);
}

}  // namespace

TEST(Allocator, AChainOf100OpsPlansAFewTensorsNotAHundred) {
    chain ch;
    build_chain(ch, 100, false);
    const auto p = graph_allocator::make_plan(ch.g, 64);
    const size_t tensor_bytes = size_t(mib_floats) * 4;
    // x and c (inputs) plus one block passed along in place
    EXPECT_LE(p.peak_bytes, 3 * tensor_bytes);
    EXPECT_GE(p.peak_bytes, 3 * tensor_bytes);
    EXPECT_EQ(p.inplace.size(), 99u);
    expect_no_overlap(ch.g, p);
}

TEST(Allocator, WithoutInPlaceBlocksAreStillReused) {
    chain ch;
    build_chain(ch, 100, true);  // cont cannot run in place: its result and source are both live
    const auto p = graph_allocator::make_plan(ch.g, 64);
    const size_t tensor_bytes = size_t(mib_floats) * 4;
    EXPECT_LE(p.peak_bytes, 4 * tensor_bytes);
    expect_no_overlap(ch.g, p);
}

TEST(Allocator, PlannedResultsEqualUnplannedOnes) {
    // residual blocks: h = h + scale(mul(h, c)), so h has two readers and blocks are freed in the middle
    const int64_t n = 4099;
    context plain{context_params{size_t(1) << 24, false}};
    context lazy{context_params{context_overhead(1024), true}};
    test_buffer_type bt("test_host", true);

    auto build = [&](context &ctx, tensor *&x, tensor *&c) {
        x = ctx.new_tensor(dtype::f32, {n})->set_name("x");
        x->flags |= tensor_flag_input;
        c = ctx.new_tensor(dtype::f32, {n, 1})->set_name("c");
        c->flags |= tensor_flag_input;
        tensor *h = x;
        for (int i = 0; i < 100; ++i) {
            tensor *t = scale(ctx, mul(ctx, h, c), 0.5f);
            if (i % 10 == 3) t = cont(ctx, reshape_2d(ctx, t, n, 1));  // a view in the middle
            h = add(ctx, h, t)->format_name("h%d", i);
            if (i % 7 == 0) h = sub(ctx, h, c);
        }
        h->flags |= tensor_flag_output;
        return h;
    };
    auto fill = [&](tensor *x, tensor *c) {
        for (int64_t i = 0; i < n; ++i) {
            tensor_set_f32(*x, float(i % 13) * 0.25f - 1.0f, i);
            tensor_set_f32(*c, float(i % 5) * 0.05f - 0.1f, i);
        }
    };

    tensor *x1, *c1, *x2, *c2;
    tensor *want = build(plain, x1, c1);
    tensor *got = build(lazy, x2, c2);
    graph g1, g2;
    build_forward_expand(g1, want);
    build_forward_expand(g2, got);
    fill(x1, c1);
    reference_eval(g1);

    expect_no_overlap(g2, graph_allocator::make_plan(g2, 64));
    graph_allocator galloc(bt);
    galloc.alloc_graph(g2);
    for (const tensor *t : g2.nodes) ASSERT_NE(t->data, nullptr) << t->name;
    fill(x2, c2);
    reference_eval(g2);

    EXPECT_LT(galloc.planned_peak_bytes(), size_t(8) * size_t(n) * 4 + 8 * 64);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(tensor_get_f32(*got, i), tensor_get_f32(*want, i)) << i;
}

TEST(Allocator, ViewsTakeTheirSourcesMemoryAndKeepItAlive) {
    context ctx{context_params{context_overhead(64), true}};
    tensor *x = ctx.new_tensor(dtype::f32, {64, 4})->set_name("x");
    x->flags |= tensor_flag_input;
    tensor *a = scale(ctx, x, 2.0f)->set_name("a");
    tensor *v = view_2d(ctx, a, 64, 2, a->nb[1], 2 * a->nb[1])->set_name("v");
    tensor *b = silu(ctx, a)->set_name("b");         // may not run over a: v reads a later
    tensor *c = scale(ctx, b, 3.0f)->set_name("c");  // runs over b
    tensor *d = add(ctx, c, cont(ctx, v))->set_name("d");
    d->flags |= tensor_flag_output;
    graph g;
    build_forward_expand(g, d);

    const auto p = graph_allocator::make_plan(g, 64);
    EXPECT_FALSE(p.offsets.count(v));  // no memory of its own
    EXPECT_FALSE(p.inplace.count(b));
    EXPECT_FALSE(p.inplace.count(a));  // a's source is an input
    ASSERT_TRUE(p.inplace.count(c));
    EXPECT_EQ(p.inplace.at(c), b);
    expect_no_overlap(g, p);

    test_buffer_type bt("test_host", true);
    graph_allocator galloc(bt);
    galloc.alloc_graph(g);
    ASSERT_NE(a->data, nullptr);
    EXPECT_EQ(v->data, static_cast<char *>(a->data) + 2 * a->nb[1]);
    EXPECT_EQ(v->buffer, galloc.buffer());
    EXPECT_EQ(c->data, b->data);
}

TEST(Allocator, WeightsAndTensorsWithDataAreNotPlanned) {
    context weights{context_params{1 << 16, false}};
    context ctx{context_params{context_overhead(64), true}};
    tensor *w = weights.new_tensor(dtype::f32, {16, 8})->set_name("w");  // has data
    tensor *w2 = ctx.new_tensor(dtype::f32, {8, 8})->set_name("w2");     // a weight not loaded yet
    w2->flags |= tensor_flag_param;
    tensor *x = ctx.new_tensor(dtype::f32, {16, 2})->set_name("x");  // an input without data
    tensor *y = mul_mat(ctx, w2, mul_mat(ctx, w, x));
    graph g;
    build_forward_expand(g, y);
    const auto p = graph_allocator::make_plan(g, 64);
    EXPECT_FALSE(p.offsets.count(w));
    EXPECT_FALSE(p.offsets.count(w2));
    EXPECT_TRUE(p.offsets.count(x));
    EXPECT_TRUE(p.offsets.count(y));
    for (const auto &[t, off] : p.offsets) EXPECT_EQ(off % 64, 0u) << t->name;
}

TEST(Allocator, KeptTensorsAreNeitherFreedNorOverwritten) {
    chain ch;
    build_chain(ch, 6, false);
    const tensor *t1 = ch.g.nodes[1];
    const auto plain = graph_allocator::make_plan(ch.g, 64);
    EXPECT_TRUE(plain.inplace.count(ch.g.nodes[2]));
    const auto kept = graph_allocator::make_plan(ch.g, 64, {t1});
    EXPECT_FALSE(kept.inplace.count(ch.g.nodes[2]));
    for (size_t i = 2; i < ch.g.nodes.size(); ++i)
        EXPECT_NE(kept.offsets.at(ch.g.nodes[i]), kept.offsets.at(t1)) << i;
    EXPECT_GT(kept.peak_bytes, plain.peak_bytes);
}

TEST(Allocator, ReserveOnceThenAllocateWithoutGrowing) {
    chain big, small;
    build_chain(big, 20, true);
    build_chain(small, 8, true);
    test_buffer_type bt("test_host", true);
    graph_allocator galloc(bt);
    galloc.reserve(big.g);
    EXPECT_EQ(bt.n_allocs, 1);
    const size_t reserved = galloc.buffer_size();
    EXPECT_EQ(reserved, galloc.planned_peak_bytes());
    galloc.alloc_graph(small.g);
    galloc.alloc_graph(big.g);
    galloc.alloc_graph(big.g);  // the same graph again: planned afresh in the same buffer
    EXPECT_EQ(galloc.grow_count(), 0);
    EXPECT_EQ(galloc.buffer_size(), reserved);
    EXPECT_EQ(bt.n_allocs, 1);
    for (const tensor *t : big.g.nodes) EXPECT_EQ(t->buffer, galloc.buffer());

    context ctx{context_params{context_overhead(8), true}};
    tensor *huge = ctx.new_tensor(dtype::f32, {8 * mib_floats});  // more than was reserved for
    huge->flags |= tensor_flag_input;
    graph bigger;
    build_forward_expand(bigger, scale(ctx, huge, 2.0f));
    galloc.alloc_graph(bigger);
    EXPECT_EQ(galloc.grow_count(), 1);
    EXPECT_GT(galloc.buffer_size(), reserved);
}
