// tests/core/test_ops_shapes.cpp — op constructors: result shape, type, op, sources, params, errors.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/ops.h"

using namespace weft;

namespace {

class OpsTest : public ::testing::Test {
  protected:
    context ctx{context_params{context_overhead(512), true}};

    tensor *t(dtype type, std::initializer_list<int64_t> ne, const char *name = "") {
        tensor *r = ctx.new_tensor(type, ne);
        if (name[0]) r->set_name(name);
        return r;
    }
    tensor *f32(std::initializer_list<int64_t> ne, const char *name = "") { return t(dtype::f32, ne, name); }
};

// Runs f, expects a weft::error whose message contains every one of `parts`.
void expect_error(const std::function<void()> &f, const std::vector<std::string> &parts) {
    try {
        f();
        ADD_FAILURE() << "no error thrown; expected one mentioning " << parts.front();
    } catch (const error &e) {
        const std::string what = e.what();
        for (const auto &p : parts)
            EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
    }
}

void expect_shape(const tensor *r, std::vector<int64_t> ne) {
    ne.resize(4, 1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r->ne[i], ne[size_t(i)]) << "dim " << i << " of " << r->shape_str();
}

}  // namespace

TEST_F(OpsTest, BinaryOpsKeepAsShapeAndBroadcastB) {
    using binary_fn = tensor *(*)(context &, tensor *, tensor *);
    const std::vector<std::pair<binary_fn, op_kind>> ops = {
        {&add, op_kind::add}, {&sub, op_kind::sub}, {&mul, op_kind::mul}, {&div, op_kind::div}};
    for (const auto &[fn, kind] : ops) {
        tensor *a = t(dtype::f16, {5, 7, 11, 13});
        tensor *b = f32({5, 1, 11, 1});
        tensor *r = fn(ctx, a, b);
        expect_shape(r, {5, 7, 11, 13});
        EXPECT_EQ(r->type, dtype::f32);
        EXPECT_EQ(r->op, kind);
        EXPECT_EQ(r->src[0], a);
        EXPECT_EQ(r->src[1], b);
        EXPECT_EQ(r->src[2], nullptr);
        EXPECT_EQ(r->data, nullptr);  // recorded, not computed
        EXPECT_TRUE(r->is_contiguous());

        const std::string name = std::string("[") + op_name(kind) + "]";
        expect_error([&] { fn(ctx, f32({5, 7}), f32({3, 7})); }, {name, "[5, 7]", "[3, 7]", "broadcast"});
        expect_error([&] { fn(ctx, f32({4, 6}), f32({4, 4})); }, {name, "[4, 6]", "[4, 4]"});
        expect_error([&] { fn(ctx, t(dtype::i32, {4}), f32({4})); }, {name, "i32", "[4]"});
        expect_error([&] { fn(ctx, f32({4}), nullptr); }, {name, "b is null"});
    }
}

TEST_F(OpsTest, UnaryOpsAndScale) {
    tensor *a = f32({5, 7, 11});
    tensor *s = scale(ctx, a, 0.125f);
    expect_shape(s, {5, 7, 11});
    EXPECT_EQ(s->op, op_kind::scale);
    EXPECT_EQ(s->param_f32(0), 0.125f);
    EXPECT_EQ(s->src[0], a);

    EXPECT_EQ(silu(ctx, a)->op, op_kind::silu);
    EXPECT_EQ(gelu(ctx, a)->op, op_kind::gelu);
    expect_shape(gelu(ctx, a), {5, 7, 11});
    EXPECT_EQ(silu(ctx, t(dtype::bf16, {4}))->type, dtype::f32);
    expect_error([&] { silu(ctx, t(dtype::q8_0, {32, 2})); }, {"[silu]", "q8_0", "[32, 2]"});
    expect_error([&] { gelu(ctx, t(dtype::i32, {3})); }, {"[gelu]", "i32", "[3]"});
    expect_error([&] { scale(ctx, t(dtype::i8, {3}), 2.0f); }, {"[scale]", "i8", "[3]"});
}

TEST_F(OpsTest, GluRecordsKindAndNeedsMatchingShapes) {
    tensor *gate = f32({16, 3}, "gate");
    tensor *up = f32({16, 3}, "up");
    tensor *r = swiglu(ctx, gate, up);
    EXPECT_EQ(r->op, op_kind::glu);
    EXPECT_EQ(r->param_i32(0), int32_t(glu_kind::swiglu));
    EXPECT_EQ(r->src[0], gate);
    EXPECT_EQ(r->src[1], up);
    expect_shape(r, {16, 3});
    EXPECT_EQ(glu(ctx, gate, up, glu_kind::geglu)->param_i32(0), int32_t(glu_kind::geglu));
    expect_error([&] { swiglu(ctx, gate, f32({16, 4})); }, {"[glu]", "[16, 3]", "[16, 4]"});
    expect_error([&] { glu(ctx, gate, up, glu_kind(7)); }, {"[glu]", "7"});
}

TEST_F(OpsTest, NormsStoreEps) {
    tensor *a = f32({64, 5});
    tensor *r = rms_norm(ctx, a, 1e-6f);
    EXPECT_EQ(r->op, op_kind::rms_norm);
    EXPECT_EQ(r->param_f32(0), 1e-6f);
    expect_shape(r, {64, 5});
    tensor *n = norm(ctx, a, 1e-5f);
    EXPECT_EQ(n->op, op_kind::norm);
    EXPECT_EQ(n->param_f32(0), 1e-5f);
    expect_error([&] { rms_norm(ctx, a, -1.0f); }, {"[rms_norm]", "[64, 5]", "eps"});
    expect_error([&] { norm(ctx, t(dtype::i32, {4, 2}), 1e-5f); }, {"[norm]", "i32", "[4, 2]"});
}

TEST_F(OpsTest, MulMatShapesAndGroupedQueryBroadcast) {
    tensor *w = t(dtype::q4_0, {64, 48}, "w");
    tensor *x = f32({64, 7});
    tensor *r = mul_mat(ctx, w, x);
    expect_shape(r, {48, 7});
    EXPECT_EQ(r->type, dtype::f32);
    EXPECT_EQ(r->op, op_kind::mul_mat);
    EXPECT_EQ(r->src[0], w);
    EXPECT_EQ(r->src[1], x);

    // grouped-query attention: 2 K heads serve 8 Q heads without copies
    tensor *k = f32({128, 32, 2, 1});
    tensor *q = f32({128, 5, 8, 1});
    expect_shape(mul_mat(ctx, k, q), {32, 5, 8, 1});
    expect_shape(mul_mat(ctx, f32({16, 3, 1, 2}), f32({16, 4, 3, 6})), {3, 4, 3, 6});

    try {
        mul_mat(ctx, f32({4096, 11008}), f32({4095, 7}));
        ADD_FAILURE() << "no error";
    } catch (const error &e) {
        EXPECT_STREQ(e.what(), "[mul_mat] a is [4096, 11008], b is [4095, 7]: ne[0] must match");
    }
    expect_error(
        [&] {
            mul_mat(ctx, f32({128, 32, 3}), f32({128, 5, 8}));
        },
        {"[mul_mat]", "[128, 32, 3]", "[128, 5, 8]"});
    expect_error(
        [&] {
            mul_mat(ctx, f32({8, 4}), t(dtype::f16, {8, 2}));
        },
        {"[mul_mat]", "b is f16", "[8, 2]", "f32"});
    expect_error(
        [&] {
            mul_mat(ctx, transpose(ctx, f32({4, 8})), f32({8, 2}));
        },
        {"[mul_mat]", "transposed"});
}

TEST_F(OpsTest, GetRowsGathersRowsAsF32) {
    tensor *embd = t(dtype::q8_0, {64, 1000}, "token_embd");
    tensor *ids = t(dtype::i32, {9}, "ids");
    tensor *r = get_rows(ctx, embd, ids);
    expect_shape(r, {64, 9});
    EXPECT_EQ(r->type, dtype::f32);
    EXPECT_EQ(r->op, op_kind::get_rows);
    EXPECT_EQ(r->src[0], embd);
    EXPECT_EQ(r->src[1], ids);
    expect_shape(get_rows(ctx, f32({8, 10, 3}), t(dtype::i32, {4, 3})), {8, 4, 3});

    expect_error([&] { get_rows(ctx, embd, f32({9})); }, {"[get_rows]", "ids is f32", "i32"});
    expect_error(
        [&] {
            get_rows(ctx, f32({8, 10, 3}), t(dtype::i32, {4, 2}));
        },
        {"[get_rows]", "[8, 10, 3]", "[4, 2]"});
}

TEST_F(OpsTest, SetRowsIsAViewOfTheDestination) {
    tensor *cache = t(dtype::f16, {64, 256}, "cache_k");
    tensor *rows = f32({64, 3}, "k");
    tensor *ids = t(dtype::i64, {3}, "slots");
    tensor *r = set_rows(ctx, cache, rows, ids);
    EXPECT_EQ(r->op, op_kind::set_rows);
    EXPECT_EQ(r->view_src, cache);
    EXPECT_EQ(r->type, dtype::f16);
    expect_shape(r, {64, 256});
    EXPECT_EQ(r->src[0], cache);
    EXPECT_EQ(r->src[1], rows);
    EXPECT_EQ(r->src[2], ids);
    EXPECT_NO_THROW(set_rows(ctx, cache, rows, t(dtype::i32, {3})));

    expect_error([&] { set_rows(ctx, cache, rows, f32({3})); }, {"[set_rows]", "ids is f32", "i32 or i64"});
    expect_error([&] { set_rows(ctx, cache, f32({32, 3}), ids); }, {"[set_rows]", "[64, 256]", "[32, 3]"});
    expect_error([&] { set_rows(ctx, cache, rows, t(dtype::i32, {4})); }, {"[set_rows]", "[64, 3]", "[4]"});
    expect_error([&] { set_rows(ctx, cache, t(dtype::f16, {64, 3}), ids); }, {"[set_rows]", "src is f16"});
}

TEST_F(OpsTest, RopePacksItsParameters) {
    tensor *q = f32({128, 32, 7}, "q");
    tensor *pos = t(dtype::i32, {7}, "pos");
    tensor *ff = f32({32}, "rope_freqs");
    rope_params p;
    p.n_dims = 64;
    p.mode = rope_mode_neox;
    p.n_ctx_orig = 4096;
    p.freq_base = 500000.0f;
    p.freq_scale = 0.25f;
    p.ext_factor = 1.0f;
    p.attn_factor = 1.5f;
    p.beta_fast = 16.0f;
    p.beta_slow = 2.0f;
    tensor *r = rope(ctx, q, pos, p, ff);
    EXPECT_EQ(r->op, op_kind::rope);
    expect_shape(r, {128, 32, 7});
    EXPECT_EQ(r->type, dtype::f32);
    EXPECT_EQ(r->src[0], q);
    EXPECT_EQ(r->src[1], pos);
    EXPECT_EQ(r->src[2], ff);
    const rope_params back = rope_params_of(*r);
    EXPECT_EQ(back.n_dims, 64);
    EXPECT_EQ(back.mode, rope_mode_neox);
    EXPECT_EQ(back.n_ctx_orig, 4096);
    EXPECT_EQ(back.freq_base, 500000.0f);
    EXPECT_EQ(back.freq_scale, 0.25f);
    EXPECT_EQ(back.ext_factor, 1.0f);
    EXPECT_EQ(back.attn_factor, 1.5f);
    EXPECT_EQ(back.beta_fast, 16.0f);
    EXPECT_EQ(back.beta_slow, 2.0f);
    EXPECT_EQ(r->param_i32(0), 64);  // the documented layout
    EXPECT_EQ(r->param_f32(3), 500000.0f);
    EXPECT_EQ(rope(ctx, q, pos, p)->src[2], nullptr);

    expect_error([&] { rope(ctx, q, t(dtype::i32, {6}), p); }, {"[rope]", "[128, 32, 7]", "[6]"});
    expect_error([&] { rope(ctx, q, f32({7}), p); }, {"[rope]", "pos is f32", "i32"});
    rope_params odd = p;
    odd.n_dims = 63;
    expect_error([&] { rope(ctx, q, pos, odd); }, {"[rope]", "[128, 32, 7]", "63"});
    rope_params wide = p;
    wide.n_dims = 256;
    expect_error([&] { rope(ctx, q, pos, wide); }, {"[rope]", "256"});
    expect_error([&] { rope(ctx, q, pos, p, f32({8})); }, {"[rope]", "freq_factors", "[8]"});
    expect_error([&] { rope_params_of(*q); }, {"rope_params_of", "none"});
}

TEST_F(OpsTest, SoftMaxWithMaskAndScale) {
    tensor *kq = f32({32, 7, 8});
    tensor *mask = t(dtype::f16, {32, 8}, "kq_mask");
    tensor *r = soft_max(ctx, kq, mask, 0.125f);
    EXPECT_EQ(r->op, op_kind::soft_max);
    expect_shape(r, {32, 7, 8});
    EXPECT_EQ(r->src[0], kq);
    EXPECT_EQ(r->src[1], mask);
    EXPECT_EQ(r->param_f32(0), 0.125f);
    EXPECT_EQ(soft_max(ctx, kq)->src[1], nullptr);
    EXPECT_EQ(soft_max(ctx, kq)->param_f32(0), 1.0f);

    expect_error([&] { soft_max(ctx, kq, f32({31, 8})); }, {"[soft_max]", "[32, 7, 8]", "[31, 8]"});
    expect_error([&] { soft_max(ctx, kq, f32({32, 6})); }, {"[soft_max]", "[32, 7, 8]", "[32, 6]"});
    expect_error([&] { soft_max(ctx, kq, t(dtype::i32, {32, 8})); }, {"[soft_max]", "mask is i32"});
    expect_error([&] { soft_max(ctx, kq, f32({32, 8, 3})); }, {"[soft_max]", "[32, 8, 3]"});
}

TEST_F(OpsTest, CpyContAndCast) {
    tensor *src = f32({64, 3}, "k");
    tensor *dst = t(dtype::f16, {64, 3}, "cache");
    tensor *c = cpy(ctx, src, dst);
    EXPECT_EQ(c->op, op_kind::cpy);
    EXPECT_EQ(c->src[0], src);
    EXPECT_EQ(c->src[1], dst);
    EXPECT_EQ(c->view_src, dst);
    EXPECT_EQ(c->type, dtype::f16);
    expect_shape(c, {64, 3});
    EXPECT_STREQ(c->name, "cache (copy of k)");
    expect_error([&] { cpy(ctx, src, f32({64, 2})); }, {"[cpy]", "[64, 3]", "[64, 2]"});

    tensor *tr = transpose(ctx, f32({5, 7}));
    tensor *k = cont(ctx, tr);
    EXPECT_EQ(k->op, op_kind::cont);
    EXPECT_EQ(k->src[0], tr);
    expect_shape(k, {7, 5});
    EXPECT_TRUE(k->is_contiguous());
    EXPECT_EQ(k->view_src, nullptr);
    expect_error([&] { cont(ctx, nullptr); }, {"[cont]", "a is null"});  // any shape is fine otherwise

    tensor *h = cast(ctx, src, dtype::f16);
    EXPECT_EQ(h->op, op_kind::cpy);
    EXPECT_EQ(h->type, dtype::f16);
    EXPECT_EQ(h->src[0], src);
    EXPECT_EQ(h->src[1], nullptr);
    EXPECT_EQ(h->view_src, nullptr);
    expect_shape(h, {64, 3});
    expect_error([&] { cast(ctx, f32({48, 2}), dtype::q4_0); }, {"[cast]", "[48, 2]", "block size"});
}

TEST_F(OpsTest, ConcatJoinsAlongOneDim) {
    tensor *a = f32({4, 5, 6});
    tensor *b = f32({4, 3, 6});
    tensor *r = concat(ctx, a, b, 1);
    expect_shape(r, {4, 8, 6});
    EXPECT_EQ(r->op, op_kind::concat);
    EXPECT_EQ(r->param_i32(0), 1);
    EXPECT_EQ(r->src[0], a);
    EXPECT_EQ(r->src[1], b);
    expect_error([&] { concat(ctx, a, b, 2); }, {"[concat]", "[4, 5, 6]", "[4, 3, 6]"});
    expect_error([&] { concat(ctx, a, b, 4); }, {"[concat]", "dim 4"});
    expect_error([&] { concat(ctx, a, t(dtype::f16, {4, 3, 6}), 1); }, {"[concat]", "types must match"});
}

TEST_F(OpsTest, Reductions) {
    tensor *logits = f32({32000, 3});
    tensor *am = argmax(ctx, logits);
    EXPECT_EQ(am->type, dtype::i32);
    expect_shape(am, {3});
    EXPECT_EQ(am->op, op_kind::argmax);
    expect_error([&] { argmax(ctx, f32({5, 3, 2})); }, {"[argmax]", "[5, 3, 2]"});
    expect_error([&] { argmax(ctx, t(dtype::f16, {5, 3})); }, {"[argmax]", "f16"});

    tensor *s = sum_rows(ctx, f32({5, 7, 11, 13}));
    expect_shape(s, {1, 7, 11, 13});
    EXPECT_EQ(s->op, op_kind::sum_rows);
    tensor *m = mean(ctx, f32({5, 7}));
    expect_shape(m, {1, 7});
    EXPECT_EQ(m->op, op_kind::mean);
    expect_error([&] { sum_rows(ctx, t(dtype::i32, {5})); }, {"[sum_rows]", "i32", "[5]"});
    expect_error([&] { mean(ctx, t(dtype::q4_0, {32})); }, {"[mean]", "q4_0", "[32]"});
}

TEST_F(OpsTest, ResultsOfANoAllocContextHaveNoData) {
    tensor *r = mul_mat(ctx, f32({8, 4}, "w"), f32({8, 2}, "x"));
    r->set_name("y");
    EXPECT_EQ(r->data, nullptr);
    expect_error([&] { tensor_get_f32(*r, 0, 0); }, {"'y'", "not been computed"});
}

// --- views on an allocated context: strides change, data is shared --------------------------

class ViewTest : public ::testing::Test {
  protected:
    context ctx{context_params{1 << 20, false}};
};

TEST_F(ViewTest, ViewsShareDataAtTheirOffset) {
    tensor *a = ctx.new_tensor(dtype::f32, {5, 7, 11, 13});
    a->set_name("a");
    char *base = static_cast<char *>(a->data);
    ASSERT_NE(base, nullptr);

    tensor *v1 = view_1d(ctx, a, 10, 3 * a->nb[0]);
    EXPECT_EQ(v1->op, op_kind::view);
    EXPECT_EQ(v1->src[0], a);
    EXPECT_EQ(v1->view_src, a);
    EXPECT_EQ(v1->data, base + 12);
    expect_shape(v1, {10});

    tensor *v2 = view_2d(ctx, a, 5, 3, a->nb[1], 2 * a->nb[1]);  // rows 2..4 of the first matrix
    EXPECT_EQ(v2->data, base + 2 * a->nb[1]);
    EXPECT_EQ(v2->nb[1], a->nb[1]);
    expect_shape(v2, {5, 3});
    EXPECT_STREQ(v2->name, "a (view)");
    tensor_set_f32(*a, 42.0f, 1, 3);
    EXPECT_EQ(tensor_get_f32(*v2, 1, 1), 42.0f);  // the same memory

    tensor *v3 = view_3d(ctx, a, 5, 7, 2, a->nb[1], a->nb[2], a->nb[2]);
    EXPECT_EQ(v3->data, base + a->nb[2]);
    EXPECT_EQ(v3->nb[2], a->nb[2]);
    tensor *v4 = view_4d(ctx, a, 5, 7, 11, 2, a->nb[1], a->nb[2], a->nb[3], 0);
    EXPECT_EQ(v4->data, base);
    EXPECT_EQ(v4->nb[3], a->nb[3]);

    // a view of a view points at the original, offsets added
    tensor *vv = view_1d(ctx, v2, 5, v2->nb[1]);
    EXPECT_EQ(vv->view_src, a);
    EXPECT_EQ(vv->data, base + 3 * a->nb[1]);

    expect_error([&] { view_2d(ctx, a, 5, 3, a->nb[1], a->nbytes()); },
                 {"[view_2d]", "[5, 7, 11, 13]", "[5, 3]", "past the end"});
    expect_error([&] { view_1d(ctx, a, 5 * 7 * 11 * 13 + 1, 0); }, {"[view_1d]", "[5, 7, 11, 13]"});
    expect_error([&] { view_3d(ctx, a, 5, 7, 11, a->nb[1], a->nb[2], 12 * a->nb[3] + a->nb[2]); },
                 {"[view_3d]", "[5, 7, 11]", "past the end"});
    expect_error([&] { view_4d(ctx, a, 5, 7, 11, 14, a->nb[1], a->nb[2], a->nb[3], 0); },
                 {"[view_4d]", "[5, 7, 11, 14]"});
}

TEST_F(ViewTest, ReshapeKeepsDataAndNeedsContiguousInput) {
    tensor *a = ctx.new_tensor(dtype::f32, {6, 4});
    tensor *r = reshape_3d(ctx, a, 3, 2, 4);
    EXPECT_EQ(r->op, op_kind::reshape);
    EXPECT_EQ(r->data, a->data);
    EXPECT_EQ(r->src[0], a);
    expect_shape(r, {3, 2, 4});
    EXPECT_TRUE(r->is_contiguous());
    expect_shape(reshape_2d(ctx, a, 12, 2), {12, 2});
    expect_shape(reshape_4d(ctx, a, 2, 3, 2, 2), {2, 3, 2, 2});
    expect_shape(reshape(ctx, a, {24}), {24});

    expect_error([&] { reshape_2d(ctx, a, 5, 5); }, {"[reshape]", "[6, 4]", "[5, 5]", "element counts"});
    expect_error([&] { reshape_2d(ctx, transpose(ctx, a), 4, 6); }, {"[reshape]", "[4, 6]", "contiguous"});
    tensor *q = ctx.new_tensor(dtype::q4_0, {64, 2});
    expect_error([&] { reshape_2d(ctx, q, 16, 8); }, {"[reshape]", "[64, 2]", "block size"});
}

TEST_F(ViewTest, PermuteAndTransposeMoveStridesNotData) {
    tensor *a = ctx.new_tensor(dtype::f32, {5, 7, 11, 13});
    tensor *p = permute(ctx, a, 0, 2, 1, 3);  // axis 1 -> 2, axis 2 -> 1
    EXPECT_EQ(p->op, op_kind::permute);
    EXPECT_EQ(p->data, a->data);
    expect_shape(p, {5, 11, 7, 13});
    EXPECT_EQ(p->nb[1], a->nb[2]);
    EXPECT_EQ(p->nb[2], a->nb[1]);
    EXPECT_EQ(p->param_i32(1), 2);
    EXPECT_FALSE(p->is_contiguous());
    tensor_set_f32(*a, 7.5f, 4, 6, 10, 12);
    EXPECT_EQ(tensor_get_f32(*p, 4, 10, 6, 12), 7.5f);

    tensor *r = permute(ctx, a, 3, 2, 1, 0);
    expect_shape(r, {13, 11, 7, 5});
    EXPECT_EQ(r->nb[0], a->nb[3]);

    tensor *t = transpose(ctx, a);
    EXPECT_EQ(t->op, op_kind::transpose);
    EXPECT_EQ(t->data, a->data);
    expect_shape(t, {7, 5, 11, 13});
    EXPECT_TRUE(t->is_transposed());
    EXPECT_EQ(tensor_get_f32(*t, 6, 4, 10, 12), 7.5f);

    expect_error([&] { permute(ctx, a, 0, 1, 1, 3); }, {"[permute]", "[5, 7, 11, 13]", "permutation"});
    expect_error([&] { permute(ctx, a, 0, 1, 2, 4); }, {"[permute]", "permutation"});
    tensor *q = ctx.new_tensor(dtype::q4_0, {32, 4});
    expect_error([&] { transpose(ctx, q); }, {"[transpose]", "q4_0", "[32, 4]"});
}

// --- the per-op tables ------------------------------------------------------------------------

TEST(OpTables, EveryOpHasANameSymbolAndFlags) {
    std::set<std::string> names;
    for (int i = 0; i < int(op_kind::count); ++i) {
        const auto op = op_kind(i);
        ASSERT_NE(op_name(op), nullptr);
        ASSERT_NE(op_symbol(op), nullptr);
        EXPECT_TRUE(names.insert(op_name(op)).second) << "duplicate name " << op_name(op);
    }
    EXPECT_STREQ(op_name(op_kind::mul_mat), "mul_mat");
    EXPECT_STREQ(op_symbol(op_kind::mul_mat), "X");
    EXPECT_STREQ(op_symbol(op_kind::add), "x+y");

    for (op_kind op : {op_kind::add, op_kind::sub, op_kind::mul, op_kind::div, op_kind::scale, op_kind::silu,
                       op_kind::gelu, op_kind::sigmoid, op_kind::glu, op_kind::rms_norm, op_kind::norm,
                       op_kind::soft_max, op_kind::rope})
        EXPECT_TRUE(op_can_inplace(op)) << op_name(op);
    for (op_kind op : {op_kind::none, op_kind::mul_mat, op_kind::get_rows, op_kind::cont, op_kind::cpy,
                       op_kind::concat, op_kind::set_rows, op_kind::argmax, op_kind::sum_rows, op_kind::mean,
                       op_kind::mul_mat_id, op_kind::top_k, op_kind::view})
        EXPECT_FALSE(op_can_inplace(op)) << op_name(op);

    for (op_kind op : {op_kind::view, op_kind::reshape, op_kind::permute, op_kind::transpose})
        EXPECT_TRUE(op_is_view(op)) << op_name(op);
    for (op_kind op : {op_kind::cpy, op_kind::set_rows, op_kind::add, op_kind::cont, op_kind::none})
        EXPECT_FALSE(op_is_view(op)) << op_name(op);
}
