// src/backends/cpu/ops_rope.cpp — rotary position embedding (normal and NeoX pairing, YaRN scaling).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "backends/cpu/kernels.h"
#include "backends/cpu/rope_rotate_impl.h"
#include "backends/cpu/rows.h"
#include "backends/cpu/simd_level.h"
#include "weft/core/ops.h"

WEFT_DEFINE_ROPE_ROTATE(scalar)

namespace weft::cpu {

namespace {

// YaRN: the dimension whose wavelength makes n_rot full turns over the training context.
float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return float(n_dims) * std::log(float(n_ctx_orig) / (n_rot * 2.0f * std::numbers::pi_v<float>)) /
           (2.0f * std::log(base));
}

// The range of pair indices over which YaRN ramps from extrapolation to interpolation.
void yarn_corr_dims(const rope_params &rp, float dims[2]) {
    const float start = std::floor(yarn_corr_dim(rp.n_dims, rp.n_ctx_orig, rp.beta_fast, rp.freq_base));
    const float end = std::ceil(yarn_corr_dim(rp.n_dims, rp.n_ctx_orig, rp.beta_slow, rp.freq_base));
    dims[0] = std::max(0.0f, start);
    dims[1] = std::min(float(rp.n_dims - 1), end);
}

// 1 below `low` (pure extrapolation), 0 above `high`, linear in between.
float yarn_ramp(float low, float high, int64_t pair) {
    const float y = (float(pair) - low) / std::max(0.001f, high - low);
    return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

// cos and sin (times the attention magnitude scale) of every rotated pair at position pos:
// theta_i = pos * base^(-2i/n_dims) / freq_factor_i, interpolated by freq_scale (YaRN mixes the two).
void fill_rope_cache(float pos, const rope_params &rp, const float *freq_factors, const float corr_dims[2],
                     float *cos_sin) {
    const float theta_scale = std::pow(rp.freq_base, -2.0f / float(rp.n_dims));
    float theta_base = pos;  // multiplied pair by pair, as the established engine does
    for (int64_t i = 0; i < rp.n_dims / 2; ++i) {
        const float theta_extrap = theta_base / (freq_factors ? freq_factors[i] : 1.0f);
        const float theta_interp = rp.freq_scale * theta_extrap;
        float theta = theta_interp;
        float mscale = rp.attn_factor;
        if (rp.ext_factor != 0.0f) {
            const float ramp_mix = yarn_ramp(corr_dims[0], corr_dims[1], i) * rp.ext_factor;
            // contracted as the reference engine's compiler does
            theta = std::fma(theta_interp, 1.0f - ramp_mix, theta_extrap * ramp_mix);
            mscale *= std::fma(0.1f, std::log(1.0f / rp.freq_scale), 1.0f);
        }
        cos_sin[2 * i] = std::cos(theta) * mscale;
        cos_sin[2 * i + 1] = std::sin(theta) * mscale;
        theta_base *= theta_scale;
    }
}

}  // namespace

void compute_rope(const compute_params &p, tensor &dst) {
    const tensor &a = *dst.src[0];
    const tensor &pos = *dst.src[1];
    const tensor *factors = dst.src[2];
    const rope_params rp = rope_params_of(dst);
    const int64_t ne0 = dst.ne[0];
    const int64_t n_dims = rp.n_dims;
    const int64_t half = n_dims / 2;
    const bool neox = rp.mode == rope_mode_neox;
    float corr_dims[2] = {0.0f, 0.0f};
    yarn_corr_dims(rp, corr_dims);
    const auto *freq_factors = factors ? static_cast<const float *>(factors->data) : nullptr;
    const rope_rotate_fn rotate = best_of({rope_rotate_scalar, rope_rotate_avx2, rope_rotate_avx512});

    float *scratch = thread_scratch(p, 2 * ne0 + n_dims);
    float *cos_sin = scratch + 2 * ne0;
    int64_t cached_token = -1, cached_i3 = -1;
    for_each_result_row(p, dst, scratch + ne0, [&](int64_t i1, int64_t i2, int64_t i3, float *out) {
        if (i2 != cached_token || i3 != cached_i3) {
            const auto position = *reinterpret_cast<const int32_t *>(element_at(pos, i2, 0, 0, 0));
            fill_rope_cache(float(position), rp, freq_factors, corr_dims, cos_sin);
            cached_token = i2;
            cached_i3 = i3;
        }
        const float *x = row_as_f32(a.type, row_at(a, i1, i2, i3), a.nb[0], ne0, scratch);
        rotate(x, cos_sin, out, half, neox);
        for (int64_t i = n_dims; i < ne0; ++i) out[i] = x[i];
    });
}

bool supports_rope(const tensor &dst) {
    const tensor *a = dst.src[0];
    const tensor *pos = dst.src[1];
    const tensor *factors = dst.src[2];
    if (!a || !pos || !is_float_type(a->type) || !is_float_type(dst.type) || !same_shape(*a, dst))
        return false;
    const rope_params rp = rope_params_of(dst);
    if (rp.mode != rope_mode_normal && rp.mode != rope_mode_neox) return false;
    if (rp.n_dims <= 0 || rp.n_dims % 2 != 0 || rp.n_dims > a->ne[0]) return false;
    if (pos->type != dtype::i32 || pos->ne[0] < a->ne[2]) return false;
    if (factors &&
        (factors->type != dtype::f32 || !factors->is_contiguous() || factors->ne[0] < rp.n_dims / 2))
        return false;
    return true;
}

size_t work_size_rope(const tensor &dst, int n_threads) {
    return scratch_size(2 * dst.ne[0] + rope_params_of(dst).n_dims, n_threads);
}

}  // namespace weft::cpu
