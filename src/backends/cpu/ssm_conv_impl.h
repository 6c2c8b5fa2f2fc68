// src/backends/cpu/ssm_conv_impl.h — the body of ssm_conv.h, included once per ISA build
// (ssm_conv*.cpp). A block of ssm_conv_lanes channels keeps its weights and window in lane arrays
// (registers where the width is known at compile time) and walks each sequence's tokens: a token's
// inputs and outputs are contiguous rows over the channels, so every step is a few vector fmas.
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/cpu/ssm_conv.h"

namespace weft::cpu {
namespace {  // internal linkage: one copy per ISA build

// The widest convolution the lane arrays hold; wider ones go channel by channel (the same sums).
constexpr int64_t ssm_conv_max_lane_width = 64;

// One block of n channels from c (n = ssm_conv_lanes where full). width: d_conv when known at
// compile time (the loops unroll and the window stays in registers), 0 for the task's.
template <int64_t width, bool full>
inline void ssm_conv_block(const ssm_conv_task &a, int64_t c, int64_t n_used) {
    constexpr int64_t lanes = ssm_conv_lanes;
    constexpr int64_t taps_max = width > 0 ? width : ssm_conv_max_lane_width;
    const int64_t d = width > 0 ? width : a.d_conv, n = full ? lanes : n_used;
    float w[taps_max][lanes], window[taps_max][lanes], acc[lanes], in[lanes];
    for (int64_t k = 0; k < d; ++k)
        for (int64_t l = 0; l < n; ++l) w[k][l] = a.weight[(c + l) * a.weight_row + k];
    for (int64_t s = 0; s < a.n_seqs; ++s) {
        const float *state_in = a.states_in + (a.column_in(s) * a.n_ch + c) * (d - 1);
        for (int64_t k = 0; k + 1 < d; ++k)
            for (int64_t l = 0; l < n; ++l) window[k][l] = state_in[l * (d - 1) + k];
        for (int64_t i = a.seq_begin[s]; i < a.seq_begin[s + 1]; ++i) {
            const int64_t t = a.seq_tokens[i];
            const float *__restrict__ x = a.x + t * a.x_row + c;
            float *__restrict__ y = a.y + t * a.n_ch + c;
            for (int64_t l = 0; l < n; ++l) in[l] = x[l];
            for (int64_t l = 0; l < n; ++l) acc[l] = 0.0f;
            for (int64_t k = 0; k + 1 < d; ++k)
                for (int64_t l = 0; l < n; ++l) acc[l] = std::fma(w[k][l], window[k][l], acc[l]);
            for (int64_t l = 0; l < n; ++l) acc[l] = std::fma(w[d - 1][l], in[l], acc[l]);
            for (int64_t l = 0; l < n; ++l) y[l] = acc[l];
            for (int64_t k = 0; k + 2 < d; ++k)
                for (int64_t l = 0; l < n; ++l) window[k][l] = window[k + 1][l];
            if (d > 1)
                for (int64_t l = 0; l < n; ++l) window[d - 2][l] = in[l];
        }
        float *state_out = a.states_out + (a.column_out(s) * a.n_ch + c) * (d - 1);
        for (int64_t k = 0; k + 1 < d; ++k)
            for (int64_t l = 0; l < n; ++l) state_out[l * (d - 1) + k] = window[k][l];
    }
}

// A channel at a time over its state in the result, for widths past the lane arrays: the same sums.
inline void ssm_conv_channel_wide(const ssm_conv_task &a, int64_t c) {
    const int64_t d = a.d_conv;
    const float *w = a.weight + c * a.weight_row;
    for (int64_t s = 0; s < a.n_seqs; ++s) {
        float *window = a.states_out + (a.column_out(s) * a.n_ch + c) * (d - 1);
        const float *state_in = a.states_in + (a.column_in(s) * a.n_ch + c) * (d - 1);
        for (int64_t k = 0; k + 1 < d; ++k) window[k] = state_in[k];
        for (int64_t i = a.seq_begin[s]; i < a.seq_begin[s + 1]; ++i) {
            const int64_t t = a.seq_tokens[i];
            const float x = a.x[t * a.x_row + c];
            float acc = 0.0f;
            for (int64_t k = 0; k + 1 < d; ++k) acc = std::fma(w[k], window[k], acc);
            a.y[t * a.n_ch + c] = std::fma(w[d - 1], x, acc);
            for (int64_t k = 0; k + 2 < d; ++k) window[k] = window[k + 1];
            window[d - 2] = x;
        }
    }
}

template <int64_t width>
inline void ssm_conv_blocks(const ssm_conv_task &a, int64_t c_begin, int64_t c_end) {
    int64_t c = c_begin;
    for (; c + ssm_conv_lanes <= c_end; c += ssm_conv_lanes)
        ssm_conv_block<width, true>(a, c, ssm_conv_lanes);
    if (c < c_end) ssm_conv_block<width, false>(a, c, c_end - c);
}

inline void ssm_conv_channels_impl(const ssm_conv_task &a, int64_t c_begin, int64_t c_end) {
    switch (a.d_conv) {  // the published widths: LFM2's 3, Mamba's and the delta nets' 4
        case 2:
            return ssm_conv_blocks<2>(a, c_begin, c_end);
        case 3:
            return ssm_conv_blocks<3>(a, c_begin, c_end);
        case 4:
            return ssm_conv_blocks<4>(a, c_begin, c_end);
        default:
            break;
    }
    if (a.d_conv <= ssm_conv_max_lane_width) return ssm_conv_blocks<0>(a, c_begin, c_end);
    for (int64_t c = c_begin; c < c_end; ++c) ssm_conv_channel_wide(a, c);
}

}  // namespace
}  // namespace weft::cpu

#define WEFT_DEFINE_SSM_CONV(isa)                                                               \
    void weft::cpu::ssm_conv_channels_##isa(const weft::cpu::ssm_conv_task &a, int64_t c_begin, \
                                            int64_t c_end) {                                    \
        ssm_conv_channels_impl(a, c_begin, c_end);                                              \
    }
