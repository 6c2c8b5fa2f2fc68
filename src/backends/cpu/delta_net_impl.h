// src/backends/cpu/delta_net_impl.h — the gated delta net of one value head over every sequence of a
// call, written once in plain C++ and compiled per ISA (delta_net*.cpp). Every loop runs over
// independent elements (vectorized: each element sees the same operations in every build), with fma
// explicit, so every build gives the same bits.
//
// Block form (the default; the WY representation of the recurrence). A sequence's tokens go in
// blocks of C = 64 counted from its first token; the state holds S0, the state before the current
// block, and for each of the block's tokens so far its key k_s, its write u_s and G_s = g_0 + ... +
// g_s (ops.h: the layout). Token r of the block, with gamma_r = e^G_r:
//   u_r = beta_r (v_r - gamma_r S0^T k_r) - sum_{s < r} beta_r e^(G_r - G_s) (k_r . k_s) u_s
//   y_r = scale gamma_r S0^T q_r + sum_{s <= r} scale e^(G_r - G_s) (q_r . k_s) u_s
// and when the block is whole: S0 = gamma_{C-1} S0 + sum_s e^(G_{C-1} - G_s) k_s u_s^T.
// Each value is computed by one sequence of operations that reads only S0 and the block's tokens up
// to its own: a dot product sums over its index in order (vectorized over the outputs), the sums
// over s run s = 0, 1, ... So a token's bits do not depend on how the sequence is cut into calls:
// a prompt in one call, in pieces or token by token (decoding) gives the same bits, and a call
// computes the rows of a block together (S0^T k and S0^T q of several tokens in one pass over S0).
//
// Recurrent form (delta_net_form::recurrent, the reference the tests hold the block form to): the
// state first folded to the current state (S0 of a block of the tokens so far), then per token:
//   S = S e^g;  u = beta (v - S^T k);  S = S + k u^T;  y = scale S^T q
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/canonical_math.h"

namespace weft::cpu {

// Columns [col_begin, col_end) of one value head: its tokens sequence by sequence (token lists by
// sequence), those columns of its states copied from the inputs' to the result's and updated there.
// A value column's outputs and state depend on no other value column: each is computed by the same
// operations whatever columns a task takes (partition.h: the threads share heads out in pieces).
// The block's keys, G_s and count, which every column reads and writes, are the result's in the
// task of the head's first columns and a copy in block_copy in the others, so no two tasks write one
// float. Scratch: delta_net_scratch_floats(d_v) floats and delta_net_block_copy_floats(d_k), each
// 64-byte aligned.
struct delta_net_head_task {
    const float *q, *k, *v, *g, *beta;             // first element of each input
    int64_t q_row, k_row, v_row, g_row, beta_row;  // row strides in floats (a token's column)
    float *y;                                      // [n_ch, n_tokens]
    const float *states_in;  // the inputs' (ops.h's layout), never the result's: another task may still copy
                             // the block a head's first task overwrites
    float *states;           // the result's
    const int32_t *seq_tokens;  // the tokens of each sequence, in order, sequence by sequence
    const int64_t *seq_begin;   // n_seqs + 1 offsets into seq_tokens
    int64_t n_seqs, d_k, d_v, n_ch;
    int64_t state_floats;  // of one head and sequence (gated_delta_net_state_floats)
    int64_t n_head_v;
    int64_t head, head_k;        // the value head, and the q/k head it reads
    int64_t col_begin, col_end;  // its value columns computed, of [0, d_v)
    float scale;
    bool recurrent;  // the recurrent form (else the block form)
    float *scratch;
    float *block_copy;
};

constexpr int64_t delta_net_chunk = 64;

inline int64_t delta_net_scratch_floats(int64_t d_v) {
    constexpr int64_t c = delta_net_chunk;
    // sk, sq: c rows of d_v; kk, qk, decay: c; u, y: d_v; the rows' input pointers (2 c)
    return 2 * c * d_v + 3 * c + 2 * d_v + 2 * c * int64_t(sizeof(void *) / sizeof(float));
}
// The block's keys [d_k][C], G_s [C] and count, as the state lays them out.
inline int64_t delta_net_block_copy_floats(int64_t d_k) {
    return d_k * delta_net_chunk + delta_net_chunk + 1;
}

namespace {  // internal linkage: one copy per ISA build

// One head's state of one sequence (ops.h's layout) as a task sees it: its columns of S0 and of the
// writes (rows d_v apart, starting at the task's first column), the block's keys, G_s and count.
struct delta_net_state {
    float *s0;     // [d_k][d_v]: s0[i d_v + j] = S0[i, col_begin + j]
    float *kt;     // [d_k][C]: kt[i C + s] = k_s[i]
    float *us;     // [C][d_v]: us[s d_v + j] = u_s[col_begin + j]
    float *cum;    // [C]: G_s
    float *count;  // the block's tokens so far (right after G_s)
    int64_t row;   // d_v: the stride of S0's and the writes' rows
};

// Copies the task's part of sequence seq's state from the inputs' to the result's (the block's
// keys, G_s and count to block_copy in a task that does not compute the head's first columns) and
// returns it.
inline delta_net_state delta_net_open_state(const delta_net_head_task &a, int64_t seq) {
    constexpr int64_t c = delta_net_chunk;
    const int64_t d_k = a.d_k, d_v = a.d_v, offset = (seq * a.n_head_v + a.head) * a.state_floats;
    const float *in = a.states_in + offset;
    float *out = a.states + offset;
    const int64_t kt_at = d_k * d_v, us_at = kt_at + d_k * c, cum_at = us_at + c * d_v;
    const bool first = a.col_begin == 0;
    if (first && a.col_end == d_v) {
        std::memcpy(out, in, size_t(a.state_floats) * sizeof(float));
    } else {
        const auto columns = size_t(a.col_end - a.col_begin) * sizeof(float);
        for (int64_t i = 0; i < d_k; ++i)
            std::memcpy(out + i * d_v + a.col_begin, in + i * d_v + a.col_begin, columns);
        for (int64_t s = 0; s < c; ++s)
            std::memcpy(out + us_at + s * d_v + a.col_begin, in + us_at + s * d_v + a.col_begin, columns);
        if (first) {
            std::memcpy(out + kt_at, in + kt_at, size_t(d_k * c) * sizeof(float));
            std::memcpy(out + cum_at, in + cum_at, size_t(a.state_floats - cum_at) * sizeof(float));
        } else {
            std::memcpy(a.block_copy, in + kt_at, size_t(d_k * c) * sizeof(float));
            std::memcpy(a.block_copy + d_k * c, in + cum_at, size_t(c + 1) * sizeof(float));
        }
    }
    float *block = first ? out + kt_at : a.block_copy;
    float *cum = first ? out + cum_at : block + d_k * c;
    return {out + a.col_begin, block, out + us_at + a.col_begin, cum, cum + c, d_v};
}

// x[0, n) += f * src[0, n) (x never overlaps src)
inline void delta_net_axpy(float *__restrict__ x, const float *__restrict__ src, float f, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = std::fma(src[i], f, x[i]);
}

// out[r][j] = sum_i s0[i][j] x_r[i] for j < w (s0's rows `row` floats apart, out's w), summed over i
// in order from 0 (fma), for n rows x_r; four rows at a time share each pass over s0.
inline void delta_net_state_times(const float *__restrict__ s0, int64_t row_stride, const float *const *x,
                                  int64_t n, float *__restrict__ out, int64_t d_k, int64_t w) {
    std::memset(out, 0, size_t(n * w) * sizeof(float));
    int64_t r = 0;
    for (; r + 4 <= n; r += 4) {
        float *__restrict__ o0 = out + r * w;
        float *__restrict__ o1 = o0 + w;
        float *__restrict__ o2 = o1 + w;
        float *__restrict__ o3 = o2 + w;
        const float *x0 = x[r], *x1 = x[r + 1], *x2 = x[r + 2], *x3 = x[r + 3];
        for (int64_t i = 0; i < d_k; ++i) {
            const float *__restrict__ row = s0 + i * row_stride;
            const float a0 = x0[i], a1 = x1[i], a2 = x2[i], a3 = x3[i];
            for (int64_t j = 0; j < w; ++j) {
                const float s = row[j];
                o0[j] = std::fma(s, a0, o0[j]);
                o1[j] = std::fma(s, a1, o1[j]);
                o2[j] = std::fma(s, a2, o2[j]);
                o3[j] = std::fma(s, a3, o3[j]);
            }
        }
    }
    for (; r < n; ++r)
        for (int64_t i = 0; i < d_k; ++i) delta_net_axpy(out + r * w, s0 + i * row_stride, x[r][i], w);
}

// S0 = gamma_{n-1} S0 + sum_{s < n} e^(G_{n-1} - G_s) k_s u_s^T over the block's first n tokens (the
// state after them), and the block emptied (its slots zeroed: the state is a function of the tokens);
// the w columns of the task.
inline void delta_net_fold(const delta_net_state &st, int64_t n, int64_t d_k, int64_t w, float *decay) {
    constexpr int64_t c = delta_net_chunk;
    const float last = st.cum[n - 1], gamma_last = exp_canonical(last);
    for (int64_t s = 0; s < n; ++s) decay[s] = exp_canonical(last - st.cum[s]);
    for (int64_t i = 0; i < d_k; ++i) {
        float *__restrict__ row = st.s0 + i * st.row;
        for (int64_t j = 0; j < w; ++j) row[j] *= gamma_last;
        for (int64_t s = 0; s < n; ++s)
            delta_net_axpy(row, st.us + s * st.row, decay[s] * st.kt[i * c + s], w);
    }
    std::memset(st.kt, 0, size_t(d_k * c) * sizeof(float));
    for (int64_t s = 0; s < c; ++s) std::memset(st.us + s * st.row, 0, size_t(w) * sizeof(float));
    std::memset(st.cum, 0, size_t(c + 1) * sizeof(float));  // G_s and the count
}

// Tokens tok[0, n) of one sequence, the block's tokens first + 0 .. first + n - 1 (first + n <= C).
inline void delta_net_block_rows(const delta_net_head_task &a, const delta_net_state &st, const int32_t *tok,
                                 int64_t first, int64_t n) {
    constexpr int64_t c = delta_net_chunk;
    const int64_t d_k = a.d_k, d_v = a.d_v, w = a.col_end - a.col_begin;
    float *sk = a.scratch;                                    // [n][w]: S0^T k_r
    float *sq = sk + c * d_v;                                 // [n][w]: S0^T q_r
    float *kk = sq + c * d_v;                                 // [c]: k_r . k_s
    float *qk = kk + c;                                       // [c]: q_r . k_s
    float *decay = qk + c;                                    // [c]: e^(G_r - G_s)
    float *u = decay + c;                                     // [w]
    float *y = u + d_v;                                       // [w]
    auto **rows = reinterpret_cast<const float **>(y + d_v);  // 2 n pointers (an even float offset)
    auto k_of = [&](int64_t t) { return a.k + t * a.k_row + a.head_k * d_k; };
    auto q_of = [&](int64_t t) { return a.q + t * a.q_row + a.head_k * d_k; };

    float running = first > 0 ? st.cum[first - 1] : 0.0f;
    for (int64_t m = 0; m < n; ++m) {
        const int64_t r = first + m, t = tok[m];
        running += a.g[t * a.g_row + a.head];
        st.cum[r] = running;
        const float *kr = k_of(t);
        for (int64_t i = 0; i < d_k; ++i) st.kt[i * c + r] = kr[i];
        rows[m] = kr;
        rows[n + m] = q_of(t);
    }
    delta_net_state_times(st.s0, st.row, rows, n, sk, d_k, w);
    delta_net_state_times(st.s0, st.row, rows + n, n, sq, d_k, w);

    for (int64_t m = 0; m < n; ++m) {
        const int64_t r = first + m, t = tok[m];
        // the Gram rows k_r . k_s (s < r) and q_r . k_s (s <= r), over i in order, in whole lanes of 16
        const int64_t width = std::min(c, (r / 16 + 1) * 16);
        std::memset(kk, 0, size_t(width) * sizeof(float));
        std::memset(qk, 0, size_t(width) * sizeof(float));
        const float *kr = k_of(t), *qr = q_of(t);
        for (int64_t i = 0; i < d_k; ++i) {
            const float *__restrict__ slots = st.kt + i * c;
            const float ki = kr[i], qi = qr[i];
            for (int64_t s = 0; s < width; ++s) {
                kk[s] = std::fma(slots[s], ki, kk[s]);
                qk[s] = std::fma(slots[s], qi, qk[s]);
            }
        }
        const float cum_r = st.cum[r], gamma = exp_canonical(cum_r);
        const float beta = a.beta[t * a.beta_row + a.head];
        for (int64_t s = 0; s <= r; ++s) decay[s] = exp_canonical(cum_r - st.cum[s]);
        const float *vr = a.v + t * a.v_row + a.head * d_v + a.col_begin;
        const float *sk_r = sk + m * w, *sq_r = sq + m * w;
        for (int64_t j = 0; j < w; ++j) u[j] = beta * std::fma(-gamma, sk_r[j], vr[j]);
        for (int64_t s = 0; s < r; ++s) delta_net_axpy(u, st.us + s * st.row, -(beta * decay[s] * kk[s]), w);
        std::memcpy(st.us + r * st.row, u, size_t(w) * sizeof(float));
        const float to_y = a.scale * gamma;
        for (int64_t j = 0; j < w; ++j) y[j] = to_y * sq_r[j];
        for (int64_t s = 0; s <= r; ++s) delta_net_axpy(y, st.us + s * st.row, a.scale * decay[s] * qk[s], w);
        std::memcpy(a.y + t * a.n_ch + a.head * d_v + a.col_begin, y, size_t(w) * sizeof(float));
    }
    *st.count = float(first + n);
    if (first + n == c) delta_net_fold(st, c, d_k, w, decay);
}

// The recurrence on the current state (no block pending), one token.
inline void delta_net_recurrent_token(const delta_net_head_task &a, const delta_net_state &st, int32_t t) {
    const int64_t d_k = a.d_k, d_v = a.d_v, w = a.col_end - a.col_begin;
    const float *k = a.k + t * a.k_row + a.head_k * d_k;
    const float *q = a.q + t * a.q_row + a.head_k * d_k;
    const float *v = a.v + t * a.v_row + a.head * d_v + a.col_begin;
    const float decay = exp_canonical(a.g[t * a.g_row + a.head]);
    const float beta = a.beta[t * a.beta_row + a.head];
    float *u = a.scratch, *y = u + d_v;
    std::memset(u, 0, size_t(w) * sizeof(float));
    for (int64_t i = 0; i < d_k; ++i) {
        float *__restrict__ row = st.s0 + i * st.row;
        for (int64_t j = 0; j < w; ++j) row[j] *= decay;
        delta_net_axpy(u, row, k[i], w);
    }
    for (int64_t j = 0; j < w; ++j) u[j] = beta * (v[j] - u[j]);
    std::memset(y, 0, size_t(w) * sizeof(float));
    for (int64_t i = 0; i < d_k; ++i) {
        float *__restrict__ row = st.s0 + i * st.row;
        delta_net_axpy(row, u, k[i], w);
        delta_net_axpy(y, row, q[i], w);
    }
    float *out = a.y + t * a.n_ch + a.head * d_v + a.col_begin;
    for (int64_t j = 0; j < w; ++j) out[j] = a.scale * y[j];
}

inline void delta_net_head_impl(const delta_net_head_task &a) {
    constexpr int64_t c = delta_net_chunk;
    const int64_t w = a.col_end - a.col_begin;
    for (int64_t s = 0; s < a.n_seqs; ++s) {
        const delta_net_state st = delta_net_open_state(a, s);
        const int32_t *tok = a.seq_tokens + a.seq_begin[s];
        const int64_t n = a.seq_begin[s + 1] - a.seq_begin[s];
        if (n == 0) continue;
        // the count as stored (a damaged one is taken as an empty block: never outside the slots)
        const float stored = *st.count;
        int64_t pending = stored >= 1.0f && stored < float(c) ? int64_t(stored) : 0;
        if (a.recurrent) {
            if (pending > 0) delta_net_fold(st, pending, a.d_k, w, a.scratch);
            *st.count = 0.0f;
            for (int64_t m = 0; m < n; ++m) delta_net_recurrent_token(a, st, tok[m]);
            continue;
        }
        for (int64_t done = 0; done < n;) {
            const int64_t take = std::min(n - done, c - pending);
            delta_net_block_rows(a, st, tok + done, pending, take);
            done += take;
            pending = (pending + take) % c;
        }
    }
}

}  // namespace

// The per-ISA entry points (delta_net*.cpp).
void delta_net_head_scalar(const delta_net_head_task &a);
void delta_net_head_avx2(const delta_net_head_task &a);
void delta_net_head_avx512(const delta_net_head_task &a);

}  // namespace weft::cpu

#define WEFT_DEFINE_DELTA_NET(isa)                                                  \
    void weft::cpu::delta_net_head_##isa(const weft::cpu::delta_net_head_task &a) { \
        delta_net_head_impl(a);                                                     \
    }
