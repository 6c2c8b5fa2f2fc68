// tests/backends/test_cpu_backend.cpp — host buffers, the persistent thread pool, the eval and abort
// callbacks, error reporting, and planned (graph_allocator) against unplanned execution.
#include <gtest/gtest.h>

#include <time.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu_testing.h"
#include "weft/core/allocator.h"
#include "weft/core/error.h"

using namespace weft;
using namespace weft::test;

namespace {

// A small MLP block as a model would build it; tensors are named so the callback can find them.
struct mlp {
    tensor *x, *w1, *b1, *w2, *gamma;
    tensor *out;
};

void fill_weights(mlp &m) {
    fill_uniform(*m.w1, 41, -0.3f, 0.3f);
    fill_uniform(*m.b1, 42);
    fill_uniform(*m.w2, 43, -0.3f, 0.3f);
    fill_uniform(*m.gamma, 44, 0.5f, 1.5f);
}

// Weights are created with data; when `plan` is set, the input and every result are created
// without data (the arena in no_alloc mode) so that a graph_allocator must place them.
mlp build_mlp(context &ctx, bool plan) {
    mlp m;
    m.w1 = ctx.new_tensor(dtype::f16, {32, 48})->set_name("w1");
    m.b1 = ctx.new_tensor(dtype::f32, {48})->set_name("b1");
    m.w2 = ctx.new_tensor(dtype::f32, {48, 32})->set_name("w2");
    m.gamma = ctx.new_tensor(dtype::f32, {32})->set_name("gamma");
    for (tensor *w : {m.w1, m.b1, m.w2, m.gamma}) w->flags |= tensor_flag_param;
    fill_weights(m);
    if (plan) ctx.set_no_alloc(true);
    m.x = ctx.new_tensor(dtype::f32, {32, 5})->set_name("x");
    m.x->flags |= tensor_flag_input;
    tensor *h = add(ctx, mul_mat(ctx, m.w1, m.x), m.b1)->set_name("ffn_up");
    h = silu(ctx, h)->set_name("ffn_act");
    tensor *r = add(ctx, mul_mat(ctx, m.w2, h), m.x)->set_name("ffn_out");
    tensor *n = mul(ctx, rms_norm(ctx, r, 1e-5f), m.gamma)->set_name("ffn_norm");
    tensor *t = transpose(ctx, n);  // [5, 32]: a softmax over a strided view, then made contiguous
    m.out = cont(ctx, soft_max(ctx, scale(ctx, t, 0.5f), nullptr, 1.0f))->set_name("out");
    m.out->flags |= tensor_flag_output;
    return m;
}

// The MLP with data, its input filled from `seed`, and its graph expanded: the start of most tests.
struct mlp_graph {
    std::unique_ptr<context> ctx = data_context();
    mlp m = build_mlp(*ctx, false);
    graph g;
    explicit mlp_graph(uint32_t seed) {
        fill_uniform(*m.x, seed);
        build_forward_expand(g, m.out);
    }
};

// One attention block over a small f16 KV cache, as the model layer builds it: Q/K projections,
// rope (in place under the planner), K written into the cache with set_rows, grouped-query
// attention through permuted views (mul_mat broadcasts 2 KV heads over 4 query heads), a masked
// softmax, the V product, and the output projection with a residual.
struct attention_block {
    tensor *x, *pos, *kv_index, *mask, *cache;
    tensor *out;
};

attention_block build_attention(context &ctx, bool plan) {
    const int64_t n_embd = 16, head_dim = 4, n_head = 4, n_head_kv = 2, n_tokens = 4, n_cells = 6;
    attention_block a;
    tensor *wq = ctx.new_tensor(dtype::f32, {n_embd, head_dim * n_head})->set_name("wq");
    tensor *wk = ctx.new_tensor(dtype::f16, {n_embd, head_dim * n_head_kv})->set_name("wk");
    tensor *wo = ctx.new_tensor(dtype::f16, {head_dim * n_head, n_embd})->set_name("wo");
    a.cache = ctx.new_tensor(dtype::f16, {head_dim * n_head_kv, n_cells})->set_name("cache_k");
    fill_uniform(*wq, 51, -0.5f, 0.5f);
    fill_uniform(*wk, 52, -0.5f, 0.5f);
    fill_uniform(*wo, 53, -0.5f, 0.5f);
    fill_uniform(*a.cache, 54);
    for (tensor *w : {wq, wk, wo}) w->flags |= tensor_flag_param;
    if (plan) ctx.set_no_alloc(true);
    a.x = ctx.new_tensor(dtype::f32, {n_embd, n_tokens})->set_name("x");
    a.pos = ctx.new_tensor(dtype::i32, {n_tokens})->set_name("pos");
    a.kv_index = ctx.new_tensor(dtype::i64, {n_tokens})->set_name("kv_index");
    a.mask = ctx.new_tensor(dtype::f16, {n_cells, n_tokens})->set_name("mask");
    for (tensor *t : {a.x, a.pos, a.kv_index, a.mask}) t->flags |= tensor_flag_input;

    rope_params rp;
    rp.n_dims = int32_t(head_dim);
    rp.mode = rope_mode_neox;
    tensor *q = mul_mat(ctx, wq, a.x);
    q = rope(ctx, reshape_3d(ctx, q, head_dim, n_head, n_tokens), a.pos, rp)->set_name("q_rope");
    tensor *k = mul_mat(ctx, wk, a.x);
    k = rope(ctx, reshape_3d(ctx, k, head_dim, n_head_kv, n_tokens), a.pos, rp)->set_name("k_rope");
    tensor *stored = set_rows(ctx, a.cache, reshape_2d(ctx, k, head_dim * n_head_kv, n_tokens), a.kv_index);
    tensor *cells = reshape_3d(ctx, stored, head_dim, n_head_kv, n_cells);
    tensor *keys = permute(ctx, cells, 0, 2, 1, 3);                 // [head_dim, n_cells, n_head_kv]
    tensor *values_t = cont(ctx, permute(ctx, cells, 1, 2, 0, 3));  // [n_cells, head_dim, n_head_kv]
    tensor *kq = mul_mat(ctx, keys, permute(ctx, q, 0, 2, 1, 3));   // [n_cells, n_tokens, n_head]
    kq = soft_max(ctx, kq, a.mask, 0.5f)->set_name("kq_soft_max");
    tensor *o = mul_mat(ctx, values_t, kq);      // [head_dim, n_tokens, n_head]
    o = cont(ctx, permute(ctx, o, 0, 2, 1, 3));  // [head_dim, n_head, n_tokens]
    a.out = add(ctx, mul_mat(ctx, wo, reshape_2d(ctx, o, head_dim * n_head, n_tokens)), a.x)
                ->set_name("attn_out");
    a.out->flags |= tensor_flag_output;
    return a;
}

void set_attention_inputs(attention_block &a) {
    fill_uniform(*a.x, 55);
    const int64_t cells[4] = {5, 1, 2, 4};
    for (int64_t i = 0; i < 4; ++i) {
        tensor_set_f32(*a.pos, float(10 + i), i);
        std::memcpy(static_cast<char *>(a.kv_index->data) + i * 8, &cells[i], 8);
        for (int64_t j = 0; j < 6; ++j) tensor_set_f32(*a.mask, j <= i + 1 ? 0.0f : -INFINITY, j, i);
    }
}

double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

}  // namespace

// --- buffers ----------------------------------------------------------------------------------

TEST(CpuBuffer, HostBufferIsAlignedAndCopies) {
    buffer_type &bt = cpu_buffer_type();
    EXPECT_TRUE(bt.is_host());
    EXPECT_EQ(bt.alignment(), 64u);
    EXPECT_STREQ(bt.name(), "CPU");
    auto buf = bt.alloc(1000);
    EXPECT_EQ(buf->size(), 1000u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->base()) % 64, 0u);
    EXPECT_TRUE(buf->is_host());

    context ctx({context_overhead(4), true});
    tensor *t = ctx.new_tensor(dtype::f32, {10});
    buf->place(*t, 64);
    EXPECT_EQ(t->data, static_cast<char *>(buf->base()) + 64);
    const std::vector<float> in = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    buf->set_tensor(*t, in.data(), 0, 40);
    std::vector<float> out(3);
    buf->get_tensor(*t, out.data(), 8, 12);
    EXPECT_EQ(out, (std::vector<float>{3, 4, 5}));
    buf->clear(0);
    EXPECT_EQ(tensor_get_f32(*t, 9), 0.0f);
    EXPECT_NE(bt.alloc(0), nullptr);  // an empty buffer is still a buffer
}

TEST(CpuBuffer, FromHostPtrWrapsCallerMemoryWithoutCopying) {
    std::vector<float> host(16, 1.5f);
    {
        auto buf = cpu_buffer_from_host_ptr(host.data(), host.size() * sizeof(float));
        EXPECT_EQ(&buf->type(), &cpu_buffer_type());
        EXPECT_EQ(buf->base(), host.data());
        cpu_backend backend;
        EXPECT_TRUE(backend.supports_buffer_type(buf->type()));
        context ctx({context_overhead(4), true});
        tensor *t = ctx.new_tensor(dtype::f32, {4});
        buf->place(*t, 8 * sizeof(float));
        EXPECT_EQ(tensor_get_f32(*t, 0), 1.5f);
        const float v = -2.0f;
        buf->set_tensor(*t, &v, sizeof(float), sizeof v);
        EXPECT_EQ(host[9], -2.0f);  // the write landed in the caller's memory
    }
    EXPECT_EQ(host[0], 1.5f);  // and destroying the buffer freed nothing
    EXPECT_THROW(cpu_buffer_from_host_ptr(nullptr, 16), error);
}

// --- thread pool ------------------------------------------------------------------------------

TEST(CpuBackend, ThreadPoolIsCreatedOnceAndReusedAcrossGraphs) {
    mlp_graph run(45);
    mlp &m = run.m;
    graph &g = run.g;

    cpu_backend backend(3);
    EXPECT_EQ(backend.n_threads(), 3);
    EXPECT_EQ(backend.threads_started(), 2);  // the caller is thread 0
    for (int i = 0; i < 5; ++i) ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
    EXPECT_EQ(backend.threads_started(), 2);
    backend.set_n_threads(3);  // same count: nothing restarts
    EXPECT_EQ(backend.threads_started(), 2);
    backend.set_n_threads(2);  // fewer: the third thread sits out, nothing is joined or restarted
    EXPECT_EQ(backend.n_threads(), 2);
    EXPECT_EQ(backend.threads_started(), 2);
    ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
    const std::vector<float> two = values_of(*m.out);
    backend.set_n_threads(1);
    ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
    EXPECT_EQ(values_of(*m.out), two);
    backend.set_n_threads(3);  // back up to the pool's size: nothing starts
    ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
    EXPECT_EQ(backend.threads_started(), 2);
    backend.set_n_threads(4);  // more than ever before: one worker more
    ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
    EXPECT_EQ(values_of(*m.out), two);
    EXPECT_EQ(backend.threads_started(), 3);
    EXPECT_THROW(backend.set_n_threads(0), error);
    EXPECT_THROW(cpu_backend(-1), error);
}

TEST(CpuBackend, WorkersSleepBetweenGraphs) {
    mlp_graph run(46);
    graph &g = run.g;
    cpu_backend backend(3);
    ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
    const double before = process_cpu_seconds();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const double idle_cpu = process_cpu_seconds() - before;
    // two spinning workers would burn ~0.6 s of CPU here
    EXPECT_LT(idle_cpu, 0.1) << "workers must block on a condition variable once a graph is done";
}

// --- callbacks --------------------------------------------------------------------------------

TEST(CpuBackend, EvalCallbackObservesANodeByName) {
    mlp_graph run(47);
    mlp &m = run.m;
    graph &g = run.g;
    cpu_backend reference_backend(1);
    ASSERT_EQ(reference_backend.graph_compute(g, {}), compute_status::ok);
    const std::vector<float> expected_norm = values_of(*run.ctx->find("ffn_norm"));
    const std::vector<float> expected_out = values_of(*m.out);

    for (tensor *t : g.nodes) std::memset(t->data, 0xff, t->nbytes());  // NaN everywhere
    cpu_backend backend(3);
    size_t asked = 0;
    int observed = 0;
    const compute_status status = backend.graph_compute(g, [&](tensor *node, bool ask) {
        if (ask) {
            ++asked;
            return std::string(node->name) == "ffn_norm";
        }
        ++observed;
        EXPECT_STREQ(node->name, "ffn_norm");
        EXPECT_EQ(values_of(*node), expected_norm);             // computed by the time it is shown
        EXPECT_TRUE(std::isnan(tensor_get_f32(*m.out, 0, 0)));  // and nothing after it yet
        return true;
    });
    EXPECT_EQ(status, compute_status::ok);
    EXPECT_EQ(asked, g.nodes.size());
    EXPECT_EQ(observed, 1);
    EXPECT_EQ(values_of(*m.out), expected_out);
}

TEST(CpuBackend, EvalCallbackCanAbort) {
    mlp_graph run(48);
    mlp &m = run.m;
    graph &g = run.g;
    std::memset(m.out->data, 0xff, m.out->nbytes());
    cpu_backend backend(2);
    const compute_status status = backend.graph_compute(
        g, [&](tensor *node, bool ask) { return ask ? node->op == op_kind::silu : false; });
    EXPECT_EQ(status, compute_status::aborted);
    EXPECT_TRUE(std::isnan(tensor_get_f32(*m.out, 0, 0))) << "nodes after the abort must not run";
}

TEST(CpuBackend, AbortCallbackIsPolledBetweenNodes) {
    mlp_graph run(49);
    mlp &m = run.m;
    graph &g = run.g;
    std::memset(m.out->data, 0xff, m.out->nbytes());
    cpu_backend backend(3);
    int polls = 0;
    backend.set_abort_callback([&] { return ++polls == 2; });
    EXPECT_EQ(backend.graph_compute(g, {}), compute_status::aborted);
    // polled after every node, stopped at the next barrier: the abort asked for after the bias add
    // takes effect after the silu (both of little work: one thread computes them, one barrier after)
    EXPECT_EQ(polls, 3);
    EXPECT_TRUE(std::isnan(tensor_get_f32(*m.out, 0, 0)));
    backend.set_abort_callback(nullptr);
    EXPECT_EQ(backend.graph_compute(g, {}), compute_status::ok);
    EXPECT_FALSE(std::isnan(tensor_get_f32(*m.out, 0, 0)));
}

TEST(CpuBackend, EvalCallbackCanObserveEveryNode) {
    mlp_graph run(56);
    graph &g = run.g;
    cpu_backend backend(3);
    ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
    std::vector<std::vector<float>> expected;
    for (tensor *t : g.nodes) expected.push_back(values_of(*t));
    for (tensor *t : g.nodes)
        if (!t->view_src) std::memset(t->data, 0xff, t->nbytes());
    size_t next = 0;
    const compute_status status = backend.graph_compute(g, [&](tensor *node, bool ask) {
        if (ask) return true;
        EXPECT_EQ(node, g.nodes[next]) << "nodes are shown in graph order";
        EXPECT_EQ(values_of(*node), expected[next]) << node->name;
        ++next;
        return true;
    });
    EXPECT_EQ(status, compute_status::ok);
    EXPECT_EQ(next, g.nodes.size());
}

TEST(CpuBackend, AThrowingAbortCallbackFailsTheGraph) {
    mlp_graph run(57);
    graph &g = run.g;
    cpu_backend backend(3);
    backend.set_abort_callback([]() -> bool { throw std::runtime_error("user code failed"); });
    EXPECT_THROW(backend.graph_compute(g, {}), error);
    backend.set_abort_callback(nullptr);
    EXPECT_EQ(backend.graph_compute(g, {}), compute_status::ok);  // the pool is still usable
}

// --- errors -----------------------------------------------------------------------------------

TEST(CpuBackend, RefusesAnUnallocatedGraph) {
    context ctx({size_t(1) << 20, false});
    tensor *a = ctx.new_tensor(dtype::f32, {4});
    ctx.set_no_alloc(true);
    tensor *out = silu(ctx, a)->set_name("act");
    graph g;
    build_forward_expand(g, out);
    cpu_backend backend;
    try {
        backend.graph_compute(g, {});
        FAIL() << "expected weft::error";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("'act'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("no memory"), std::string::npos) << e.what();
    }
}

TEST(CpuBackend, RefusesAnOpItCannotRun) {
    auto ctx = data_context();
    tensor *a = ctx->new_tensor(dtype::f32, {8, 2, 3});
    tensor *pos = ctx->new_tensor(dtype::i32, {3});
    rope_params p;
    p.n_dims = 8;
    tensor *out = rope(*ctx, a, pos, p);
    cpu_backend backend;
    EXPECT_TRUE(backend.supports_op(*out));
    out->set_param_i32(1, 8);  // a rope mode the kernels do not implement (multi-section)
    EXPECT_FALSE(backend.supports_op(*out));
    graph g;
    build_forward_expand(g, out);
    EXPECT_THROW(backend.graph_compute(g, {}), error);
    // views and leafs are always fine
    EXPECT_TRUE(backend.supports_op(*a));
    EXPECT_TRUE(backend.supports_op(*transpose(*ctx, a)));
}

// --- planned against unplanned ----------------------------------------------------------------

TEST(CpuBackend, PlannedGraphEqualsUnplannedExecution) {
    auto plain_ctx = data_context();
    mlp plain = build_mlp(*plain_ctx, false);
    fill_uniform(*plain.x, 50);
    graph plain_graph;
    build_forward_expand(plain_graph, plain.out);

    auto planned_ctx = data_context();
    mlp planned = build_mlp(*planned_ctx, true);
    graph planned_graph;
    build_forward_expand(planned_graph, planned.out);
    graph_allocator allocator(cpu_buffer_type());
    allocator.alloc_graph(planned_graph);
    ASSERT_NE(planned.x->data, nullptr);
    ASSERT_NE(planned.out->data, nullptr);
    std::memcpy(planned.x->data, plain.x->data, plain.x->nbytes());

    for (int n_threads : {1, 3}) {
        cpu_backend backend(n_threads);
        ASSERT_EQ(backend.graph_compute(plain_graph, {}), compute_status::ok);
        ASSERT_EQ(backend.graph_compute(planned_graph, {}), compute_status::ok);
        const std::vector<float> expected = values_of(*plain.out);
        EXPECT_EQ(count_non_finite(expected), 0);
        EXPECT_EQ(values_of(*planned.out), expected) << n_threads << " threads";
    }
    // the planner shared memory between intermediates: less than one block per node
    size_t unplanned_bytes = 0;
    for (const tensor *t : planned_graph.nodes)
        if (!t->view_src) unplanned_bytes += t->nbytes();
    EXPECT_LT(allocator.planned_peak_bytes(), unplanned_bytes + planned.x->nbytes());
}

// Nodes of little work (the bias add and silu, the residual add and norm, the ropes and the cache
// store here) are computed by thread 0 alone, with one barrier after each run of them; products of
// one input may be computed together. With 2 to 4 threads every node (each set to NaN before the
// run) must equal the 1-thread run's, where every node is computed by its one thread.
TEST(CpuBackend, NodesComputedAloneOrTogetherEqualOneThreadsValues) {
    auto check = [](graph &g, const std::function<void()> &set_inputs) {
        set_inputs();
        cpu_backend one(1);
        ASSERT_EQ(one.graph_compute(g, {}), compute_status::ok);
        std::vector<std::vector<float>> expected;
        for (const tensor *t : g.nodes) expected.push_back(values_of(*t));
        for (int n_threads : {2, 3, 4}) {
            SCOPED_TRACE(n_threads);
            for (tensor *t : g.nodes)
                if (!t->view_src && t->op != op_kind::set_rows) std::memset(t->data, 0xff, t->nbytes());
            set_inputs();
            cpu_backend backend(n_threads);
            ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
            for (size_t i = 0; i < g.nodes.size(); ++i)
                EXPECT_EQ(values_of(*g.nodes[i]), expected[i]) << g.nodes[i]->name;
        }
    };
    {
        mlp_graph run(58);
        check(run.g, [] {});
    }
    {
        auto ctx = data_context();
        attention_block a = build_attention(*ctx, false);
        graph g;
        build_forward_expand(g, a.out);
        check(g, [&] {
            set_attention_inputs(a);
            fill_uniform(*a.cache, 54);  // a store left out keeps these
        });
    }
}

TEST(CpuBackend, PlannedAttentionEqualsUnplannedExecution) {
    auto plain_ctx = data_context();
    attention_block plain = build_attention(*plain_ctx, false);
    set_attention_inputs(plain);
    graph plain_graph;
    build_forward_expand(plain_graph, plain.out);

    auto planned_ctx = data_context();
    attention_block planned = build_attention(*planned_ctx, true);
    graph planned_graph;
    build_forward_expand(planned_graph, planned.out);
    // the planner runs the softmax in place over its scores (part of what this test is about)
    const auto plan = graph_allocator::make_plan(planned_graph, 64);
    bool soft_max_in_place = false;
    for (const auto &[node, src] : plan.inplace) soft_max_in_place |= node->op == op_kind::soft_max;
    EXPECT_TRUE(soft_max_in_place);
    graph_allocator allocator(cpu_buffer_type());
    allocator.alloc_graph(planned_graph);
    set_attention_inputs(planned);

    for (int n_threads : {1, 2, 3}) {
        cpu_backend backend(n_threads);
        ASSERT_EQ(backend.graph_compute(plain_graph, {}), compute_status::ok);
        ASSERT_EQ(backend.graph_compute(planned_graph, {}), compute_status::ok);
        const std::vector<float> expected = values_of(*plain.out);
        EXPECT_EQ(count_non_finite(expected), 0);
        EXPECT_EQ(values_of(*planned.out), expected) << n_threads << " threads";
        EXPECT_EQ(values_of(*planned.cache), values_of(*plain.cache))
            << "the KV cache rows written by set_rows";
    }
}
