// src/backends/cpu/delta_net_impl.h — the gated delta net of one value head over every sequence of a
// call, written once in plain C++ and compiled per ISA (delta_net*.cpp). Every loop either runs over
// independent elements (vectorized: each element sees the same operations in every build) or sums
// in 16 lanes joined by sum_lanes_16, with fma explicit, so every build gives the same bits.
//
// Recurrent form, per token (one row j of the state, S[:, j], at a time; rows are independent):
//   row *= e^g;  u_j = beta (v_j - row . k);  row += k u_j;  y_j = scale (row . q)
// Chunked form, per block of C tokens r = 0 .. C-1 of one sequence (the WY representation of the
// same recurrence): with G_r = g_0 + ... + g_r, gamma_r = e^G_r and the state S0 before the block,
//   L[r][s] = beta_r e^(G_r - G_s) (k_r . k_s) for s < r;  (I + L) Uv = beta v,  (I + L) W = beta gamma k
//   U = Uv - W S0                      (u_r: what the recurrence adds to the state at token r)
//   y_r = scale gamma_r S0^T q_r + sum_{s <= r} scale e^(G_r - G_s) (q_r . k_s) u_s
//   S = gamma_{C-1} S0 + sum_s e^(G_{C-1} - G_s) k_s u_s^T
// The triangular systems are solved row by row (forward substitution); every per-column loop then
// runs over the C tokens or the d_k entries of a row, never summing across them in another order.
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/cpu/canonical_math.h"

namespace weft::cpu {

// One value head's work: its tokens sequence by sequence (token lists by sequence), its states in
// the result. Scratch: delta_net_scratch_floats(d_k, d_v) floats, 64-byte aligned.
struct delta_net_head_task {
    const float *q, *k, *v, *g, *beta;             // first element of each input
    int64_t q_row, k_row, v_row, g_row, beta_row;  // row strides in floats (a token's column)
    float *y;                                      // [n_ch, n_tokens]
    float *states;                                 // [d_k, n_ch, n_seqs]: the result's (already the inputs)
    const int32_t *seq_tokens;  // the tokens of each sequence, in order, sequence by sequence
    const int64_t *seq_begin;   // n_seqs + 1 offsets into seq_tokens
    int64_t n_seqs, d_k, d_v, n_ch;
    int64_t head, head_k;  // the value head, and the q/k head it reads
    float scale;
    bool chunked;  // whole blocks of delta_net_chunk tokens in the chunked form
    float *scratch;
};

constexpr int64_t delta_net_chunk = 64;

inline int64_t delta_net_scratch_floats(int64_t d_k, int64_t d_v) {
    constexpr int64_t c = delta_net_chunk;
    // kt, qt, wt, kd, w: d_k * c each; kk, qk, l, mt: c * c; uv, uvt: d_v * c; small vectors
    return 5 * d_k * c + 4 * c * c + 2 * d_v * c + 8 * c + 64;
}

namespace {  // internal linkage: one copy per ISA build

// One token of one state row (S[:, j], n = d_k values): returns row . q after the update. Lane l
// sums the entries i = l (mod 16) in order, whole blocks of 16 first, then the tail's; restrict
// (the state never overlaps k or q) lets the compiler keep the lane sums in vector registers.
inline float delta_net_row_step(float *__restrict__ row, const float *__restrict__ k,
                                const float *__restrict__ q, float decay, float v, float beta, int64_t n) {
    constexpr int lanes = 16;
    float sk_lanes[lanes] = {}, out_lanes[lanes] = {};
    const int64_t whole = n / lanes * lanes;
    for (int64_t i = 0; i < whole; i += lanes)
        for (int l = 0; l < lanes; ++l) {
            const float r = row[i + l] * decay;
            row[i + l] = r;
            sk_lanes[l] = std::fma(r, k[i + l], sk_lanes[l]);
        }
    for (int64_t i = whole; i < n; ++i) {
        row[i] *= decay;
        sk_lanes[i - whole] = std::fma(row[i], k[i], sk_lanes[i - whole]);
    }
    const float u = (v - sum_lanes_16(sk_lanes)) * beta;
    for (int64_t i = 0; i < whole; i += lanes)
        for (int l = 0; l < lanes; ++l) {
            const float r = std::fma(k[i + l], u, row[i + l]);
            row[i + l] = r;
            out_lanes[l] = std::fma(r, q[i + l], out_lanes[l]);
        }
    for (int64_t i = whole; i < n; ++i) {
        row[i] = std::fma(k[i], u, row[i]);
        out_lanes[i - whole] = std::fma(row[i], q[i], out_lanes[i - whole]);
    }
    return sum_lanes_16(out_lanes);
}

inline void delta_net_recurrent_token(const delta_net_head_task &a, float *state, int32_t t) {
    const float *k = a.k + t * a.k_row + a.head_k * a.d_k;
    const float *q = a.q + t * a.q_row + a.head_k * a.d_k;
    const float *v = a.v + t * a.v_row + a.head * a.d_v;
    const float decay = exp_canonical(a.g[t * a.g_row + a.head]);
    const float beta = a.beta[t * a.beta_row + a.head];
    float *y = a.y + t * a.n_ch + a.head * a.d_v;
    for (int64_t j = 0; j < a.d_v; ++j)
        y[j] = a.scale * delta_net_row_step(state + j * a.d_k, k, q, decay, v[j], beta, a.d_k);
}

// x[0, n) += f * src[0, n) (x never overlaps src)
inline void delta_net_axpy(float *__restrict__ x, const float *__restrict__ src, float f, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = std::fma(src[i], f, x[i]);
}

// One block of delta_net_chunk tokens (tok) of one sequence; state: its rows S[:, j], j < d_v.
inline void delta_net_chunk_tokens(const delta_net_head_task &a, float *state, const int32_t *tok) {
    constexpr int64_t c = delta_net_chunk;
    const int64_t d_k = a.d_k, d_v = a.d_v;
    float *kt = a.scratch;       // [d_k][c]: k transposed
    float *qt = kt + d_k * c;    // [d_k][c]: scale gamma_r q_r, transposed
    float *wt = qt + d_k * c;    // [d_k][c]: W transposed
    float *kd = wt + d_k * c;    // [c][d_k]: e^(G_last - G_s) k_s
    float *w = kd + d_k * c;     // [c][d_k]: W by rows
    float *kk = w + d_k * c;     // [c][c]: k_r . k_s (row r)
    float *qk = kk + c * c;      // [c][c]: q_r . k_s (row r)
    float *l = qk + c * c;       // [c][c]: L (row r, s < r)
    float *mt = l + c * c;       // [c][c]: M transposed: mt[s][r] = scale e^(G_r - G_s) q_r . k_s, r >= s
    float *uv = mt + c * c;      // [c][d_v]: Uv by rows
    float *uvt = uv + d_v * c;   // [d_v][c]
    float *cum = uvt + d_v * c;  // [c]: G
    float *gamma = cum + c;      // [c]
    float *beta = gamma + c;     // [c]
    float *u = beta + c;         // [c]
    float *y = u + c;            // [c]

    float running = 0.0f;
    for (int64_t r = 0; r < c; ++r) {
        running += a.g[tok[r] * a.g_row + a.head];
        cum[r] = running;
        gamma[r] = exp_canonical(running);
        beta[r] = a.beta[tok[r] * a.beta_row + a.head];
    }
    auto k_of = [&](int64_t r) { return a.k + tok[r] * a.k_row + a.head_k * d_k; };
    auto q_of = [&](int64_t r) { return a.q + tok[r] * a.q_row + a.head_k * d_k; };
    for (int64_t r = 0; r < c; ++r) {
        const float *kr = k_of(r), *qr = q_of(r);
        for (int64_t i = 0; i < d_k; ++i) {
            kt[i * c + r] = kr[i];
            qt[i * c + r] = a.scale * gamma[r] * qr[i];
        }
    }
    // the Gram rows k_r . k_s and q_r . k_s, each summed over i in order (vectorized over s)
    for (int64_t r = 0; r < c; ++r) {
        float *kk_r = kk + r * c, *qk_r = qk + r * c;
        std::memset(kk_r, 0, size_t(c) * sizeof(float));
        std::memset(qk_r, 0, size_t(c) * sizeof(float));
        const float *kr = k_of(r), *qr = q_of(r);
        for (int64_t i = 0; i < d_k; ++i) {
            delta_net_axpy(kk_r, kt + i * c, kr[i], c);
            delta_net_axpy(qk_r, kt + i * c, qr[i], c);
        }
    }
    for (int64_t r = 0; r < c; ++r)
        for (int64_t s = 0; s < c; ++s) {
            const float decay = s <= r ? exp_canonical(cum[r] - cum[s]) : 0.0f;
            l[r * c + s] = s < r ? beta[r] * decay * kk[r * c + s] : 0.0f;
            mt[s * c + r] = a.scale * decay * qk[r * c + s];
        }
    // forward substitution: X_r = B_r - sum_{s < r} L[r][s] X_s, for Uv (B = beta v) and W (B = beta gamma k)
    for (int64_t r = 0; r < c; ++r) {
        const float *vr = a.v + tok[r] * a.v_row + a.head * d_v, *kr = k_of(r);
        float *uv_r = uv + r * d_v, *w_r = w + r * d_k;
        for (int64_t j = 0; j < d_v; ++j) uv_r[j] = beta[r] * vr[j];
        for (int64_t i = 0; i < d_k; ++i) w_r[i] = beta[r] * gamma[r] * kr[i];
        for (int64_t s = 0; s < r; ++s) {
            delta_net_axpy(uv_r, uv + s * d_v, -l[r * c + s], d_v);
            delta_net_axpy(w_r, w + s * d_k, -l[r * c + s], d_k);
        }
    }
    for (int64_t r = 0; r < c; ++r) {
        for (int64_t j = 0; j < d_v; ++j) uvt[j * c + r] = uv[r * d_v + j];
        for (int64_t i = 0; i < d_k; ++i) wt[i * c + r] = w[r * d_k + i];
        const float to_end = exp_canonical(cum[c - 1] - cum[r]);
        const float *kr = k_of(r);
        for (int64_t i = 0; i < d_k; ++i) kd[r * d_k + i] = to_end * kr[i];
    }
    const float gamma_last = gamma[c - 1];
    for (int64_t j = 0; j < d_v; ++j) {
        float *row = state + j * d_k;  // S0[:, j]
        std::memcpy(u, uvt + j * c, size_t(c) * sizeof(float));
        std::memset(y, 0, size_t(c) * sizeof(float));
        for (int64_t i = 0; i < d_k; ++i) {
            delta_net_axpy(u, wt + i * c, -row[i], c);
            delta_net_axpy(y, qt + i * c, row[i], c);
        }
        for (int64_t s = 0; s < c; ++s) delta_net_axpy(y, mt + s * c, u[s], c);
        for (int64_t r = 0; r < c; ++r) a.y[tok[r] * a.n_ch + a.head * d_v + j] = y[r];
        for (int64_t i = 0; i < d_k; ++i) row[i] *= gamma_last;
        for (int64_t s = 0; s < c; ++s) delta_net_axpy(row, kd + s * d_k, u[s], d_k);
    }
}

inline void delta_net_head_impl(const delta_net_head_task &a) {
    for (int64_t s = 0; s < a.n_seqs; ++s) {
        float *state = a.states + (s * a.n_ch + a.head * a.d_v) * a.d_k;
        const int32_t *tok = a.seq_tokens + a.seq_begin[s];
        const int64_t n = a.seq_begin[s + 1] - a.seq_begin[s];
        int64_t done = 0;
        if (a.chunked)
            for (; done + delta_net_chunk <= n; done += delta_net_chunk)
                delta_net_chunk_tokens(a, state, tok + done);
        for (; done < n; ++done) delta_net_recurrent_token(a, state, tok[done]);
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
