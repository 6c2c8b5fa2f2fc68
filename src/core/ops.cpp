// src/core/ops.cpp — op constructors (validate, record op/src/params, return) and the per-op tables.
#include "weft/core/ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <utility>

#include "weft/core/error.h"

namespace weft {

// --- per-op metadata ---------------------------------------------------------------------------

namespace {

struct op_info {
    op_kind op;
    const char *name;
    const char *symbol;  // DOT labels
    bool can_inplace;    // result may overwrite src[0] (same size, element i read before written)
    bool is_view;        // result is a view of src[0]: no memory, no work
};

// One entry per op, in enum order; the static_asserts below make a missing or misplaced entry a
// compile error.
constexpr auto op_table = std::to_array<op_info>({
    {op_kind::none, "none", "", false, false},
    {op_kind::get_rows, "get_rows", "get_rows(x)", false, false},
    {op_kind::add, "add", "x+y", true, false},
    {op_kind::sub, "sub", "x-y", true, false},
    {op_kind::mul, "mul", "x*y", true, false},
    {op_kind::div, "div", "x/y", true, false},
    {op_kind::scale, "scale", "s*x", true, false},
    {op_kind::rms_norm, "rms_norm", "rms_norm(x)", true, false},
    {op_kind::norm, "norm", "norm(x)", true, false},
    {op_kind::mul_mat, "mul_mat", "X", false, false},
    // in place: each rotated pair is read completely before either element is written
    {op_kind::rope, "rope", "rope(x)", true, false},
    {op_kind::soft_max, "soft_max", "soft_max(x)", true, false},
    {op_kind::silu, "silu", "silu(x)", true, false},
    {op_kind::gelu, "gelu", "gelu(x)", true, false},
    {op_kind::tanh, "tanh", "tanh(x)", true, false},
    {op_kind::glu, "glu", "glu(x,y)", true, false},
    {op_kind::cpy, "cpy", "x->y", false, false},
    {op_kind::cont, "cont", "cont(x)", false, false},
    {op_kind::set_rows, "set_rows", "set_rows(x)", false, false},
    {op_kind::concat, "concat", "concat(x,y)", false, false},
    {op_kind::argmax, "argmax", "argmax(x)", false, false},
    {op_kind::sum_rows, "sum_rows", "sum_rows(x)", false, false},
    {op_kind::mean, "mean", "mean(x)", false, false},
    {op_kind::attention, "attention", "attention(q,k,v)", false, false},
    {op_kind::mul_mat_id, "mul_mat_id", "X[ids]", false, false},
    {op_kind::top_k, "top_k", "top_k(x)", false, false},
    {op_kind::sigmoid, "sigmoid", "sigmoid(x)", true, false},
    {op_kind::ssm_conv, "ssm_conv", "ssm_conv(x)", false, false},
    {op_kind::ssm_scan, "ssm_scan", "ssm_scan(x)", false, false},
    {op_kind::ssm_scan_mamba2, "ssm_scan_mamba2", "ssm_scan_mamba2(x)", false, false},
    {op_kind::add_id, "add_id", "x+b[ids]", true, false},
    {op_kind::l2_norm, "l2_norm", "l2_norm(x)", true, false},
    {op_kind::gated_delta_net, "gated_delta_net", "gated_delta_net(q,k,v)", false, false},
    {op_kind::softplus, "softplus", "softplus(x)", true, false},
    {op_kind::view, "view", "view(x)", false, true},
    {op_kind::reshape, "reshape", "reshape(x)", false, true},
    {op_kind::permute, "permute", "permute(x)", false, true},
    {op_kind::transpose, "transpose", "transpose(x)", false, true},
});

static_assert(op_table.size() == size_t(op_kind::count), "one op_table entry per op_kind");
static_assert(size_t(op_kind::count) == 38, "op set changed: update op_table and the CPU kernel table");
constexpr bool op_table_in_enum_order() {
    for (size_t i = 0; i < op_table.size(); ++i)
        if (size_t(op_table[i].op) != i || op_table[i].name == nullptr) return false;
    return true;
}
static_assert(op_table_in_enum_order(), "op_table entries must follow the op_kind order");

const op_info &info(op_kind op) {
    const auto i = size_t(op);
    WEFT_ASSERT(i < op_table.size());
    return op_table[i];
}

// --- validation helpers ------------------------------------------------------------------------

std::string describe(const tensor &t) {
    if (!t.name[0]) return t.shape_str();
    std::string s(1, '\'');
    s += t.name;
    s += "' ";
    return s + t.shape_str();
}

[[noreturn]] void fail(const char *op, const std::string &what) {
    throw error(std::string("[") + op + "] " + what);
}

void require_tensor(const char *op, const char *role, const tensor *t) {
    if (t == nullptr) fail(op, std::string(role) + " is null");
}

bool is_float(dtype t) {
    return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16;
}

void require_float(const char *op, const char *role, const tensor &t) {
    if (!is_float(t.type))
        fail(op, std::string(role) + " is " + type_name(t.type) + " " + describe(t) +
                     ": must be f32, f16 or bf16");
}

void require_type(const char *op, const char *role, const tensor &t, dtype want) {
    if (t.type != want)
        fail(op, std::string(role) + " is " + type_name(t.type) + " " + describe(t) + ": must be " +
                     type_name(want));
}

std::span<const int64_t> shape_of(const tensor &t) {
    return {t.ne, size_t(max_dims)};
}
std::span<const size_t> strides_of(const tensor &t) {
    return {t.nb, size_t(max_dims)};
}

tensor *record(tensor *result, op_kind op, std::initializer_list<tensor *> srcs) {
    result->op = op;
    int i = 0;
    for (tensor *s : srcs) result->src[i++] = s;
    return result;
}

// The view ops name their result after the source, so graph dumps stay readable.
void name_after(tensor *result, const tensor &a, const char *suffix) {
    if (a.name[0]) result->format_name("%s (%s)", a.name, suffix);
}

tensor *binary(context &ctx, op_kind op, tensor *a, tensor *b) {
    const char *n = op_name(op);
    require_tensor(n, "a", a);
    require_tensor(n, "b", b);
    require_float(n, "a", *a);
    require_float(n, "b", *b);
    if (!can_repeat(*b, *a))
        fail(n, "a is " + a->shape_str() + ", b is " + b->shape_str() +
                    ": b must broadcast to a (every b.ne[i] must divide a.ne[i])");
    return record(ctx.new_tensor(dtype::f32, shape_of(*a)), op, {a, b});
}

tensor *unary(context &ctx, op_kind op, tensor *a) {
    const char *n = op_name(op);
    require_tensor(n, "a", a);
    require_float(n, "a", *a);
    return record(ctx.new_tensor(dtype::f32, shape_of(*a)), op, {a});
}

tensor *normalize(context &ctx, op_kind op, tensor *a, float eps) {
    tensor *r = unary(ctx, op, a);
    if (!(eps >= 0.0f))
        fail(op_name(op), "eps is " + std::to_string(eps) + " for a " + a->shape_str() + ": must be >= 0");
    r->set_param_f32(0, eps);
    return r;
}

tensor *reduce_rows(context &ctx, op_kind op, tensor *a) {
    const char *n = op_name(op);
    require_tensor(n, "a", a);
    require_float(n, "a", *a);
    return record(ctx.new_tensor(dtype::f32, {1, a->ne[1], a->ne[2], a->ne[3]}), op, {a});
}

// A tensor that only carries a shape and strides, to measure a view before creating it.
size_t view_extent(dtype t, std::span<const int64_t> ne, std::span<const size_t> nb) {
    tensor probe;
    probe.type = t;
    for (size_t i = 0; i < ne.size(); ++i) {
        probe.ne[i] = ne[i];
        probe.nb[i] = nb[i];
    }
    for (size_t i = ne.size(); i < max_dims; ++i) probe.nb[i] = probe.nb[i - 1] * size_t(probe.ne[i - 1]);
    return probe.nbytes();
}

tensor *make_view(context &ctx, const char *n, tensor *a, std::span<const int64_t> ne,
                  std::span<const size_t> nb, size_t offset) {
    require_tensor(n, "a", a);
    std::string shape = "[";
    for (size_t i = 0; i < ne.size(); ++i) {
        if (ne[i] < 0)
            fail(n, "a is " + a->shape_str() + ": negative view dimension " + std::to_string(ne[i]));
        shape += (i ? ", " : "") + std::to_string(ne[i]);
    }
    shape += "]";
    if (ne[0] % type_traits(a->type).block_size != 0)
        fail(n, "a is " + std::string(type_name(a->type)) + " " + a->shape_str() + ", view is " + shape +
                    ": ne[0] must be a multiple of the block size");
    const size_t extent = view_extent(a->type, ne, nb);
    if (offset + extent > a->nbytes())
        fail(n, "a is " + a->shape_str() + " (" + std::to_string(a->nbytes()) + " bytes), view is " + shape +
                    " at offset " + std::to_string(offset) + " spanning " + std::to_string(extent) +
                    " bytes: runs past the end of a");
    tensor *r = ctx.new_view(*a, a->type, ne, nb, offset);
    name_after(r, *a, "view");
    return record(r, op_kind::view, {a});
}

}  // namespace

const char *op_name(op_kind op) {
    return info(op).name;
}
const char *op_symbol(op_kind op) {
    return info(op).symbol;
}
bool op_can_inplace(op_kind op) {
    return info(op).can_inplace;
}
bool op_is_view(op_kind op) {
    return info(op).is_view;
}

// --- elementwise -------------------------------------------------------------------------------

tensor *add(context &ctx, tensor *a, tensor *b) {
    return binary(ctx, op_kind::add, a, b);
}
tensor *sub(context &ctx, tensor *a, tensor *b) {
    return binary(ctx, op_kind::sub, a, b);
}
tensor *mul(context &ctx, tensor *a, tensor *b) {
    return binary(ctx, op_kind::mul, a, b);
}
tensor *div(context &ctx, tensor *a, tensor *b) {
    return binary(ctx, op_kind::div, a, b);
}

tensor *scale(context &ctx, tensor *a, float s) {
    tensor *r = unary(ctx, op_kind::scale, a);
    r->set_param_f32(0, s);
    return r;
}

tensor *silu(context &ctx, tensor *a) {
    return unary(ctx, op_kind::silu, a);
}
tensor *gelu(context &ctx, tensor *a) {
    return unary(ctx, op_kind::gelu, a);
}
tensor *tanh(context &ctx, tensor *a) {
    return unary(ctx, op_kind::tanh, a);
}
tensor *sigmoid(context &ctx, tensor *a) {
    return unary(ctx, op_kind::sigmoid, a);
}
tensor *softplus(context &ctx, tensor *a) {
    return unary(ctx, op_kind::softplus, a);
}

tensor *glu(context &ctx, tensor *gate, tensor *up, glu_kind kind) {
    const char *n = "glu";
    require_tensor(n, "gate", gate);
    require_tensor(n, "up", up);
    require_float(n, "gate", *gate);
    require_float(n, "up", *up);
    if (!same_shape(*gate, *up))
        fail(n, "gate is " + gate->shape_str() + ", up is " + up->shape_str() + ": shapes must match");
    if (kind == glu_kind::swiglu_oai) fail(n, "swiglu_oai takes alpha and limit: call swiglu_oai()");
    if (kind != glu_kind::swiglu && kind != glu_kind::geglu)
        fail(n, "unknown glu kind " + std::to_string(int32_t(kind)) + " for gate " + gate->shape_str());
    tensor *r = record(ctx.new_tensor(dtype::f32, shape_of(*gate)), op_kind::glu, {gate, up});
    r->set_param_i32(0, int32_t(kind));
    return r;
}

tensor *swiglu_oai(context &ctx, tensor *gate, tensor *up, float alpha, float limit) {
    tensor *r = glu(ctx, gate, up, glu_kind::swiglu);
    if (!std::isfinite(alpha) || !(limit > 0.0f) || !std::isfinite(limit))
        fail("glu",
             "swiglu_oai of gate " + gate->shape_str() + ": alpha must be finite and limit finite and > 0");
    r->set_param_i32(0, int32_t(glu_kind::swiglu_oai));
    r->set_param_f32(1, alpha);
    r->set_param_f32(2, limit);
    return r;
}

tensor *rms_norm(context &ctx, tensor *a, float eps) {
    return normalize(ctx, op_kind::rms_norm, a, eps);
}
tensor *norm(context &ctx, tensor *a, float eps) {
    return normalize(ctx, op_kind::norm, a, eps);
}
tensor *l2_norm(context &ctx, tensor *a, float eps) {
    return normalize(ctx, op_kind::l2_norm, a, eps);
}

// --- matrix product ----------------------------------------------------------------------------

tensor *mul_mat(context &ctx, tensor *a, tensor *b) {
    const char *n = "mul_mat";
    require_tensor(n, "a", a);
    require_tensor(n, "b", b);
    const std::string shapes = "a is " + a->shape_str() + ", b is " + b->shape_str();
    if (a->ne[0] != b->ne[0]) fail(n, shapes + ": ne[0] must match");
    if (b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0)
        fail(n, shapes + ": b.ne[2] and b.ne[3] must be multiples of a.ne[2] and a.ne[3] (a is broadcast)");
    if (a->is_transposed()) fail(n, shapes + ": a must not be transposed (nb[0] > nb[1])");
    require_type(n, "b", *b, dtype::f32);
    return record(ctx.new_tensor(dtype::f32, {a->ne[1], b->ne[1], b->ne[2], b->ne[3]}), op_kind::mul_mat,
                  {a, b});
}

// --- mixture of experts ------------------------------------------------------------------------

tensor *mul_mat_id(context &ctx, tensor *experts, tensor *b, tensor *ids) {
    const char *n = "mul_mat_id";
    require_tensor(n, "experts", experts);
    require_tensor(n, "b", b);
    require_tensor(n, "ids", ids);
    require_type(n, "b", *b, dtype::f32);
    require_type(n, "ids", *ids, dtype::i32);
    const std::string shapes =
        "experts is " + experts->shape_str() + ", b is " + b->shape_str() + ", ids is " + ids->shape_str();
    if (experts->ne[0] != b->ne[0]) fail(n, shapes + ": ne[0] of experts and b must match");
    if (experts->ne[3] != 1 || b->ne[3] != 1 || ids->ne[2] != 1 || ids->ne[3] != 1)
        fail(n, shapes + ": experts and b have at most 3 dimensions, ids at most 2");
    if (ids->ne[1] != b->ne[2]) fail(n, shapes + ": ids.ne[1] must equal b.ne[2] (one id list per token)");
    if (b->ne[1] != 1 && b->ne[1] != ids->ne[0])
        fail(n, shapes + ": b.ne[1] must be 1 or ids.ne[0] (one column per token, or one per pick)");
    if (experts->is_transposed()) fail(n, shapes + ": experts must not be transposed (nb[0] > nb[1])");
    return record(ctx.new_tensor(dtype::f32, {experts->ne[1], ids->ne[0], ids->ne[1]}), op_kind::mul_mat_id,
                  {experts, b, ids});
}

tensor *add_id(context &ctx, tensor *a, tensor *bias, tensor *ids) {
    const char *n = "add_id";
    require_tensor(n, "a", a);
    require_tensor(n, "bias", bias);
    require_tensor(n, "ids", ids);
    require_type(n, "a", *a, dtype::f32);
    require_type(n, "bias", *bias, dtype::f32);
    require_type(n, "ids", *ids, dtype::i32);
    const std::string shapes =
        "a is " + a->shape_str() + ", bias is " + bias->shape_str() + ", ids is " + ids->shape_str();
    if (a->ne[3] != 1 || ids->ne[2] != 1 || ids->ne[3] != 1 || ids->ne[0] != a->ne[1] ||
        ids->ne[1] != a->ne[2])
        fail(n, shapes + ": a must be [m, n_used, n_tokens] and ids [n_used, n_tokens]");
    if (bias->ne[0] != a->ne[0] || bias->ne[2] != 1 || bias->ne[3] != 1 || bias->nb[0] != sizeof(float))
        fail(n, shapes + ": bias must be [a.ne[0], n_expert] with contiguous rows");
    if (a->nb[0] != sizeof(float) || ids->nb[0] != sizeof(int32_t))
        fail(n, shapes + ": a and ids must have contiguous rows");
    return record(ctx.new_tensor(dtype::f32, shape_of(*a)), op_kind::add_id, {a, bias, ids});
}

tensor *top_k(context &ctx, tensor *a, int64_t k) {
    const char *n = "top_k";
    require_tensor(n, "a", a);
    require_type(n, "a", *a, dtype::f32);
    if (k < 1 || k > a->ne[0])
        fail(n, "a is " + a->shape_str() + ", k is " + std::to_string(k) + ": must be in [1, a.ne[0]]");
    tensor *r = record(ctx.new_tensor(dtype::i32, {k, a->ne[1], a->ne[2], a->ne[3]}), op_kind::top_k, {a});
    r->set_param_i32(0, int32_t(k));
    return r;
}

tensor *argsort_desc(context &ctx, tensor *a) {
    require_tensor("top_k", "a", a);
    return top_k(ctx, a, a->ne[0]);
}

// --- rows --------------------------------------------------------------------------------------

tensor *get_rows(context &ctx, tensor *a, tensor *ids) {
    const char *n = "get_rows";
    require_tensor(n, "a", a);
    require_tensor(n, "ids", ids);
    require_type(n, "ids", *ids, dtype::i32);
    if (ids->ne[1] != a->ne[2] || ids->ne[2] != a->ne[3] || ids->ne[3] != 1)
        fail(n, "a is " + a->shape_str() + ", ids is " + ids->shape_str() +
                    ": ids must be [n, a.ne[2], a.ne[3]] (one row list per matrix of a)");
    return record(ctx.new_tensor(dtype::f32, {a->ne[0], ids->ne[0], ids->ne[1], ids->ne[2]}),
                  op_kind::get_rows, {a, ids});
}

tensor *set_rows(context &ctx, tensor *dst, tensor *src, tensor *ids) {
    const char *n = "set_rows";
    require_tensor(n, "dst", dst);
    require_tensor(n, "src", src);
    require_tensor(n, "ids", ids);
    if (ids->type != dtype::i32 && ids->type != dtype::i64)
        fail(n,
             "ids is " + std::string(type_name(ids->type)) + " " + describe(*ids) + ": must be i32 or i64");
    require_type(n, "src", *src, dtype::f32);
    const std::string shapes =
        "dst is " + dst->shape_str() + ", src is " + src->shape_str() + ", ids is " + ids->shape_str();
    if (dst->ne[0] != src->ne[0]) fail(n, shapes + ": ne[0] of dst and src must match");
    if (dst->ne[2] != src->ne[2] || dst->ne[3] != src->ne[3])
        fail(n, shapes + ": ne[2] and ne[3] of dst and src must match");
    if (ids->ne[0] != src->ne[1]) fail(n, shapes + ": ids.ne[0] must equal src.ne[1] (one index per row)");
    if (src->ne[2] % ids->ne[1] != 0 || src->ne[3] % ids->ne[2] != 0 || ids->ne[3] != 1)
        fail(n, shapes +
                    ": ids [n, I2, I3] must broadcast over src (I2 divides src.ne[2], I3 divides src.ne[3])");
    tensor *r = ctx.new_view(*dst, dst->type, shape_of(*dst), strides_of(*dst), 0);
    name_after(r, *dst, "set_rows");
    return record(r, op_kind::set_rows, {dst, src, ids});
}

// --- positions ---------------------------------------------------------------------------------

tensor *rope(context &ctx, tensor *a, tensor *pos, const rope_params &p, tensor *freq_factors) {
    const char *n = "rope";
    require_tensor(n, "a", a);
    require_tensor(n, "pos", pos);
    if (a->type != dtype::f32 && a->type != dtype::f16)
        fail(n, "a is " + std::string(type_name(a->type)) + " " + describe(*a) + ": must be f32 or f16");
    require_type(n, "pos", *pos, dtype::i32);
    if (pos->ne[0] != a->ne[2] || pos->nelements() != pos->ne[0])
        fail(n, "a is " + a->shape_str() + ", pos is " + pos->shape_str() +
                    ": pos must be [n_tokens] with n_tokens = a.ne[2]");
    if (p.n_dims <= 0 || p.n_dims % 2 != 0 || p.n_dims > a->ne[0])
        fail(n, "a is " + a->shape_str() + ", n_dims is " + std::to_string(p.n_dims) +
                    ": must be even, positive and at most a.ne[0]");
    if (p.mode != rope_mode_normal && p.mode != rope_mode_neox)
        fail(n, "a is " + a->shape_str() + ": unknown rope mode " + std::to_string(p.mode));
    if (freq_factors) {
        require_type(n, "freq_factors", *freq_factors, dtype::f32);
        if (freq_factors->ne[0] < p.n_dims / 2)
            fail(n, "a is " + a->shape_str() + ", freq_factors is " + freq_factors->shape_str() +
                        ": needs at least n_dims/2 = " + std::to_string(p.n_dims / 2) + " entries");
    }
    tensor *r = record(ctx.new_tensor(dtype::f32, shape_of(*a)), op_kind::rope, {a, pos, freq_factors});
    r->set_param_i32(0, p.n_dims);
    r->set_param_i32(1, p.mode);
    r->set_param_i32(2, p.n_ctx_orig);
    r->set_param_f32(3, p.freq_base);
    r->set_param_f32(4, p.freq_scale);
    r->set_param_f32(5, p.ext_factor);
    r->set_param_f32(6, p.attn_factor);
    r->set_param_f32(7, p.beta_fast);
    r->set_param_f32(8, p.beta_slow);
    return r;
}

rope_params rope_params_of(const tensor &node) {
    if (node.op != op_kind::rope)
        throw error("[rope_params_of] " + describe(node) + " is a " + op_name(node.op) + " node, not rope");
    rope_params p;
    p.n_dims = node.param_i32(0);
    p.mode = node.param_i32(1);
    p.n_ctx_orig = node.param_i32(2);
    p.freq_base = node.param_f32(3);
    p.freq_scale = node.param_f32(4);
    p.ext_factor = node.param_f32(5);
    p.attn_factor = node.param_f32(6);
    p.beta_fast = node.param_f32(7);
    p.beta_slow = node.param_f32(8);
    return p;
}

tensor *soft_max(context &ctx, tensor *a, tensor *mask, float s) {
    const char *n = "soft_max";
    require_tensor(n, "a", a);
    require_float(n, "a", *a);
    if (mask) {
        if (mask->type != dtype::f32 && mask->type != dtype::f16)
            fail(n, "mask is " + std::string(type_name(mask->type)) + " " + describe(*mask) +
                        ": must be f32 or f16");
        const std::string shapes = "a is " + a->shape_str() + ", mask is " + mask->shape_str();
        if (mask->ne[0] != a->ne[0] || mask->ne[1] < a->ne[1])
            fail(n, shapes + ": mask must be [a.ne[0], >= a.ne[1], ...]");
        if (a->ne[2] % mask->ne[2] != 0 || a->ne[3] % mask->ne[3] != 0)
            fail(n, shapes + ": mask.ne[2] and mask.ne[3] must divide a.ne[2] and a.ne[3]");
        if (!mask->is_contiguous()) fail(n, shapes + ": mask must be contiguous");
    }
    tensor *r = record(ctx.new_tensor(dtype::f32, shape_of(*a)), op_kind::soft_max, {a, mask});
    r->set_param_f32(0, s);
    return r;
}

std::span<const dtype> attention_kv_types() {
    static constexpr std::array<dtype, 8> types = {dtype::f32,  dtype::f16,  dtype::bf16, dtype::q8_0,
                                                   dtype::q4_0, dtype::q4_1, dtype::q5_0, dtype::q5_1};
    return types;
}

std::string attention_kv_type_names() {
    std::string names;
    for (dtype t : attention_kv_types()) names += std::string(names.empty() ? "" : ", ") + type_name(t);
    return names;
}

bool is_attention_kv_type(dtype t) {
    const auto types = attention_kv_types();
    return std::find(types.begin(), types.end(), t) != types.end();
}

tensor *attention(context &ctx, tensor *q, tensor *k, tensor *v, tensor *mask, float scale, float softcap,
                  tensor *positions, tensor *sinks) {
    const char *n = "attention";
    require_tensor(n, "q", q);
    require_tensor(n, "k", k);
    require_tensor(n, "v", v);
    require_tensor(n, "mask", mask);
    require_type(n, "q", *q, dtype::f32);
    require_type(n, "mask", *mask, dtype::f32);
    for (const tensor *kv : {k, v})
        if (!is_attention_kv_type(kv->type))
            fail(n, std::string(kv == k ? "k" : "v") + " is " + type_name(kv->type) + " " + describe(*kv) +
                        ": must be one of " + attention_kv_type_names());
    const std::string shapes = "q is " + q->shape_str() + ", k is " + k->shape_str() + ", v is " +
                               v->shape_str() + ", mask is " + mask->shape_str();
    if (k->ne[0] != q->ne[0]) fail(n, shapes + ": q and k must have the same head size (ne[0])");
    if (k->ne[1] != v->ne[1] || k->ne[2] != v->ne[2])
        fail(n, shapes + ": k and v must have the same cells (ne[1]) and heads (ne[2])");
    if (k->ne[2] == 0 || q->ne[2] % k->ne[2] != 0)
        fail(n, shapes + ": the KV heads (k.ne[2]) must divide the query heads (q.ne[2])");
    if (q->ne[3] != 1 || k->ne[3] != 1 || v->ne[3] != 1) fail(n, shapes + ": no fourth dimension");
    if (mask->ne[0] != k->ne[1] || mask->ne[1] < q->ne[1] || !mask->is_contiguous())
        fail(n, shapes + ": mask must be a contiguous [k.ne[1], >= q.ne[1]]");
    if (q->nb[0] != sizeof(float) || k->nb[0] != type_traits(k->type).type_size ||
        v->nb[0] != type_traits(v->type).type_size)
        fail(n, shapes + ": q, k and v rows must be contiguous");
    if (!(softcap >= 0.0f) || !std::isfinite(softcap)) fail(n, "softcap must be finite and >= 0");
    if (positions) {
        require_type(n, "positions", *positions, dtype::i32);
        if (positions->ne[0] < k->ne[1] || !positions->is_contiguous())
            fail(n, shapes + ", positions is " + positions->shape_str() +
                        ": positions must be a contiguous [>= k.ne[1]]");
    }
    if (sinks) {
        require_type(n, "sinks", *sinks, dtype::f32);
        if (sinks->nelements() != q->ne[2] || !sinks->is_contiguous())
            fail(n, shapes + ", sinks is " + sinks->shape_str() + ": sinks must be a contiguous [q.ne[2]]");
    }
    tensor *r = record(ctx.new_tensor(dtype::f32, {v->ne[0], q->ne[2], q->ne[1]}), op_kind::attention,
                       {q, k, v, mask, positions, sinks});
    r->set_param_f32(0, scale);
    r->set_param_f32(1, softcap);
    return r;
}

// --- recurrent sequences ------------------------------------------------------------------------

namespace {

// The checks ssm_conv and ssm_scan share: x f32 [n_ch, n_tokens] with contiguous rows, states f32
// [state_len, n_ch, n_seqs] contiguous, seq_of i32 [n_tokens]. Returns the 1-d result: y, then the
// states. With state_columns (the in-place form), states is [state_len, n_ch, n_cols], state_columns
// i32 [2, n_seqs], and the result y alone.
tensor *record_ssm(context &ctx, op_kind op, tensor *x, tensor *states, int64_t state_len, tensor *seq_of,
                   std::initializer_list<tensor *> srcs, int64_t state_rows = 0,
                   const tensor *state_columns = nullptr) {
    const int64_t rows = state_rows > 0 ? state_rows : x->ne[0];
    const bool in_place = state_columns != nullptr;
    const char *n = op_name(op);
    require_type(n, "x", *x, dtype::f32);
    require_type(n, "states", *states, dtype::f32);
    require_type(n, "seq_of", *seq_of, dtype::i32);
    const std::string shapes = "x is " + x->shape_str() + ", states is " + states->shape_str() +
                               ", seq_of is " + seq_of->shape_str();
    if (x->ne[2] != 1 || x->ne[3] != 1 || x->nb[0] != sizeof(float))
        fail(n, shapes + ": x must be [n_ch, n_tokens] with contiguous rows");
    if (states->ne[0] != state_len || states->ne[1] != rows || states->ne[3] != 1 || !states->is_contiguous())
        fail(n, shapes + ": states must be a contiguous [" + std::to_string(state_len) + ", " +
                    std::to_string(rows) + (in_place ? ", n_cols]" : ", n_seqs]"));
    if (seq_of->ne[0] != x->ne[1] || seq_of->nelements() != seq_of->ne[0] || !seq_of->is_contiguous())
        fail(n, shapes + ": seq_of must be a contiguous [n_tokens] with n_tokens = x.ne[1]");
    if (in_place) {
        require_type(n, "rows", *state_columns, dtype::i32);
        if (state_columns->ne[0] != 2 || state_columns->ne[1] < 1 || state_columns->ne[2] != 1 ||
            state_columns->ne[3] != 1 || !state_columns->is_contiguous())
            fail(n,
                 shapes + ", rows is " + state_columns->shape_str() +
                     ": rows must be a contiguous [2, n_seqs] (each sequence's column read, column written)");
    }
    const int64_t n_out = x->ne[0] * x->ne[1] + (in_place ? 0 : states->nelements());
    return record(ctx.new_tensor(dtype::f32, {n_out}), op, srcs);
}

}  // namespace

tensor *ssm_conv(context &ctx, tensor *x, tensor *states, tensor *weight, tensor *seq_of, tensor *rows) {
    const char *n = "ssm_conv";
    require_tensor(n, "x", x);
    require_tensor(n, "states", states);
    require_tensor(n, "weight", weight);
    require_tensor(n, "seq_of", seq_of);
    require_type(n, "weight", *weight, dtype::f32);
    if (weight->ne[0] < 1 || weight->ne[1] != x->ne[0] || weight->ne[2] != 1 || weight->ne[3] != 1 ||
        weight->nb[0] != sizeof(float))
        fail(n, "x is " + x->shape_str() + ", weight is " + weight->shape_str() +
                    ": weight must be [d_conv >= 1, x.ne[0]] with contiguous rows");
    return record_ssm(ctx, op_kind::ssm_conv, x, states, weight->ne[0] - 1, seq_of,
                      {x, states, weight, seq_of, rows}, 0, rows);
}

tensor *ssm_scan(context &ctx, tensor *x, tensor *dt, tensor *A, tensor *B, tensor *C, tensor *states,
                 tensor *seq_of) {
    const char *n = "ssm_scan";
    for (const auto &[role, t] : {std::pair<const char *, tensor *>{"x", x},
                                  {"dt", dt},
                                  {"A", A},
                                  {"B", B},
                                  {"C", C},
                                  {"states", states},
                                  {"seq_of", seq_of}})
        require_tensor(n, role, t);
    for (const auto &[role, t] :
         {std::pair<const char *, tensor *>{"dt", dt}, {"A", A}, {"B", B}, {"C", C}}) {
        require_type(n, role, *t, dtype::f32);
        if (t->nb[0] != sizeof(float) || t->ne[2] != 1 || t->ne[3] != 1)
            fail(n, std::string(role) + " is " + t->shape_str() + ": must be a matrix with contiguous rows");
    }
    const int64_t d_state = A->ne[0];
    const std::string shapes = "x is " + x->shape_str() + ", dt is " + dt->shape_str() + ", A is " +
                               A->shape_str() + ", B is " + B->shape_str() + ", C is " + C->shape_str();
    if (!same_shape(*dt, *x)) fail(n, shapes + ": dt must have x's shape");
    if (A->ne[1] != x->ne[0]) fail(n, shapes + ": A must be [d_state, x.ne[0]]");
    if (B->ne[0] != d_state || B->ne[1] != x->ne[1] || C->ne[0] != d_state || C->ne[1] != x->ne[1])
        fail(n, shapes + ": B and C must be [A.ne[0], x.ne[1]]");
    return record_ssm(ctx, op_kind::ssm_scan, x, states, d_state, seq_of, {x, dt, A, B, C, states, seq_of});
}

tensor *ssm_scan_mamba2(context &ctx, tensor *x, tensor *dt, tensor *A, tensor *B, tensor *C, tensor *states,
                        tensor *seq_of, tensor *D, tensor *rows) {
    const char *n = "ssm_scan_mamba2";
    for (const auto &[role, t] : {std::pair<const char *, tensor *>{"x", x},
                                  {"dt", dt},
                                  {"A", A},
                                  {"B", B},
                                  {"C", C},
                                  {"states", states},
                                  {"seq_of", seq_of}})
        require_tensor(n, role, t);
    for (const auto &[role, t] :
         {std::pair<const char *, tensor *>{"dt", dt}, {"A", A}, {"B", B}, {"C", C}, {"D", D}}) {
        if (t == nullptr) continue;  // D is optional
        require_type(n, role, *t, dtype::f32);
        if (t->nb[0] != sizeof(float) || t->ne[2] != 1 || t->ne[3] != 1)
            fail(n, std::string(role) + " is " + t->shape_str() + ": must be a matrix with contiguous rows");
    }
    const int64_t n_head = dt->ne[0], d_state = states->ne[0];
    const std::string shapes = "x is " + x->shape_str() + ", dt is " + dt->shape_str() + ", A is " +
                               A->shape_str() + ", B is " + B->shape_str() + ", C is " + C->shape_str() +
                               ", states is " + states->shape_str();
    if (n_head < 1 || x->ne[0] % n_head != 0 || dt->ne[1] != x->ne[1])
        fail(n, shapes + ": dt must be [n_head, x.ne[1]] with n_head dividing x.ne[0]");
    if (A->nelements() != n_head || !A->is_contiguous())
        fail(n, shapes + ": A must be a contiguous [n_head]");
    if (D && (D->nelements() != n_head || !D->is_contiguous()))
        fail(n, shapes + ", D is " + D->shape_str() + ": D must be a contiguous [n_head]");
    if (d_state < 1 || B->ne[0] % d_state != 0 || !same_shape(*B, *C) || B->ne[1] != x->ne[1])
        fail(n, shapes + ": B and C must be [d_state * n_group, x.ne[1]] with d_state = states.ne[0]");
    const int64_t n_group = B->ne[0] / d_state;
    if (n_head % n_group != 0)
        fail(n, shapes + ": the " + std::to_string(n_group) + " groups must divide the " +
                    std::to_string(n_head) + " heads");
    return record_ssm(ctx, op_kind::ssm_scan_mamba2, x, states, d_state, seq_of,
                      {x, dt, A, B, C, states, seq_of, D, rows}, 0, rows);
}

int op_state_source(const tensor &n) {
    switch (n.op) {
        case op_kind::ssm_conv:
            return n.src[4] ? 1 : -1;
        case op_kind::ssm_scan_mamba2:
            return n.src[8] ? 5 : -1;
        default:
            return -1;
    }
}

int64_t gated_delta_net_state_floats(int64_t d_k, int64_t d_v) {
    constexpr int64_t c = gated_delta_net_chunk;
    const int64_t floats = d_k * d_v + d_k * c + c * d_v + c + 1;
    return (floats + 15) / 16 * 16;
}

tensor *gated_delta_net(context &ctx, tensor *q, tensor *k, tensor *v, tensor *g, tensor *beta,
                        tensor *states, tensor *seq_of, float scale, delta_net_form form) {
    const char *n = "gated_delta_net";
    for (const auto &[role, t] : {std::pair<const char *, tensor *>{"q", q},
                                  {"k", k},
                                  {"v", v},
                                  {"g", g},
                                  {"beta", beta},
                                  {"states", states},
                                  {"seq_of", seq_of}})
        require_tensor(n, role, t);
    for (const auto &[role, t] :
         {std::pair<const char *, tensor *>{"q", q}, {"k", k}, {"g", g}, {"beta", beta}}) {
        require_type(n, role, *t, dtype::f32);
        if (t->nb[0] != sizeof(float) || t->ne[2] != 1 || t->ne[3] != 1)
            fail(n, std::string(role) + " is " + t->shape_str() + ": must be a matrix with contiguous rows");
    }
    const std::string shapes = "q is " + q->shape_str() + ", k is " + k->shape_str() + ", v is " +
                               v->shape_str() + ", g is " + g->shape_str() + ", beta is " +
                               beta->shape_str() + ", states is " + states->shape_str();
    const int64_t n_tokens = v->ne[1], n_head_v = g->ne[0];
    if (!same_shape(*q, *k) || q->ne[1] != n_tokens || !same_shape(*g, *beta) || g->ne[1] != n_tokens)
        fail(n, shapes + ": q and k must share a shape, g and beta too, all with v's n_tokens (ne[1])");
    if (n_head_v < 1 || v->ne[0] % n_head_v != 0)
        fail(n, shapes + ": v.ne[0] must be d_v * n_head_v: n_head_v = g.ne[0] must divide it");
    // d_k from the state's size: gated_delta_net_state_floats grows by more than its padding per d_k
    const int64_t d_v = v->ne[0] / n_head_v, c = gated_delta_net_chunk;
    const int64_t d_k = std::max<int64_t>(0, (states->ne[0] - c * (d_v + 1) - 1) / (d_v + c));
    if (d_k < 1 || gated_delta_net_state_floats(d_k, d_v) != states->ne[0] || q->ne[0] % d_k != 0)
        fail(n, shapes + ": states.ne[0] must be gated_delta_net_state_floats(d_k, d_v) with d_v = " +
                    std::to_string(d_v) + " and q.ne[0] = d_k * n_head_k");
    const int64_t n_head_k = q->ne[0] / d_k;
    if (n_head_v % n_head_k != 0)
        fail(n, shapes + ": n_head_k = " + std::to_string(n_head_k) +
                    " must divide n_head_v = " + std::to_string(n_head_v));
    if (!std::isfinite(scale)) fail(n, shapes + ": scale must be finite");
    if (form != delta_net_form::automatic && form != delta_net_form::recurrent)
        fail(n, "unknown form " + std::to_string(int32_t(form)));
    tensor *r = record_ssm(ctx, op_kind::gated_delta_net, v, states, states->ne[0], seq_of,
                           {q, k, v, g, beta, states, seq_of}, n_head_v);
    r->set_param_f32(0, scale);
    r->set_param_i32(1, int32_t(form));
    r->set_param_i32(2, int32_t(d_k));
    return r;
}

// --- copies and layout -------------------------------------------------------------------------

tensor *cpy(context &ctx, tensor *src, tensor *dst) {
    const char *n = "cpy";
    require_tensor(n, "src", src);
    require_tensor(n, "dst", dst);
    if (src->nelements() != dst->nelements())
        fail(n,
             "src is " + src->shape_str() + ", dst is " + dst->shape_str() + ": element counts must match");
    tensor *r = ctx.new_view(*dst, dst->type, shape_of(*dst), strides_of(*dst), 0);
    if (dst->name[0]) r->format_name("%s (copy of %s)", dst->name, src->name[0] ? src->name : "?");
    return record(r, op_kind::cpy, {src, dst});
}

tensor *cont(context &ctx, tensor *a) {
    require_tensor("cont", "a", a);
    tensor *r = ctx.new_tensor(a->type, shape_of(*a));
    name_after(r, *a, "cont");
    return record(r, op_kind::cont, {a});
}

tensor *cast(context &ctx, tensor *a, dtype t) {
    require_tensor("cast", "a", a);
    if (!type_traits(t).known)
        fail("cast", "a is " + a->shape_str() + ": unknown target type " + std::to_string(int(t)));
    if (a->ne[0] % type_traits(t).block_size != 0)
        fail("cast",
             "a is " + a->shape_str() + ": ne[0] is not a multiple of the " + type_name(t) + " block size");
    // A cpy whose destination is the result itself: src[1] stays null (see ops.h).
    tensor *r = ctx.new_tensor(t, shape_of(*a));
    if (a->name[0]) r->format_name("%s (%s)", a->name, type_name(t));
    return record(r, op_kind::cpy, {a});
}

tensor *concat(context &ctx, tensor *a, tensor *b, int dim) {
    const char *n = "concat";
    require_tensor(n, "a", a);
    require_tensor(n, "b", b);
    const std::string shapes = "a is " + a->shape_str() + ", b is " + b->shape_str();
    if (dim < 0 || dim >= max_dims) fail(n, shapes + ": dim " + std::to_string(dim) + " is not in 0..3");
    if (a->type != b->type)
        fail(n, shapes + ": types must match (" + type_name(a->type) + " vs " + type_name(b->type) + ")");
    for (int i = 0; i < max_dims; ++i)
        if (i != dim && a->ne[i] != b->ne[i])
            fail(n, shapes + ": every ne[i] but ne[" + std::to_string(dim) + "] must match");
    int64_t ne[max_dims] = {a->ne[0], a->ne[1], a->ne[2], a->ne[3]};
    ne[dim] += b->ne[dim];
    tensor *r =
        record(ctx.new_tensor(a->type, std::span<const int64_t>(ne, max_dims)), op_kind::concat, {a, b});
    r->set_param_i32(0, dim);
    return r;
}

// --- reductions --------------------------------------------------------------------------------

tensor *argmax(context &ctx, tensor *a) {
    const char *n = "argmax";
    require_tensor(n, "a", a);
    require_type(n, "a", *a, dtype::f32);
    if (a->ne[2] != 1 || a->ne[3] != 1) fail(n, "a is " + a->shape_str() + ": must be a matrix [n, rows]");
    return record(ctx.new_tensor(dtype::i32, {a->ne[1]}), op_kind::argmax, {a});
}

tensor *sum_rows(context &ctx, tensor *a) {
    return reduce_rows(ctx, op_kind::sum_rows, a);
}
tensor *mean(context &ctx, tensor *a) {
    return reduce_rows(ctx, op_kind::mean, a);
}

// --- views -------------------------------------------------------------------------------------

tensor *view_1d(context &ctx, tensor *a, int64_t ne0, size_t offset) {
    require_tensor("view_1d", "a", a);
    const int64_t ne[] = {ne0};
    const size_t nb[] = {a->nb[0]};
    return make_view(ctx, "view_1d", a, ne, nb, offset);
}

tensor *view_2d(context &ctx, tensor *a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset) {
    require_tensor("view_2d", "a", a);
    const int64_t ne[] = {ne0, ne1};
    const size_t nb[] = {a->nb[0], nb1};
    return make_view(ctx, "view_2d", a, ne, nb, offset);
}

tensor *view_3d(context &ctx, tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1, size_t nb2,
                size_t offset) {
    require_tensor("view_3d", "a", a);
    const int64_t ne[] = {ne0, ne1, ne2};
    const size_t nb[] = {a->nb[0], nb1, nb2};
    return make_view(ctx, "view_3d", a, ne, nb, offset);
}

tensor *view_4d(context &ctx, tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, size_t nb1,
                size_t nb2, size_t nb3, size_t offset) {
    require_tensor("view_4d", "a", a);
    const int64_t ne[] = {ne0, ne1, ne2, ne3};
    const size_t nb[] = {a->nb[0], nb1, nb2, nb3};
    return make_view(ctx, "view_4d", a, ne, nb, offset);
}

tensor *reshape(context &ctx, tensor *a, std::initializer_list<int64_t> ne) {
    const char *n = "reshape";
    require_tensor(n, "a", a);
    std::string shape = "[";
    int64_t count = 1;
    for (int64_t d : ne) {
        shape += (shape.size() > 1 ? ", " : "") + std::to_string(d);
        if (d < 0) fail(n, "a is " + a->shape_str() + ": negative dimension " + std::to_string(d));
        count *= d;
    }
    shape += "]";
    if (ne.size() == 0 || ne.size() > size_t(max_dims))
        fail(n, "a is " + a->shape_str() + ", new shape is " + shape + ": 1 to 4 dimensions allowed");
    if (count != a->nelements())
        fail(n, "a is " + a->shape_str() + ", new shape is " + shape + ": element counts must match");
    if (!a->is_contiguous()) fail(n, "a is " + a->shape_str() + ": must be contiguous (use cont first)");
    const auto &ti = type_traits(a->type);
    if (*ne.begin() % ti.block_size != 0)
        fail(n, "a is " + a->shape_str() + ", new shape is " + shape + ": ne[0] must be a multiple of the " +
                    ti.name + " block size");
    size_t nb[max_dims];
    nb[0] = ti.type_size;
    nb[1] = size_t(*ne.begin() / ti.block_size) * ti.type_size;
    for (size_t i = 2; i < ne.size(); ++i) nb[i] = nb[i - 1] * size_t(ne.begin()[i - 1]);
    tensor *r = ctx.new_view(*a, a->type, std::span<const int64_t>(ne.begin(), ne.size()),
                             std::span<const size_t>(nb, ne.size()), 0);
    name_after(r, *a, "reshaped");
    return record(r, op_kind::reshape, {a});
}

tensor *reshape_2d(context &ctx, tensor *a, int64_t ne0, int64_t ne1) {
    return reshape(ctx, a, {ne0, ne1});
}
tensor *reshape_3d(context &ctx, tensor *a, int64_t ne0, int64_t ne1, int64_t ne2) {
    return reshape(ctx, a, {ne0, ne1, ne2});
}
tensor *reshape_4d(context &ctx, tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    return reshape(ctx, a, {ne0, ne1, ne2, ne3});
}

namespace {
tensor *permute_as(context &ctx, op_kind op, tensor *a, const int (&ax)[max_dims]) {
    const char *n = op_name(op);
    require_tensor(n, "a", a);
    bool seen[max_dims] = {};
    for (int i = 0; i < max_dims; ++i) {
        if (ax[i] < 0 || ax[i] >= max_dims || seen[ax[i]])
            fail(n, "a is " + a->shape_str() + ": axes (" + std::to_string(ax[0]) + ", " +
                        std::to_string(ax[1]) + ", " + std::to_string(ax[2]) + ", " + std::to_string(ax[3]) +
                        ") must be a permutation of 0..3");
        seen[ax[i]] = true;
    }
    if (type_traits(a->type).block_size != 1 && ax[0] != 0)
        fail(n, "a is " + std::string(type_name(a->type)) + " " + a->shape_str() +
                    ": a block-quantized tensor cannot move its innermost dimension");
    int64_t ne[max_dims];
    size_t nb[max_dims];
    for (int i = 0; i < max_dims; ++i) {
        ne[ax[i]] = a->ne[i];
        nb[ax[i]] = a->nb[i];
    }
    tensor *r = ctx.new_view(*a, a->type, std::span<const int64_t>(ne, max_dims),
                             std::span<const size_t>(nb, max_dims), 0);
    name_after(r, *a, op == op_kind::transpose ? "transposed" : "permuted");
    for (int i = 0; i < max_dims; ++i) r->set_param_i32(i, ax[i]);
    return record(r, op, {a});
}
}  // namespace

tensor *permute(context &ctx, tensor *a, int ax0, int ax1, int ax2, int ax3) {
    const int ax[max_dims] = {ax0, ax1, ax2, ax3};
    return permute_as(ctx, op_kind::permute, a, ax);
}

tensor *transpose(context &ctx, tensor *a) {
    const int ax[max_dims] = {1, 0, 2, 3};
    return permute_as(ctx, op_kind::transpose, a, ax);
}

}  // namespace weft
