// src/backends/cpu/ops_copy.cpp — data movement: get_rows, set_rows, cpy (with conversion), cont, concat.
#include <string>

#include "backends/cpu/kernels.h"
#include "backends/cpu/row_kernels.h"
#include "backends/cpu/rows.h"
#include "weft/quant/quant.h"

namespace weft::cpu {

namespace {

bool is_block_type(dtype t) {
    return type_traits(t).block_size > 1;
}
bool rows_contiguous(const tensor &t) {
    return t.nb[0] == type_traits(t.type).type_size;
}

int64_t read_index(const tensor &ids, int64_t i0, int64_t i1, int64_t i2) {
    const char *p = element_at(ids, i0, i1, i2, 0);
    if (ids.type == dtype::i64) {
        int64_t v;
        std::memcpy(&v, p, sizeof v);
        return v;
    }
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

from_float_fn from_float_of(dtype t) {
    return row_traits_of(t).from_float;
}

// A row of ne0 elements of any type as floats (a contiguous f32 row is read in place).
const float *source_row_as_f32(const tensor &src, const char *row, int64_t ne0, float *scratch) {
    if (is_block_type(src.type)) {
        row_traits_of(src.type).to_float(row, scratch, ne0);
        return scratch;
    }
    return row_as_f32(src.type, row, src.nb[0], ne0, scratch);
}

// Floats x[0..ne0) stored into a row of dst's type (quantized rows are contiguous blocks).
void store_row_any(const tensor &dst, const float *x, char *row, int64_t ne0) {
    if (is_block_type(dst.type))
        from_float_of(dst.type)(x, row, ne0);
    else
        store_row(dst.type, x, row, dst.nb[0], ne0);
}

// Copies src into dst, which hold the same number of elements, in the logical (row-major, ne[0]
// fastest) order of each; converts between types. Rows of src are split across threads.
void copy_tensor(const compute_params &p, const tensor &src, tensor &dst) {
    const int64_t ne0 = src.ne[0];
    if (same_shape(src, dst)) {
        const size_t elem = type_traits(src.type).type_size;
        const bool same_bytes = src.type == dst.type;
        float *scratch = thread_scratch(p, ne0);
        for (const auto [i1, i2, i3] : thread_rows(p, src)) {
            const char *srow = row_at(src, i1, i2, i3);
            char *drow = row_at(dst, i1, i2, i3);
            if (same_bytes && (is_block_type(src.type) || (rows_contiguous(src) && rows_contiguous(dst)))) {
                std::memcpy(drow, srow, row_size(src.type, ne0));
            } else if (same_bytes && !is_float_type(src.type)) {
                for (int64_t i = 0; i < ne0; ++i)
                    std::memcpy(drow + i * dst.nb[0], srow + i * src.nb[0], elem);
            } else {
                store_row_any(dst, source_row_as_f32(src, srow, ne0, scratch), drow, ne0);
            }
        }
        return;
    }
    // Different shapes (a reshaping copy): walk dst's coordinates alongside src's flat index.
    const index_range rows = split_range(src.nrows(), p.ith, p.nth);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        int64_t i1, i2, i3;
        unravel_row(r, src.ne, i1, i2, i3);
        const char *srow = row_at(src, i1, i2, i3);
        int64_t flat = r * ne0;
        int64_t d[4];
        for (int dim = 0; dim < max_dims; ++dim) {
            d[dim] = flat % dst.ne[dim];
            flat /= dst.ne[dim];
        }
        for (int64_t i = 0; i < ne0; ++i) {
            const char *s = srow + i * src.nb[0];
            char *t = element_at(dst, d[0], d[1], d[2], d[3]);
            if (src.type == dst.type)
                std::memcpy(t, s, type_traits(src.type).type_size);
            else
                store_element(dst.type, t, load_element(src.type, s));
            for (int dim = 0; dim < max_dims && ++d[dim] == dst.ne[dim]; ++dim) d[dim] = 0;
        }
    }
}

// Whether copy_tensor can move src into dst.
bool can_copy(const tensor &src, const tensor &dst) {
    if (src.nelements() != dst.nelements()) return false;
    const bool src_block = is_block_type(src.type), dst_block = is_block_type(dst.type);
    if (!same_shape(src, dst)) {
        // reshaping copies go element by element
        if (src_block || dst_block) return false;
        return src.type == dst.type || (is_float_type(src.type) && is_float_type(dst.type));
    }
    if (src.type == dst.type) return !src_block || (rows_contiguous(src) && rows_contiguous(dst));
    if (src_block &&
        (!rows_contiguous(src) || !has_quant_traits(src.type) || !row_traits_of(src.type).to_float))
        return false;
    if (dst_block &&
        (!rows_contiguous(dst) || !has_quant_traits(dst.type) || !row_traits_of(dst.type).from_float))
        return false;
    return (src_block || is_float_type(src.type)) && (dst_block || is_float_type(dst.type));
}

}  // namespace

void compute_get_rows(const compute_params &p, tensor &dst) {
    const tensor &a = *dst.src[0];    // [n_embd, n_rows, A2, A3]
    const tensor &ids = *dst.src[1];  // i32 [n, B2, B3]
    const int64_t ne0 = a.ne[0];
    float *scratch = thread_scratch(p, ne0);
    for (const auto [i1, i2, i3] : thread_rows(p, dst)) {
        const int64_t id = read_index(ids, i1, i2, i3);
        if (id < 0 || id >= a.ne[1]) {
            p.fail("[get_rows] '" + std::string(dst.name) + "': row id " + std::to_string(id) + " of '" +
                   ids.name + "' is out of range for '" + a.name + "' " + a.shape_str());
            return;
        }
        const char *srow = row_at(a, id, i2 % a.ne[2], i3 % a.ne[3]);
        store_row_any(dst, source_row_as_f32(a, srow, ne0, scratch), row_at(dst, i1, i2, i3), ne0);
    }
}

void compute_set_rows(const compute_params &p, tensor &node) {
    tensor &dst = *node.src[0];        // [ne0, rows, D2, D3], written in place
    const tensor &src = *node.src[1];  // [ne0, n, S2, S3]
    const tensor &ids = *node.src[2];  // i32/i64 [n, I1, I2]
    const int64_t ne0 = src.ne[0];
    float *scratch = thread_scratch(p, ne0);
    for (const auto [i1, i2, i3] : thread_rows(p, src)) {
        const int64_t id = read_index(ids, i1, i2 % ids.ne[1], i3 % ids.ne[2]);
        if (id < 0 || id >= dst.ne[1]) {
            p.fail("[set_rows] '" + std::string(node.name) + "': row id " + std::to_string(id) + " of '" +
                   ids.name + "' is out of range for '" + dst.name + "' " + dst.shape_str());
            return;
        }
        const float *x = source_row_as_f32(src, row_at(src, i1, i2, i3), ne0, scratch);
        store_row_any(dst, x, row_at(dst, id, i2, i3), ne0);
    }
}

// cpy writes into src[1] (a view the node stands for); a cast has no src[1] and writes the node itself.
namespace {
tensor &cpy_destination(tensor &node) {
    return node.src[1] ? *node.src[1] : node;
}
}  // namespace

void compute_cpy(const compute_params &p, tensor &node) {
    copy_tensor(p, *node.src[0], cpy_destination(node));
}

void compute_cont(const compute_params &p, tensor &dst) {
    copy_tensor(p, *dst.src[0], dst);
}

void compute_concat(const compute_params &p, tensor &dst) {
    const tensor &a = *dst.src[0];
    const tensor &b = *dst.src[1];
    const int dim = dst.param_i32(0);
    const size_t elem = type_traits(dst.type).type_size;
    for (const auto [i1, i2, i3] : thread_rows(p, dst)) {
        int64_t i[4] = {0, i1, i2, i3};
        char *drow = row_at(dst, i[1], i[2], i[3]);
        for (i[0] = 0; i[0] < dst.ne[0]; ++i[0]) {
            const bool from_a = i[dim] < a.ne[dim];
            int64_t j[4] = {i[0], i[1], i[2], i[3]};
            if (!from_a) j[dim] -= a.ne[dim];
            const char *s = element_at(from_a ? a : b, j[0], j[1], j[2], j[3]);
            std::memcpy(drow + i[0] * dst.nb[0], s, elem);
        }
    }
}

bool supports_get_rows(const tensor &dst) {
    const tensor *a = dst.src[0];
    const tensor *ids = dst.src[1];
    if (!a || !ids || (ids->type != dtype::i32 && ids->type != dtype::i64)) return false;
    if (!is_float_type(dst.type) || dst.ne[0] != a->ne[0] || dst.ne[1] != ids->ne[0] ||
        dst.ne[2] != ids->ne[1] || dst.ne[3] != ids->ne[2] || ids->ne[3] != 1)
        return false;
    if (dst.ne[2] % a->ne[2] != 0 || dst.ne[3] % a->ne[3] != 0) return false;
    if (is_block_type(a->type))
        return rows_contiguous(*a) && has_quant_traits(a->type) && row_traits_of(a->type).to_float;
    return is_float_type(a->type);
}

bool supports_set_rows(const tensor &node) {
    const tensor *dst = node.src[0];
    const tensor *src = node.src[1];
    const tensor *ids = node.src[2];
    if (!dst || !src || !ids || (ids->type != dtype::i32 && ids->type != dtype::i64)) return false;
    if (!is_float_type(src->type) || src->ne[0] != dst->ne[0] || ids->ne[0] != src->ne[1] ||
        src->ne[2] != dst->ne[2] || src->ne[3] != dst->ne[3] || src->ne[2] % ids->ne[1] != 0 ||
        src->ne[3] % ids->ne[2] != 0 || ids->ne[3] != 1)
        return false;
    if (is_block_type(dst->type))
        return rows_contiguous(*dst) && has_quant_traits(dst->type) && row_traits_of(dst->type).from_float;
    return is_float_type(dst->type);
}

bool supports_cpy(const tensor &node) {
    return node.src[0] && can_copy(*node.src[0], node.src[1] ? *node.src[1] : node);
}

bool supports_cont(const tensor &dst) {
    return dst.src[0] && can_copy(*dst.src[0], dst);
}

bool supports_concat(const tensor &dst) {
    const tensor *a = dst.src[0];
    const tensor *b = dst.src[1];
    const int dim = dst.param_i32(0);
    if (!a || !b || dim < 0 || dim >= max_dims) return false;
    if (a->type != dst.type || b->type != dst.type || is_block_type(dst.type)) return false;
    for (int d = 0; d < max_dims; ++d) {
        const int64_t expected = d == dim ? a->ne[d] + b->ne[d] : a->ne[d];
        if (dst.ne[d] != expected || (d != dim && b->ne[d] != a->ne[d])) return false;
    }
    return true;
}

size_t work_size_get_rows(const tensor &dst, int n_threads) {
    return scratch_size(dst.src[0]->ne[0], n_threads);
}
size_t work_size_set_rows(const tensor &node, int n_threads) {
    return scratch_size(node.src[1]->ne[0], n_threads);
}
size_t work_size_cpy(const tensor &node, int n_threads) {
    return scratch_size(node.src[0]->ne[0], n_threads);
}

}  // namespace weft::cpu
