// src/backends/cpu/ops_mul_mat.cpp — matrix product for every weight type, through the quant traits.
//
// dst[i0, i1, i2, i3] = dot(row i0 of a's matrix (i2 / (B2/A2), i3 / (B3/A3)), row (i1, i2, i3) of b).
// The activations b are first converted once per op to the weight type's vec_dot_type (f16 for f16
// weights, q8_0 / q8_K for the quantized ones) in the work memory, split across threads; then each
// thread computes tiles of the result. Every element is one vec_dot, so the result does not depend
// on the thread count.
#include "backends/cpu/kernels.h"
#include "backends/cpu/rows.h"
#include "weft/quant/quant.h"

namespace weft::cpu {

namespace {

// A tile: up to this many rows of a times this many rows of b (a's rows stay in cache across b's).
constexpr int64_t max_tile_rows_a = 16;
constexpr int64_t max_tile_rows_b = 16;
// Tiles are halved until every thread has a few of them (small products: decode attention).
constexpr int64_t min_tiles_per_thread = 4;

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

// b can be read where it lies: already of the vec_dot type, with contiguous rows.
bool activations_used_in_place(const tensor &b, dtype vec_dot_type) {
    return b.type == vec_dot_type && b.nb[0] == type_traits(b.type).type_size;
}

size_t converted_bytes(const tensor &b, dtype vec_dot_type) {
    return pad_to_cache_line(row_size(vec_dot_type, b.ne[0]) * size_t(b.nrows()));
}

}  // namespace

void compute_mul_mat(const compute_params &p, tensor &dst) {
    const tensor &a = *dst.src[0];  // [k, m, A2, A3] weights of any type
    const tensor &b = *dst.src[1];  // [k, n, B2, B3] activations
    const quant_traits &a_traits = quant_traits_of(a.type);
    const dtype vec_dot_type = a_traits.vec_dot_type;
    // quant_traits_of answers with the scalar table under force_scalar(), so the oracle path is testable
    const vec_dot_fn vec_dot = a_traits.vec_dot;
    const int64_t k = a.ne[0];
    const int64_t m = a.ne[1];
    const int64_t n = b.ne[1], b2 = b.ne[2], b3 = b.ne[3];

    const char *y_base = static_cast<const char *>(b.data);
    size_t y_nb1 = b.nb[1], y_nb2 = b.nb[2], y_nb3 = b.nb[3];
    if (!activations_used_in_place(b, vec_dot_type)) {
        // Convert every row of b into contiguous rows of vec_dot_type, each thread a share.
        const size_t y_row = row_size(vec_dot_type, k);
        const quant_traits &y_traits = quant_traits_of(vec_dot_type);
        const from_float_fn from_float = y_traits.from_float;
        std::byte *converted = p.wdata;
        float *scratch =
            reinterpret_cast<float *>(p.wdata + converted_bytes(b, vec_dot_type) +
                                      size_t(p.ith) * pad_to_cache_line(size_t(k) * sizeof(float)));
        const index_range rows = split_range(b.nrows(), p.ith, p.nth);
        for (int64_t r = rows.begin; r < rows.end; ++r) {
            int64_t i1, i2, i3;
            unravel_row(r, b.ne, i1, i2, i3);
            const char *src = row_at(b, i1, i2, i3);
            auto *out = reinterpret_cast<char *>(converted) + size_t(r) * y_row;
            if (vec_dot_type == dtype::f32) {
                load_row(b.type, src, b.nb[0], k, reinterpret_cast<float *>(out));
            } else {
                from_float(row_as_f32(b.type, src, b.nb[0], k, scratch), out, k);
            }
        }
        p.barrier();
        y_base = reinterpret_cast<const char *>(converted);
        y_nb1 = y_row;
        y_nb2 = y_row * size_t(n);
        y_nb3 = y_nb2 * size_t(b2);
    }

    const int64_t ratio2 = b2 / a.ne[2];
    const int64_t ratio3 = b3 / a.ne[3];
    const int64_t b_rows = n * b2 * b3;
    int64_t tile_rows_a = max_tile_rows_a, tile_rows_b = max_tile_rows_b;
    const int64_t wanted_tiles = min_tiles_per_thread * p.nth;
    while (ceil_div(m, tile_rows_a) * ceil_div(b_rows, tile_rows_b) < wanted_tiles &&
           (tile_rows_a > 1 || tile_rows_b > 1)) {
        if (tile_rows_a >= tile_rows_b && tile_rows_a > 1)
            tile_rows_a /= 2;
        else
            tile_rows_b /= 2;
    }
    const int64_t n_tiles_a = ceil_div(m, tile_rows_a);
    const int64_t n_tiles_b = ceil_div(b_rows, tile_rows_b);
    for (int64_t tile = p.ith; tile < n_tiles_a * n_tiles_b; tile += p.nth) {
        const int64_t a_begin = (tile % n_tiles_a) * tile_rows_a;
        const int64_t a_end = std::min(m, a_begin + tile_rows_a);
        const int64_t b_begin = (tile / n_tiles_a) * tile_rows_b;
        const int64_t b_end = std::min(b_rows, b_begin + tile_rows_b);
        for (int64_t rb = b_begin; rb < b_end; ++rb) {
            int64_t i11, i12, i13;
            unravel_row(rb, b.ne, i11, i12, i13);
            const char *a_matrix = static_cast<const char *>(a.data) + size_t(i12 / ratio2) * a.nb[2] +
                                   size_t(i13 / ratio3) * a.nb[3];
            const char *y = y_base + size_t(i11) * y_nb1 + size_t(i12) * y_nb2 + size_t(i13) * y_nb3;
            char *out = row_at(dst, i11, i12, i13);
            for (int64_t ra = a_begin; ra < a_end; ++ra)
                vec_dot(k, reinterpret_cast<float *>(out + size_t(ra) * dst.nb[0]),
                        a_matrix + size_t(ra) * a.nb[1], y);
        }
    }
}

bool supports_mul_mat(const tensor &dst) {
    const tensor *a = dst.src[0];
    const tensor *b = dst.src[1];
    if (!a || !b || dst.type != dtype::f32 || !has_quant_traits(a->type) || !is_float_type(b->type))
        return false;
    const quant_traits &a_traits = quant_traits_of(a->type);
    if (!a_traits.vec_dot || !a_traits.vec_dot_ref || !has_quant_traits(a_traits.vec_dot_type)) return false;
    const quant_traits &y_traits = quant_traits_of(a_traits.vec_dot_type);
    if (a_traits.vec_dot_type != dtype::f32 && (!y_traits.from_float || !y_traits.from_float_ref))
        return false;
    const int64_t k = a->ne[0];
    return a->nb[0] == type_traits(a->type).type_size && b->ne[0] == k &&
           k % type_traits(a_traits.vec_dot_type).block_size == 0 && b->ne[2] % a->ne[2] == 0 &&
           b->ne[3] % a->ne[3] == 0 && dst.ne[0] == a->ne[1] && dst.ne[1] == b->ne[1] &&
           dst.ne[2] == b->ne[2] && dst.ne[3] == b->ne[3];
}

size_t work_size_mul_mat(const tensor &dst, int n_threads) {
    const tensor &a = *dst.src[0];
    const tensor &b = *dst.src[1];
    const dtype vec_dot_type = quant_traits_of(a.type).vec_dot_type;
    if (activations_used_in_place(b, vec_dot_type)) return 0;
    return converted_bytes(b, vec_dot_type) + scratch_size(b.ne[0], n_threads);
}

}  // namespace weft::cpu
