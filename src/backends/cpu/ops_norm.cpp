// src/backends/cpu/ops_norm.cpp — row normalisations: rms_norm, norm (mean/variance), l2_norm and
// soft_max.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/kernels.h"
#include "backends/cpu/rows.h"

namespace weft::cpu {

namespace {

// The sum of squares of each of R rows of n floats (rows[j]), into sums[j]: double(x * x) added in
// double element by element, as the reference engine does. A row's adds depend one on the next (a
// double add's latency per element, 4 cycles on Zen 5), so R rows go side by side: R chains in flight,
// each row's sum still the same bits.
template <int R>
void sums_of_squares(const float *const *rows, int64_t n, double *sums) {
    double s[R] = {};
    for (int64_t i = 0; i < n; ++i)
        for (int j = 0; j < R; ++j) s[j] += double(rows[j][i] * rows[j][i]);
    for (int j = 0; j < R; ++j) sums[j] = s[j];
}

// Each row of dst = its row of src[0] times scale_of(sum of its squares, n). Contiguous f32 rows are
// summed rows_at_once at a time (sums_of_squares); any other layout row by row in the same order.
template <class ScaleOf>
void scale_rows_by_sum_of_squares(const compute_params &p, tensor &dst, ScaleOf scale_of) {
    const tensor &a = *dst.src[0];
    const int64_t n = dst.ne[0];
    const bool f32_rows = a.type == dtype::f32 && a.nb[0] == sizeof(float) && dst.type == dtype::f32 &&
                          dst.nb[0] == sizeof(float);
    if (!f32_rows) {
        map_rows(p, dst, [&](const float *x, float *out, int64_t, int64_t, int64_t, int64_t, float *) {
            double sum_sq = 0.0;
            sums_of_squares<1>(&x, n, &sum_sq);
            const float scale = scale_of(sum_sq, n);
            for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
        });
        return;
    }
    constexpr int rows_at_once = 8;
    const float *x[rows_at_once];
    float *out[rows_at_once];
    int held = 0;
    auto finish = [&] {
        double sums[rows_at_once];
        if (held == rows_at_once)
            sums_of_squares<rows_at_once>(x, n, sums);
        else
            for (int j = 0; j < held; ++j) sums_of_squares<1>(x + j, n, sums + j);
        for (int j = 0; j < held; ++j) {
            const float scale = scale_of(sums[j], n);
            for (int64_t i = 0; i < n; ++i) out[j][i] = x[j][i] * scale;
        }
        held = 0;
    };
    for (const auto [i1, i2, i3] : thread_rows(p, dst)) {
        x[held] = reinterpret_cast<const float *>(row_at(a, i1, i2, i3));
        out[held] = reinterpret_cast<float *>(row_at(dst, i1, i2, i3));
        if (++held == rows_at_once) finish();
    }
    finish();
}

}  // namespace

void compute_rms_norm(const compute_params &p, tensor &dst) {
    const float eps = dst.param_f32(0);
    scale_rows_by_sum_of_squares(p, dst, [eps](double sum_sq, int64_t n) {
        const float mean_sq = float(sum_sq / double(n));
        return 1.0f / std::sqrt(mean_sq + eps);
    });
}

void compute_norm(const compute_params &p, tensor &dst) {
    const float eps = dst.param_f32(0);
    map_rows(p, dst, [eps](const float *x, float *out, int64_t n, int64_t, int64_t, int64_t, float *) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += double(x[i]);
        const float mean = float(sum / double(n));
        double sum_sq = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            const float centered = x[i] - mean;
            out[i] = centered;
            sum_sq += double(centered * centered);
        }
        const float scale = 1.0f / std::sqrt(float(sum_sq / double(n)) + eps);
        for (int64_t i = 0; i < n; ++i) out[i] *= scale;
    });
}

// the reference engine's: the squares summed in double, one float scale 1 / max(norm, eps)
void compute_l2_norm(const compute_params &p, tensor &dst) {
    const float eps = dst.param_f32(0);
    scale_rows_by_sum_of_squares(
        p, dst, [eps](double sum_sq, int64_t) { return 1.0f / std::max(std::sqrt(float(sum_sq)), eps); });
}

void compute_soft_max(const compute_params &p, tensor &dst) {
    const tensor *mask = dst.src[1];
    const float scale = dst.param_f32(0);
    map_rows(
        p, dst,
        [&](const float *x, float *out, int64_t n, int64_t i1, int64_t i2, int64_t i3, float *mask_scratch) {
            if (mask) {
                const float *m = row_as_f32(
                    mask->type, row_at(*mask, i1 % mask->ne[1], i2 % mask->ne[2], i3 % mask->ne[3]),
                    mask->nb[0], n, mask_scratch);
                for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale + m[i];
            } else {
                for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
            }
            float max = -std::numeric_limits<float>::infinity();
            for (int64_t i = 0; i < n; ++i) max = std::max(max, out[i]);
            if (max == -std::numeric_limits<float>::infinity()) {
                // every position masked: nothing to attend to, the row is zeros rather than 0/0
                for (int64_t i = 0; i < n; ++i) out[i] = 0.0f;
                return;
            }
            double sum = 0.0;
            for (int64_t i = 0; i < n; ++i) {
                const float e = std::exp(out[i] - max);
                out[i] = e;
                sum += double(e);
            }
            const float inv_sum = float(1.0 / sum);
            for (int64_t i = 0; i < n; ++i) out[i] *= inv_sum;
        });
}

bool supports_soft_max(const tensor &dst) {
    const tensor *a = dst.src[0];
    const tensor *mask = dst.src[1];
    if (!a || !is_float_type(a->type) || dst.type != dtype::f32 || !same_shape(*a, dst)) return false;
    if (!mask) return true;
    return (mask->type == dtype::f32 || mask->type == dtype::f16) && mask->ne[0] >= a->ne[0] &&
           mask->ne[1] > 0 && mask->ne[2] > 0 && mask->ne[3] > 0 && a->ne[2] % mask->ne[2] == 0 &&
           a->ne[3] % mask->ne[3] == 0;
}

}  // namespace weft::cpu
