// tests/core/test_scheduler.cpp — placement, splits and copies between fake backends, execution.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "host_test_backend.h"
#include "weft/core/error.h"
#include "weft/core/ops.h"
#include "weft/core/scheduler.h"

using namespace weft;
using weft::test::queued_test_backend;
using weft::test::reference_eval;
using weft::test::test_backend;

namespace {

constexpr int64_t n_embd = 37;
constexpr int64_t n_tokens = 3;

float input_value(int64_t i0, int64_t i1) {
    return float((i0 * 7 + i1 * 3) % 11) * 0.125f - 0.5f;
}
float weight_value(int64_t i0, int64_t i1) {
    return float((i0 + 5 * i1) % 9) * 0.25f - 1.0f;
}

// A weight with data of its own, in host memory (an allocated context, no backend buffer).
struct weights {
    context ctx{context_params{size_t(1) << 16, false}};
    tensor *w = nullptr;
    weights() {
        w = ctx.new_tensor(dtype::f32, {n_embd, 1})->set_name("w");
        w->flags |= tensor_flag_param;
        for (int64_t i = 0; i < n_embd; ++i) tensor_set_f32(*w, weight_value(i, 0), i);
    }
};

void set_input(tensor &x) {
    std::vector<float> v(size_t(n_embd * n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t i = 0; i < n_embd; ++i) v[size_t(t * n_embd + i)] = input_value(i, t);
    ASSERT_NE(x.buffer, nullptr);
    x.buffer->set_tensor(x, v.data(), 0, v.size() * sizeof(float));
}

// The same little graph built twice: once in an allocated context and evaluated directly (the
// expected values), once in a no_alloc context for the scheduler. Two outputs; `side` reads views.
struct model {
    explicit model(bool allocate)
        : ctx(context_params{allocate ? size_t(1) << 20 : context_overhead(128), !allocate}) {}
    context ctx;
    graph g;
    tensor *x = nullptr;
    tensor *out = nullptr;
    tensor *side = nullptr;

    void build(tensor *w) {
        x = ctx.new_tensor(dtype::f32, {n_embd, n_tokens})->set_name("x");
        x->flags |= tensor_flag_input;
        tensor *a = mul(ctx, x, x)->set_name("a");
        tensor *a2 = scale(ctx, x, 0.5f)->set_name("a2");
        tensor *b = add(ctx, a, a2)->set_name("b");  // the only op the device backend supports
        tensor *rows = view_2d(ctx, a, n_embd, 2, a->nb[1], a->nb[1])->set_name("rows");
        side =
            add(ctx, rows, view_2d(ctx, b, n_embd, 2, b->nb[1], 0))->set_name("side");  // device, reads views
        side->flags |= tensor_flag_output;
        tensor *d = mul(ctx, b, w)->set_name("d");
        out = sub(ctx, d, x)->set_name("out");
        out->flags |= tensor_flag_output;
        build_forward_expand(g, side);
        build_forward_expand(g, out);
    }
};

void expect_same(const tensor &got, const tensor &want) {
    ASSERT_TRUE(same_shape(got, want)) << got.shape_str() << " vs " << want.shape_str();
    for (int64_t i1 = 0; i1 < want.ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < want.ne[0]; ++i0)
            ASSERT_EQ(tensor_get_f32(got, i0, i1), tensor_get_f32(want, i0, i1))
                << got.name << " at " << i0 << ", " << i1;
}

struct expected_values {
    weights wts;
    model m{true};
    expected_values() {
        m.build(wts.w);
        for (int64_t t = 0; t < n_tokens; ++t)
            for (int64_t i = 0; i < n_embd; ++i) tensor_set_f32(*m.x, input_value(i, t), i, t);
        reference_eval(m.g);
    }
};

}  // namespace

TEST(Scheduler, OneHostBackendIsOneSplitWithoutCopies) {
    weights wts;
    model m(false);
    m.build(wts.w);
    test_backend cpu("cpu", true);
    scheduler sched({&cpu});
    sched.reserve(m.g);
    sched.alloc_graph(m.g);
    EXPECT_EQ(sched.n_splits(), 1);
    EXPECT_EQ(sched.n_copies(), 0);
    for (const tensor *n : m.g.nodes) EXPECT_EQ(sched.backend_of(n), &cpu) << n->name;

    set_input(*m.x);
    ASSERT_EQ(sched.compute(m.g), compute_status::ok);
    EXPECT_TRUE(cpu.unreadable_reads.empty());
    EXPECT_EQ(sched.grow_count(), 0);
    EXPECT_GT(sched.compute_buffer_size(), 0u);

    expected_values want;
    expect_same(*m.out, *want.m.out);
    expect_same(*m.side, *want.m.side);

    // the same graph again: no re-planning, no growth, same results
    ASSERT_EQ(sched.compute(m.g), compute_status::ok);
    EXPECT_EQ(cpu.n_graphs, 2);
    EXPECT_EQ(sched.grow_count(), 0);
    expect_same(*m.out, *want.m.out);
}

TEST(Scheduler, AGraphWhoseTensorsLostTheirMemoryIsAllocatedAgain) {
    // a graph rebuilt in a fresh context can have the very same tensor addresses as the last one
    weights wts;
    model m(false);
    m.build(wts.w);
    test_backend cpu("cpu", true);
    scheduler sched({&cpu});
    sched.alloc_graph(m.g);
    auto forget = [](tensor *t) {
        t->data = nullptr;
        t->buffer = nullptr;
    };
    for (tensor *t : m.g.nodes) forget(t);
    forget(m.x);
    ASSERT_EQ(sched.compute(m.g), compute_status::ok);  // allocates before running
    set_input(*m.x);
    ASSERT_EQ(sched.compute(m.g), compute_status::ok);
    expected_values want;
    expect_same(*m.out, *want.m.out);
}

TEST(Scheduler, ASecondBackendThatOnlyAddsGetsItsOwnSplitsAndCopies) {
    weights wts;
    model m(false);
    m.build(wts.w);
    test_backend device("dev", false, {op_kind::add});  // device memory: the host backend cannot read it
    test_backend cpu("cpu", true);
    scheduler sched({&device, &cpu});
    sched.reserve(m.g);
    sched.alloc_graph(m.g);

    for (const tensor *n : m.g.nodes) {
        if (n->op == op_kind::add) {
            EXPECT_EQ(sched.backend_of(n), &device) << n->name;
        } else if (!op_is_view(n->op)) {
            EXPECT_EQ(sched.backend_of(n), &cpu) << n->name;
        }
    }
    EXPECT_EQ(sched.n_splits(), 3);  // cpu (a, rows, a2), device (b, its view, side), cpu (d, out)
    // a and a2 go to the device; `rows` views a (its source is copied); b comes back for d
    EXPECT_EQ(sched.n_copies(), 3);

    set_input(*m.x);
    ASSERT_EQ(sched.compute(m.g), compute_status::ok);
    EXPECT_TRUE(device.unreadable_reads.empty()) << device.unreadable_reads.front();
    EXPECT_TRUE(cpu.unreadable_reads.empty()) << cpu.unreadable_reads.front();
    EXPECT_EQ(device.computed.size(), 2u);
    EXPECT_EQ(sched.grow_count(), 0);

    expected_values want;
    expect_same(*m.out, *want.m.out);
    expect_same(*m.side, *want.m.side);
    // the sources were put back after each split
    for (const tensor *n : m.g.nodes)
        for (const tensor *s : n->src)
            if (s) {
                EXPECT_EQ(std::string(s->name).find('#'), std::string::npos) << n->name << " <- " << s->name;
            }
}

// A device with a queue of its own: the scheduler queues its copies and splits and goes on, waits
// for a split's event before another backend reads what it made, and for everything at the end;
// the values are those of the synchronous run.
TEST(Scheduler, AnAsynchronousBackendIsWaitedForWhereItsResultsAreRead) {
    weights wts;
    model m(false);
    m.build(wts.w);
    queued_test_backend device("dev", false, {op_kind::add});
    test_backend cpu("cpu", true);
    scheduler sched({&device, &cpu});
    sched.reserve(m.g);
    sched.alloc_graph(m.g);
    for (int run = 0; run < 3; ++run) {
        set_input(*m.x);
        ASSERT_EQ(sched.compute(m.g), compute_status::ok);
        expected_values want;
        expect_same(*m.out, *want.m.out);
        expect_same(*m.side, *want.m.side);
    }
    EXPECT_EQ(device.n_async_graphs.load(), 3);
    EXPECT_EQ(device.n_graphs, 3);            // all done when compute returned
    EXPECT_GT(device.max_pending.load(), 1);  // the host queued work without waiting for each piece
}

TEST(Scheduler, ANodeGoesWhereItsWeightsCanBeRead) {
    // the weight lives in device memory: the add reading it runs there, the mul reading it on the
    // host backend with a copy of the weight
    test_backend device("dev", false, {op_kind::add, op_kind::mul});
    test_backend cpu("cpu", true);
    context wctx{context_params{context_overhead(4), true}};
    tensor *w = wctx.new_tensor(dtype::f32, {8})->set_name("w");
    w->flags |= tensor_flag_param;
    auto wbuf = device.default_buffer_type().alloc(w->nbytes());
    wbuf->place(*w, 0);
    std::vector<float> wv(8, 1.5f);
    wbuf->set_tensor(*w, wv.data(), 0, wv.size() * sizeof(float));

    context ctx{context_params{context_overhead(16), true}};
    tensor *x = ctx.new_tensor(dtype::f32, {8})->set_name("x");
    x->flags |= tensor_flag_input;
    tensor *h = silu(ctx, x)->set_name("h");                      // host only
    tensor *y = add(ctx, h, w)->set_name("y");                    // device: it can read w
    tensor *z = div(ctx, scale(ctx, y, 2.0f), w)->set_name("z");  // host, w copied
    z->flags |= tensor_flag_output;
    graph g;
    build_forward_expand(g, z);

    scheduler sched({&device, &cpu});
    sched.alloc_graph(g);
    EXPECT_EQ(sched.backend_of(y), &device);
    EXPECT_EQ(sched.backend_of(z), &cpu);
    EXPECT_EQ(sched.n_splits(), 3);
    EXPECT_EQ(sched.n_copies(), 3);  // h to the device, y and w to the host

    std::vector<float> xv(8);
    for (size_t i = 0; i < 8; ++i) xv[i] = float(i) - 3.0f;
    x->buffer->set_tensor(*x, xv.data(), 0, 32);
    ASSERT_EQ(sched.compute(g), compute_status::ok);
    EXPECT_TRUE(cpu.unreadable_reads.empty()) << cpu.unreadable_reads.front();
    EXPECT_TRUE(device.unreadable_reads.empty()) << device.unreadable_reads.front();
    for (int64_t i = 0; i < 8; ++i) {
        const float hv = xv[size_t(i)] / (1.0f + std::exp(-xv[size_t(i)]));
        EXPECT_FLOAT_EQ(tensor_get_f32(*z, i), (hv + 1.5f) * 2.0f / 1.5f) << i;
    }
}

TEST(Scheduler, EvalCallbackObservesNodesAndCanAbort) {
    weights wts;
    model m(false);
    m.build(wts.w);
    test_backend cpu("cpu", true);
    scheduler sched({&cpu});
    sched.alloc_graph(m.g);
    set_input(*m.x);

    std::vector<std::string> seen;
    sched.set_eval_callback([&](tensor *n, bool ask) {
        if (ask) return n->op == op_kind::add;
        seen.push_back(n->name);
        EXPECT_NE(n->data, nullptr);
        return true;
    });
    ASSERT_EQ(sched.compute(m.g), compute_status::ok);
    EXPECT_EQ(seen, (std::vector<std::string>{"b", "side"}));

    sched.set_eval_callback([](tensor *, bool ask) { return ask ? true : false; });
    EXPECT_EQ(sched.compute(m.g), compute_status::aborted);
}

TEST(Scheduler, UnsupportedOpsAndBadBackendListsAreErrors) {
    context ctx{context_params{context_overhead(8), true}};
    tensor *x = ctx.new_tensor(dtype::f32, {8})->set_name("x");
    tensor *y = gelu(ctx, x)->set_name("y");
    graph g;
    build_forward_expand(g, y);
    test_backend cpu("cpu", true, {op_kind::add});
    scheduler sched({&cpu});
    try {
        sched.alloc_graph(g);
        ADD_FAILURE() << "no error";
    } catch (const error &e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("'y'"), std::string::npos) << what;
        EXPECT_NE(what.find("gelu"), std::string::npos) << what;
    }

    test_backend device("dev", false);
    EXPECT_THROW(scheduler({&device}), error);  // the last backend must be a host backend
    EXPECT_THROW(scheduler(std::vector<backend *>{}), error);
}
