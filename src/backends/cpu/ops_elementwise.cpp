// src/backends/cpu/ops_elementwise.cpp — add/sub/mul/div with broadcasting, scale, silu, gelu, sigmoid, glu.
#include <atomic>
#include <cmath>
#include <vector>

#include "backends/cpu/activations.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/rows.h"
#include "weft/backends/cpu.h"
#include "weft/core/fp16.h"

namespace weft::cpu {

namespace {

// The tanh approximation of GELU, with 1 + a x^2 contracted to one fma as the reference engine's
// compiler does.
float gelu_tanh(float x) {
    constexpr float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    constexpr float coef_a = 0.044715f;
    return 0.5f * x * (1.0f + std::tanh(sqrt_2_over_pi * x * std::fma(coef_a * x, x, 1.0f)));
}

std::atomic<bool> gelu_through_table{true};

// GELU as the reference engine's CPU backend computes it: 0 at or below -10, x at or above 10, and
// between them gelu_tanh of x rounded to f16, rounded to f16 (its table of every f16 input).
float gelu_table_f32(float x) {
    static const std::vector<fp16_t> table = [] {
        std::vector<fp16_t> t(size_t(1) << 16);
        for (size_t i = 0; i < t.size(); ++i) t[i] = fp32_to_fp16(gelu_tanh(fp16_to_fp32(fp16_t(i))));
        return t;
    }();
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return fp16_to_fp32(table[fp32_to_fp16(x)]);
}

// dst = op(a, b) with b repeated over every dim where b.ne[i] < a.ne[i] (b.ne[i] divides a.ne[i]).
template <class Op>
void binary_op(const compute_params &p, tensor &dst, Op op) {
    const tensor &a = *dst.src[0];
    const tensor &b = *dst.src[1];
    const int64_t ne0 = dst.ne[0];
    const int64_t nb_ne0 = b.ne[0];
    float *scratch = thread_scratch(p, row_scratch_rows * ne0);
    float *a_scratch = scratch;
    float *b_scratch = scratch + ne0;
    float *out_scratch = scratch + 2 * ne0;

    for_each_result_row(p, dst, out_scratch, [&](int64_t i1, int64_t i2, int64_t i3, float *out) {
        const float *x = row_as_f32(a.type, row_at(a, i1, i2, i3), a.nb[0], ne0, a_scratch);
        const float *y = row_as_f32(b.type, row_at(b, i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]), b.nb[0],
                                    nb_ne0, b_scratch);
        if (nb_ne0 == ne0) {
            for (int64_t i = 0; i < ne0; ++i) out[i] = op(x[i], y[i]);
        } else if (nb_ne0 == 1) {
            const float y0 = y[0];
            for (int64_t i = 0; i < ne0; ++i) out[i] = op(x[i], y0);
        } else {
            for (int64_t start = 0; start < ne0; start += nb_ne0)
                for (int64_t i = 0; i < nb_ne0; ++i) out[start + i] = op(x[start + i], y[i]);
        }
    });
}

// dst = f(a) row by row.
template <class F>
void unary_op(const compute_params &p, tensor &dst, F f) {
    map_rows(p, dst, [&f](const float *x, float *out, int64_t n, int64_t, int64_t, int64_t, float *) {
        for (int64_t i = 0; i < n; ++i) out[i] = f(x[i]);
    });
}

// row(g, u, out, n) computes one result row from the gate and up rows.
template <class Row>
void glu_op(const compute_params &p, tensor &dst, Row row) {
    const tensor &gate = *dst.src[0];
    const tensor &up = *dst.src[1];
    const int64_t ne0 = dst.ne[0];
    // Fewer rows than threads (a decode step's one row): each f32 row's values are shared out too, in
    // pieces of 64, so that no thread computes a whole row while the others wait at the barrier. Every
    // value is computed alone, so the bits are those of the whole row.
    const bool f32_rows = gate.type == dtype::f32 && up.type == dtype::f32 && dst.type == dtype::f32 &&
                          gate.nb[0] == sizeof(float) && up.nb[0] == sizeof(float) &&
                          dst.nb[0] == sizeof(float);
    if (dst.nrows() < p.nth && f32_rows) {
        const index_range mine = split_row_values(ne0, p.ith, p.nth);
        const int64_t c0 = mine.begin, c1 = mine.end;
        for (int64_t r = 0; r < dst.nrows() && c0 < c1; ++r) {
            int64_t i1 = 0, i2 = 0, i3 = 0;
            unravel_row(r, dst.ne, i1, i2, i3);
            row(reinterpret_cast<const float *>(row_at(gate, i1, i2, i3)) + c0,
                reinterpret_cast<const float *>(row_at(up, i1, i2, i3)) + c0,
                reinterpret_cast<float *>(row_at(dst, i1, i2, i3)) + c0, c1 - c0);
        }
        return;
    }
    float *scratch = thread_scratch(p, row_scratch_rows * ne0);
    for_each_result_row(p, dst, scratch + 2 * ne0, [&](int64_t i1, int64_t i2, int64_t i3, float *out) {
        const float *g = row_as_f32(gate.type, row_at(gate, i1, i2, i3), gate.nb[0], ne0, scratch);
        const float *u = row_as_f32(up.type, row_at(up, i1, i2, i3), up.nb[0], ne0, scratch + ne0);
        row(g, u, out, ne0);
    });
}

}  // namespace

void compute_add(const compute_params &p, tensor &dst) {
    binary_op(p, dst, [](float x, float y) { return x + y; });
}
void compute_sub(const compute_params &p, tensor &dst) {
    binary_op(p, dst, [](float x, float y) { return x - y; });
}
void compute_mul(const compute_params &p, tensor &dst) {
    binary_op(p, dst, [](float x, float y) { return x * y; });
}
void compute_div(const compute_params &p, tensor &dst) {
    binary_op(p, dst, [](float x, float y) { return x / y; });
}

void compute_scale(const compute_params &p, tensor &dst) {
    const float s = dst.param_f32(0);
    unary_op(p, dst, [s](float x) { return x * s; });
}
void compute_silu(const compute_params &p, tensor &dst) {
    const silu_row_fn silu_row = best_silu_row();
    map_rows(p, dst, [silu_row](const float *x, float *out, int64_t n, int64_t, int64_t, int64_t, float *) {
        silu_row(x, out, n);
    });
}
// Runs fn with the GELU in use (the table, or gelu_tanh after cpu_set_gelu_table(false)), chosen once
// per op so that the loops call it directly.
template <class Fn>
void with_gelu(Fn &&fn) {
    if (gelu_through_table.load(std::memory_order_relaxed))
        fn([](float x) { return gelu_table_f32(x); });
    else
        fn([](float x) { return gelu_tanh(x); });
}

void compute_gelu(const compute_params &p, tensor &dst) {
    with_gelu([&](auto gelu) { unary_op(p, dst, gelu); });
}
void compute_tanh(const compute_params &p, tensor &dst) {
    unary_op(p, dst, [](float x) { return std::tanh(x); });
}
void compute_sigmoid(const compute_params &p, tensor &dst) {
    unary_op(p, dst, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
}
void compute_softplus(const compute_params &p, tensor &dst) {
    const softplus_row_fn softplus_row = best_softplus_row();
    map_rows(p, dst,
             [softplus_row](const float *x, float *out, int64_t n, int64_t, int64_t, int64_t, float *) {
                 softplus_row(x, out, n);
             });
}

void compute_glu(const compute_params &p, tensor &dst) {
    if (glu_kind(dst.param_i32(0)) == glu_kind::swiglu) {
        glu_op(p, dst, best_swiglu_row());
    } else if (glu_kind(dst.param_i32(0)) == glu_kind::swiglu_oai) {
        const swiglu_oai_row_fn row = best_swiglu_oai_row();
        const float alpha = dst.param_f32(1), limit = dst.param_f32(2);
        glu_op(p, dst, [row, alpha, limit](const float *g, const float *u, float *out, int64_t n) {
            row(g, u, out, n, alpha, limit);
        });
    } else {
        with_gelu([&](auto gelu) {
            glu_op(p, dst, [gelu](const float *g, const float *u, float *out, int64_t n) {
                for (int64_t i = 0; i < n; ++i) out[i] = gelu(g[i]) * u[i];
            });
        });
    }
}

bool supports_binary(const tensor &dst) {
    const tensor *a = dst.src[0];
    const tensor *b = dst.src[1];
    return a && b && is_float_type(a->type) && is_float_type(b->type) && is_float_type(dst.type) &&
           same_shape(*a, dst) && can_repeat(*b, *a);
}

bool supports_unary(const tensor &dst) {
    const tensor *a = dst.src[0];
    return a && is_float_type(a->type) && is_float_type(dst.type) && same_shape(*a, dst);
}

bool supports_glu(const tensor &dst) {
    const tensor *gate = dst.src[0];
    const tensor *up = dst.src[1];
    const int32_t kind = dst.param_i32(0);
    return gate && up && is_float_type(gate->type) && is_float_type(up->type) && is_float_type(dst.type) &&
           same_shape(*gate, dst) && same_shape(*up, dst) &&
           (kind == int32_t(glu_kind::swiglu) || kind == int32_t(glu_kind::geglu) ||
            kind == int32_t(glu_kind::swiglu_oai));
}

}  // namespace weft::cpu

namespace weft {

void cpu_set_gelu_table(bool on) {
    cpu::gelu_through_table.store(on, std::memory_order_relaxed);
}

}  // namespace weft
