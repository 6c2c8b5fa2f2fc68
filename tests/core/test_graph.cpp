// tests/core/test_graph.cpp — graph expansion: order, sharing, use counts, capacity, depth, output.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <unordered_map>

#include "weft/core/error.h"
#include "weft/core/graph.h"
#include "weft/core/ops.h"

using namespace weft;

namespace {

context make_context(size_t n_tensors) {
    return context(context_params{context_overhead(n_tensors), true});
}

tensor *input(context &ctx, const char *name, std::initializer_list<int64_t> ne) {
    tensor *t = ctx.new_tensor(dtype::f32, ne);
    t->set_name(name);
    return t;
}

// Every node comes after all of its sources that are nodes; every source is in the graph.
void expect_topological(const graph &g) {
    std::unordered_map<const tensor *, size_t> position;
    for (size_t i = 0; i < g.nodes.size(); ++i) position[g.nodes[i]] = i;
    for (size_t i = 0; i < g.nodes.size(); ++i)
        for (const tensor *s : g.nodes[i]->src) {
            if (s == nullptr) continue;
            if (s->op == op_kind::none) {
                EXPECT_NE(std::find(g.leafs.begin(), g.leafs.end(), s), g.leafs.end()) << s->name;
            } else {
                ASSERT_TRUE(position.count(s)) << s->name << " missing";
                EXPECT_LT(position[s], i) << s->name << " after its consumer " << g.nodes[i]->name;
            }
        }
}

}  // namespace

TEST(Graph, NodesAreTopologicallyOrderedAndLeafsSeparate) {
    context ctx = make_context(64);
    tensor *x = input(ctx, "x", {16, 4});
    tensor *w1 = input(ctx, "w1", {16, 32});
    tensor *w2 = input(ctx, "w2", {32, 16});
    tensor *h = mul_mat(ctx, w1, x)->set_name("h");
    tensor *a = silu(ctx, h)->set_name("act");
    tensor *y = mul_mat(ctx, w2, a)->set_name("y");
    tensor *out = add(ctx, y, x)->set_name("out");

    graph g;
    build_forward_expand(g, out);
    EXPECT_EQ(g.nodes.size(), 4u);
    EXPECT_EQ(g.leafs.size(), 3u);
    EXPECT_EQ(g.nodes.back(), out);
    expect_topological(g);
    for (const tensor *n : g.nodes) EXPECT_NE(n->op, op_kind::none);
    for (const tensor *l : g.leafs) EXPECT_EQ(l->op, op_kind::none);
    EXPECT_EQ(g.nodes[0], h);  // depth first from src[0]
    EXPECT_EQ(g.size(), 7u);
}

TEST(Graph, SharedInputsAreVisitedOnceAndUseCountsCountSlots) {
    context ctx = make_context(64);
    tensor *x = input(ctx, "x", {8});
    tensor *a = mul(ctx, x, x)->set_name("a");  // x read through two slots
    tensor *b = scale(ctx, x, 2.0f)->set_name("b");
    tensor *c = add(ctx, a, b)->set_name("c");
    tensor *d = add(ctx, c, a)->set_name("d");

    graph g;
    build_forward_expand(g, d);
    EXPECT_EQ(std::count(g.leafs.begin(), g.leafs.end(), x), 1);
    EXPECT_EQ(g.leafs.size(), 1u);
    EXPECT_EQ(g.nodes.size(), 4u);
    EXPECT_EQ(g.use_count.at(x), 3);
    EXPECT_EQ(g.use_count.at(a), 2);
    EXPECT_EQ(g.use_count.at(b), 1);
    EXPECT_EQ(g.use_count.at(c), 1);
    EXPECT_EQ(g.use_count.at(d), 0);
    expect_topological(g);
}

TEST(Graph, SeveralOutputsExtendTheSameGraph) {
    context ctx = make_context(64);
    tensor *x = input(ctx, "x", {8});
    tensor *shared = silu(ctx, x)->set_name("shared");
    tensor *y1 = scale(ctx, shared, 2.0f)->set_name("y1");
    tensor *y2 = mul(ctx, shared, x)->set_name("y2");

    graph g;
    build_forward_expand(g, y1);
    EXPECT_EQ(g.nodes.size(), 2u);
    build_forward_expand(g, y2);
    EXPECT_EQ(g.nodes.size(), 3u);  // shared is not added twice
    EXPECT_EQ(g.leafs.size(), 1u);
    EXPECT_EQ(g.nodes.back(), y2);
    EXPECT_EQ(g.use_count.at(shared), 2);
    EXPECT_EQ(g.use_count.at(x), 2);
    build_forward_expand(g, y1);  // already there: nothing changes
    EXPECT_EQ(g.nodes.size(), 3u);
    EXPECT_EQ(g.use_count.at(shared), 2);
    expect_topological(g);

    g.clear();
    EXPECT_EQ(g.size(), 0u);
    EXPECT_TRUE(g.visited.empty());
    build_forward_expand(g, y2);
    EXPECT_EQ(g.nodes.size(), 2u);
}

TEST(Graph, ALeafOutputIsALeaf) {
    context ctx = make_context(8);
    tensor *x = input(ctx, "x", {8});
    graph g;
    build_forward_expand(g, x);
    EXPECT_TRUE(g.nodes.empty());
    ASSERT_EQ(g.leafs.size(), 1u);
    EXPECT_EQ(g.leafs[0], x);
}

TEST(Graph, ExceedingTheCapacityThrowsAndLeavesTheGraphAsItWas) {
    context ctx = make_context(64);
    tensor *x = input(ctx, "x", {8});
    tensor *small = scale(ctx, x, 2.0f)->set_name("small");
    tensor *t = small;
    for (int i = 0; i < 6; ++i) t = silu(ctx, t);
    t->set_name("deep");

    graph g(5);
    build_forward_expand(g, small);
    EXPECT_EQ(g.size(), 2u);
    try {
        build_forward_expand(g, t);
        ADD_FAILURE() << "no error";
    } catch (const error &e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("capacity 5"), std::string::npos) << what;
        EXPECT_NE(what.find("'deep'"), std::string::npos) << what;
    }
    EXPECT_EQ(g.size(), 2u);
    EXPECT_EQ(g.visited.size(), 2u);
    EXPECT_EQ(g.use_count.at(small), 0);
    EXPECT_THROW(build_forward_expand(g, nullptr), error);
}

TEST(Graph, DeepChainsDoNotOverflowTheStack) {
    // 100 layers of a few ops each is shallow; 200000 nested ops would overflow a recursive walk.
    context ctx = make_context(200010);
    tensor *x = input(ctx, "x", {4});
    tensor *t = x;
    const int depth = 200000;
    for (int i = 0; i < depth; ++i) t = (i % 2) ? scale(ctx, t, 0.5f) : add(ctx, t, x);
    graph g(depth + 1);
    build_forward_expand(g, t);
    EXPECT_EQ(g.nodes.size(), size_t(depth));
    EXPECT_EQ(g.nodes.back(), t);
    EXPECT_EQ(g.use_count.at(x), depth / 2 + 1);  // the first add reads x twice
    for (size_t i = 1; i < g.nodes.size(); ++i) ASSERT_EQ(g.nodes[i]->src[0], g.nodes[i - 1]);
}

TEST(Graph, NothingIsComputedWhileBuilding) {
    context ctx = make_context(64);
    tensor *x = input(ctx, "x", {8, 2});
    tensor *w = input(ctx, "w", {8, 3});
    tensor *y = mul_mat(ctx, w, x)->set_name("y");
    tensor *z = soft_max(ctx, y)->set_name("z");
    graph g;
    build_forward_expand(g, z);
    for (const tensor *n : g.nodes) EXPECT_EQ(n->data, nullptr) << n->name;
    try {
        tensor_get_f32(*z, 0, 0);
        ADD_FAILURE() << "no error";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("not been computed"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("'z'"), std::string::npos) << e.what();
    }
}

TEST(Graph, PrintDotAndOpCounts) {
    context ctx = make_context(64);
    tensor *x = input(ctx, "x", {8, 2});
    tensor *w = input(ctx, "w", {8, 3});
    w->flags |= tensor_flag_param;
    tensor *y = mul_mat(ctx, w, x)->set_name("y|{1}");  // record-label specials must be escaped
    tensor *z = add(ctx, silu(ctx, y), y)->set_name("z");
    z->flags |= tensor_flag_output;
    graph g;
    build_forward_expand(g, z);

    std::ostringstream text;
    graph_print(g, text);
    const std::string printed = text.str();
    EXPECT_NE(printed.find("3 nodes, 2 leafs"), std::string::npos) << printed;
    EXPECT_NE(printed.find("mul_mat  y|{1}  [3, 2]  f32  <- w, x"), std::string::npos) << printed;
    EXPECT_NE(printed.find("add  z  [3, 2]  f32  <- -, y|{1}  (output)"), std::string::npos) << printed;

    std::ostringstream dot;
    graph_dump_dot(g, dot);
    const std::string d = dot.str();
    EXPECT_EQ(d.rfind("digraph weft {", 0), 0u);
    EXPECT_EQ(d.substr(d.size() - 2), "}\n");
    size_t edges = 0;
    for (size_t p = d.find(" -> "); p != std::string::npos; p = d.find(" -> ", p + 1)) ++edges;
    EXPECT_EQ(edges, 5u);  // mul_mat 2, silu 1, add 2
    EXPECT_NE(d.find("y\\|\\{1\\}"), std::string::npos) << d;
    EXPECT_EQ(std::count(d.begin(), d.end(), '"') % 2, 0);

    const auto counts = graph_op_counts(g);
    ASSERT_EQ(counts.size(), 3u);
    EXPECT_EQ(counts[0], std::make_pair(op_kind::add, 1));
    EXPECT_EQ(counts[1], std::make_pair(op_kind::mul_mat, 1));
    EXPECT_EQ(counts[2], std::make_pair(op_kind::silu, 1));
}
