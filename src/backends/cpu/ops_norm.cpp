// src/backends/cpu/ops_norm.cpp — row normalisations: rms_norm, norm (mean/variance), l2_norm and
// soft_max.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/kernels.h"
#include "backends/cpu/rows.h"

namespace weft::cpu {

void compute_rms_norm(const compute_params &p, tensor &dst) {
    const float eps = dst.param_f32(0);
    map_rows(p, dst, [eps](const float *x, float *out, int64_t n, int64_t, int64_t, int64_t, float *) {
        double sum_sq = 0.0;
        for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i] * x[i]);
        const float mean_sq = float(sum_sq / double(n));
        const float scale = 1.0f / std::sqrt(mean_sq + eps);
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
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
    map_rows(p, dst, [eps](const float *x, float *out, int64_t n, int64_t, int64_t, int64_t, float *) {
        double sum_sq = 0.0;
        for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i] * x[i]);
        const float scale = 1.0f / std::max(std::sqrt(float(sum_sq)), eps);
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
    });
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
