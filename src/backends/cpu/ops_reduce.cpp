// src/backends/cpu/ops_reduce.cpp — row reductions: argmax, sum_rows, mean.
#include <cmath>
#include <limits>

#include "backends/cpu/kernels.h"
#include "backends/cpu/rows.h"

namespace weft::cpu {

namespace {

double row_sum(const tensor &a, int64_t i1, int64_t i2, int64_t i3) {
    const char *row = row_at(a, i1, i2, i3);
    double sum = 0.0;
    for (int64_t i = 0; i < a.ne[0]; ++i) sum += double(load_element(a.type, row + i * a.nb[0]));
    return sum;
}

template <class Finish>
void reduce_rows(const compute_params &p, tensor &dst, Finish finish) {
    const tensor &a = *dst.src[0];
    for (const auto [i1, i2, i3] : thread_rows(p, a))
        store_element(dst.type, element_at(dst, 0, i1, i2, i3), float(finish(row_sum(a, i1, i2, i3))));
}

}  // namespace

// The first index of the largest value of each row (NaNs never win).
void compute_argmax(const compute_params &p, tensor &dst) {
    const tensor &a = *dst.src[0];
    const index_range rows = split_range(a.nrows(), p.ith, p.nth);
    auto *out = static_cast<int32_t *>(dst.data);
    for (int64_t r = rows.begin; r < rows.end; ++r) {
        int64_t i1, i2, i3;
        unravel_row(r, a.ne, i1, i2, i3);
        const char *row = row_at(a, i1, i2, i3);
        float best = -std::numeric_limits<float>::infinity();
        int32_t best_index = 0;
        for (int64_t i = 0; i < a.ne[0]; ++i) {
            const float v = load_element(a.type, row + i * a.nb[0]);
            if (v > best) {
                best = v;
                best_index = int32_t(i);
            }
        }
        out[r] = best_index;
    }
}

void compute_sum_rows(const compute_params &p, tensor &dst) {
    reduce_rows(p, dst, [](double sum) { return sum; });
}

void compute_mean(const compute_params &p, tensor &dst) {
    const double n = double(dst.src[0]->ne[0]);
    reduce_rows(p, dst, [n](double sum) { return sum / n; });
}

bool supports_argmax(const tensor &dst) {
    const tensor *a = dst.src[0];
    return a && is_float_type(a->type) && dst.type == dtype::i32 && dst.is_contiguous() &&
           dst.nelements() == a->nrows() && a->ne[0] <= std::numeric_limits<int32_t>::max();
}

bool supports_sum_rows(const tensor &dst) {
    const tensor *a = dst.src[0];
    return a && is_float_type(a->type) && is_float_type(dst.type) && dst.ne[0] == 1 &&
           dst.ne[1] == a->ne[1] && dst.ne[2] == a->ne[2] && dst.ne[3] == a->ne[3];
}

}  // namespace weft::cpu
