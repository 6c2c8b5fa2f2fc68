// src/backends/cpu/ssm_conv.h — the causal depthwise convolution over time (ssm_conv: Mamba's,
// Mamba-2's, the gated delta net's and LFM2's short one) over a range of channels, written once in
// plain C++ (ssm_conv_impl.h) and compiled per ISA: the same bits in every build.
//
// Each output is sum_k w[k] in[k] over the channel's last d_conv inputs (the d_conv - 1 of its state,
// oldest first, then the token's own), added in that order from 0 with fma; a channel's state
// advances token by token in each sequence's own order. Nothing is summed across channels, so any
// split of the channels over threads and any batching of a sequence's tokens give the same bits.
#pragma once

#include <cstdint>

namespace weft::cpu {

struct ssm_conv_task {
    const float *x;  // token t's inputs at x + t * x_row (channels contiguous)
    int64_t x_row;
    const float *weight;  // channel c's d_conv taps at weight + c * weight_row, oldest input first
    int64_t weight_row;
    const float *states_in;     // [d_conv - 1, n_ch, columns]: sequence s's window in column column(s)
    float *states_out;          // the same layout: each sequence's window after its tokens
    const int32_t *columns;     // in place: each sequence's column read, then written; null: s's is s
    float *y;                   // [n_ch, n_tokens]
    const int32_t *seq_tokens;  // the tokens of each sequence, in order, sequence by sequence
    const int64_t *seq_begin;   // n_seqs + 1 offsets into seq_tokens
    int64_t n_seqs, n_ch, d_conv;

    int64_t column_in(int64_t s) const { return columns ? columns[2 * s] : s; }
    int64_t column_out(int64_t s) const { return columns ? columns[2 * s + 1] : s; }
};

// Channels go in blocks of this many (one AVX-512 register, two AVX2 ones); a thread's share is
// whole blocks where it can be.
constexpr int64_t ssm_conv_lanes = 16;

// Computes channels [c_begin, c_end) of every sequence: their outputs and their states.
using ssm_conv_channels_fn = void (*)(const ssm_conv_task &a, int64_t c_begin, int64_t c_end);
void ssm_conv_channels_scalar(const ssm_conv_task &a, int64_t c_begin, int64_t c_end);
void ssm_conv_channels_avx2(const ssm_conv_task &a, int64_t c_begin, int64_t c_end);
void ssm_conv_channels_avx512(const ssm_conv_task &a, int64_t c_begin, int64_t c_end);

// The build this CPU runs (scalar under WEFT_FORCE_SCALAR).
ssm_conv_channels_fn best_ssm_conv_channels();

}  // namespace weft::cpu
