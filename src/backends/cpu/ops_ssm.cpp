// src/backends/cpu/ops_ssm.cpp — the recurrent sequence ops of state-space models: ssm_conv (causal
// depthwise convolution over time), ssm_scan (selective scan), split over channels, and Mamba-2's
// ssm_scan_mamba2, split over heads.
//
// Each thread owns whole channels: it copies their states into the result (the in-place form reads
// and writes them where they are, each sequence's column of the cache), then walks every token in
// column order, advancing the state of the token's sequence. A channel's arithmetic is the same
// whatever the split and whatever else the ubatch holds, so the results are bit for bit the same
// for any thread count and any batching of a sequence's tokens.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backends/cpu/activations.h"
#include "backends/cpu/canonical_math.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/ssm_conv.h"
#include "weft/core/ops.h"

namespace weft::cpu {

namespace {

// The pieces the ops share: x, the token -> sequence map, the states in and out, y.
struct ssm_layout {
    const tensor &x;
    const tensor &states;
    const int32_t *seq_of;
    // in place: each sequence's column of states read, then the one written; null: gathered
    const int32_t *columns;
    int64_t n_ch, n_tokens, n_seqs, state_len;
    float *y;           // [n_ch, n_tokens]
    float *new_states;  // states' layout: after y in the result, or states itself in place

    ssm_layout(tensor &dst, const tensor &x_, const tensor &states_, const tensor &seq_of_,
               const tensor *columns_ = nullptr)
        : x(x_),
          states(states_),
          seq_of(static_cast<const int32_t *>(seq_of_.data)),
          columns(columns_ ? static_cast<const int32_t *>(columns_->data) : nullptr),
          n_ch(x_.ne[0]),
          n_tokens(x_.ne[1]),
          n_seqs(columns_ ? columns_->ne[1] : states_.ne[2]),
          state_len(states_.ne[0]),
          y(static_cast<float *>(dst.data)),
          new_states(columns_ ? static_cast<float *>(states_.data) : y + n_ch * n_tokens) {}

    float x_at(int64_t c, int64_t t) const {
        return *reinterpret_cast<const float *>(static_cast<const char *>(x.data) + t * int64_t(x.nb[1]) +
                                                c * int64_t(sizeof(float)));
    }
    int64_t column_in(int64_t s) const { return columns ? columns[2 * s] : s; }
    int64_t column_out(int64_t s) const { return columns ? columns[2 * s + 1] : s; }
    // Channel c's state of sequence s before the call (contiguous, state_len floats).
    const float *state_in(int64_t s, int64_t c) const {
        return static_cast<const float *>(states.data) + (column_in(s) * n_ch + c) * state_len;
    }
    // Where channel c's state of sequence s advances (its state after the call).
    float *state_out(int64_t s, int64_t c) const {
        return new_states + (column_out(s) * n_ch + c) * state_len;
    }

    // Copies channel c's incoming states where they advance (ssm_scan's gathered form).
    void copy_states(int64_t c) const {
        for (int64_t s = 0; s < n_seqs; ++s)
            std::memcpy(state_out(s, c), state_in(s, c), size_t(state_len) * sizeof(float));
    }

    // first[s]: the first token of sequence s, -1 when it has none.
    void first_tokens(int32_t *first) const {
        std::fill(first, first + n_seqs, -1);
        for (int64_t t = n_tokens - 1; t >= 0; --t) first[seq_of[t]] = int32_t(t);
    }
    // A sequence without tokens keeps its state: channel c's, where the others' new states go.
    void carry_over(int64_t s, int64_t c) const {
        if (state_out(s, c) != state_in(s, c))
            std::memcpy(state_out(s, c), state_in(s, c), size_t(state_len) * sizeof(float));
    }

    // Every token's sequence within [0, n_seqs); reports the first one outside.
    bool check_sequences(const compute_params &p, const tensor &dst) const {
        for (int64_t t = 0; t < n_tokens; ++t)
            if (seq_of[t] < 0 || seq_of[t] >= n_seqs) {
                p.fail(std::string("[") + op_name(dst.op) + "] token " + std::to_string(t) +
                       " is of sequence " + std::to_string(seq_of[t]) + ", outside [0, " +
                       std::to_string(n_seqs) + ")");
                return false;
            }
        for (int64_t s = 0; columns && s < n_seqs; ++s) {
            std::string wrong;
            const auto n_cols = int64_t(states.ne[2]);
            for (const int64_t col : {column_in(s), column_out(s)})
                if (col < 0 || col >= n_cols)
                    wrong =
                        "column " + std::to_string(col) + " is outside [0, " + std::to_string(n_cols) + ")";
            for (int64_t q = 0; q < n_seqs && wrong.empty(); ++q)
                if (q != s && (column_out(s) == column_in(q) || column_out(s) == column_out(q)))
                    wrong = "column written, " + std::to_string(column_out(s)) + ", is sequence " +
                            std::to_string(q) + "'s too";
            if (!wrong.empty()) {
                p.fail(std::string("[") + op_name(dst.op) + "] sequence " + std::to_string(s) + "'s state " +
                       wrong);
                return false;
            }
        }
        return true;
    }
};

// The most channels split_range gives one thread.
int64_t channels_per_thread(int64_t n_ch, int n_threads) {
    return (n_ch + n_threads - 1) / n_threads;
}

// ssm_scan_mamba2's per thread: its heads' step sizes, then each sequence's first token (an int32 in
// each float's place).
int64_t mamba2_scratch_floats(int64_t n_head, int64_t n_seqs, int n_threads) {
    return channels_per_thread(n_head, n_threads) + n_seqs;
}

const float *row_f32(const tensor &t, int64_t i1) {
    return reinterpret_cast<const float *>(static_cast<const char *>(t.data) + i1 * int64_t(t.nb[1]));
}

// ssm_conv's per thread: the token lists by sequence (n_tokens ints) and their offsets (n_seqs + 1).
size_t ssm_conv_thread_bytes(const tensor &dst) {
    return pad_to_cache_line(size_t(dst.src[0]->ne[1]) * sizeof(int32_t)) +
           pad_to_cache_line(size_t((dst.src[4] ? dst.src[4]->ne[1] : dst.src[1]->ne[2]) + 1) *
                             sizeof(int64_t));
}

bool supports_ssm_common(const tensor &dst, int n_src) {
    if (dst.type != dtype::f32) return false;
    for (int i = 0; i < n_src; ++i)
        if (dst.src[i] == nullptr) return false;
    const tensor &seq_of = *dst.src[n_src - 1];
    for (int i = 0; i + 1 < n_src; ++i)
        if (dst.src[i]->type != dtype::f32) return false;
    return seq_of.type == dtype::i32;
}

// The in-place form's state columns (src[i]), when given: i32.
bool in_place_columns_ok(const tensor &dst, int i) {
    return dst.src[i] == nullptr || dst.src[i]->type == dtype::i32;
}

}  // namespace

// Whole blocks of ssm_conv_lanes channels per thread (the last block may be short), each sequence's
// tokens in their order: ssm_conv.h.
void compute_ssm_conv(const compute_params &p, tensor &dst) {
    const tensor &weight = *dst.src[2];
    const ssm_layout l(dst, *dst.src[0], *dst.src[1], *dst.src[3], dst.src[4]);
    if (!l.check_sequences(p, dst)) return;
    auto *seq_tokens = reinterpret_cast<int32_t *>(p.wdata + size_t(p.ith) * ssm_conv_thread_bytes(dst));
    auto *seq_begin = reinterpret_cast<int64_t *>(reinterpret_cast<std::byte *>(seq_tokens) +
                                                  pad_to_cache_line(size_t(l.n_tokens) * sizeof(int32_t)));
    int64_t listed = 0;
    for (int64_t s = 0; s < l.n_seqs; ++s) {
        seq_begin[s] = listed;
        for (int64_t t = 0; t < l.n_tokens; ++t)
            if (l.seq_of[t] == s) seq_tokens[listed++] = int32_t(t);
    }
    seq_begin[l.n_seqs] = listed;
    const ssm_conv_task a{.x = static_cast<const float *>(l.x.data),
                          .x_row = int64_t(l.x.nb[1] / sizeof(float)),
                          .weight = static_cast<const float *>(weight.data),
                          .weight_row = int64_t(weight.nb[1] / sizeof(float)),
                          .states_in = static_cast<const float *>(l.states.data),
                          .states_out = l.new_states,
                          .columns = l.columns,
                          .y = l.y,
                          .seq_tokens = seq_tokens,
                          .seq_begin = seq_begin,
                          .n_seqs = l.n_seqs,
                          .n_ch = l.n_ch,
                          .d_conv = weight.ne[0]};
    const index_range blocks = split_range((l.n_ch + ssm_conv_lanes - 1) / ssm_conv_lanes, p.ith, p.nth);
    const int64_t c_end = std::min(l.n_ch, blocks.end * ssm_conv_lanes);
    if (blocks.begin * ssm_conv_lanes < c_end)
        best_ssm_conv_channels()(a, blocks.begin * ssm_conv_lanes, c_end);
}

size_t work_size_ssm_conv(const tensor &dst, int n_threads) {
    return ssm_conv_thread_bytes(dst) * size_t(n_threads);
}

bool supports_ssm_conv(const tensor &dst) {
    if (!supports_ssm_common(dst, 4) || !in_place_columns_ok(dst, 4)) return false;
    for (const tensor *t : {dst.src[0], dst.src[2]})
        if (t->nb[0] != sizeof(float) || t->nb[1] % sizeof(float) != 0) return false;
    return dst.src[1]->is_contiguous();
}

// Token by token over this thread's channels (each channel's state still advances in token order):
// a token's steps, softplus(dt), are one vectorized row over the channels.
void compute_ssm_scan(const compute_params &p, tensor &dst) {
    const tensor &dt = *dst.src[1], &A = *dst.src[2], &B = *dst.src[3], &C = *dst.src[4];
    const ssm_layout l(dst, *dst.src[0], *dst.src[5], *dst.src[6]);
    if (!l.check_sequences(p, dst)) return;
    const int64_t d_state = A.ne[0];
    // the same bits in every ISA build
    const softplus_row_fn softplus_row = best_softplus_row();
    const ssm_scan_step_fn step = best_ssm_scan_step();
    const index_range channels = split_range(l.n_ch, p.ith, p.nth);
    float *delta = thread_scratch(p, channels_per_thread(l.n_ch, p.nth));
    for (int64_t c = channels.begin; c < channels.end; ++c) l.copy_states(c);
    for (int64_t t = 0; t < l.n_tokens; ++t) {
        softplus_row(row_f32(dt, t) + channels.begin, delta, channels.end - channels.begin);
        const float *b = row_f32(B, t), *cc = row_f32(C, t);
        for (int64_t c = channels.begin; c < channels.end; ++c) {
            const float d = delta[c - channels.begin];
            l.y[t * l.n_ch + c] =
                step(l.state_out(l.seq_of[t], c), row_f32(A, c), b, cc, d, l.x_at(c, t) * d, d_state);
        }
    }
}

size_t work_size_ssm_scan(const tensor &dst, int n_threads) {
    return scratch_size(channels_per_thread(dst.src[0]->ne[0], n_threads), n_threads);
}

bool supports_ssm_scan(const tensor &dst) {
    return supports_ssm_common(dst, 7);
}

// Token by token over this thread's heads: a token's step sizes, softplus(dt), are one vectorized row
// over the heads, each head's decay one canonical exponential, and each channel's step one row
// function over its d_state states.
void compute_ssm_scan_mamba2(const compute_params &p, tensor &dst) {
    const tensor &dt = *dst.src[1], &B = *dst.src[3], &C = *dst.src[4];
    const auto *A = static_cast<const float *>(dst.src[2]->data);
    const float *D = dst.src[7] ? static_cast<const float *>(dst.src[7]->data) : nullptr;
    const ssm_layout l(dst, *dst.src[0], *dst.src[5], *dst.src[6], dst.src[8]);
    if (!l.check_sequences(p, dst)) return;
    const int64_t n_head = dt.ne[0], head_dim = l.n_ch / n_head, d_state = l.state_len;
    const int64_t heads_per_group = n_head / (B.ne[0] / d_state);
    const softplus_row_fn softplus_row = best_softplus_row();
    const ssm_scan_mamba2_step_fn step = best_ssm_scan_mamba2_step();
    const index_range heads = split_range(n_head, p.ith, p.nth);
    float *delta = thread_scratch(p, mamba2_scratch_floats(n_head, l.n_seqs, p.nth));
    auto *first = reinterpret_cast<int32_t *>(delta + channels_per_thread(n_head, p.nth));
    l.first_tokens(first);
    for (int64_t t = 0; t < l.n_tokens; ++t) {
        const int64_t s = l.seq_of[t];
        softplus_row(row_f32(dt, t) + heads.begin, delta, heads.end - heads.begin);
        for (int64_t h = heads.begin; h < heads.end; ++h) {
            const float d = delta[h - heads.begin];
            const float decay = exp_canonical(d * A[h]);
            const int64_t group_offset = (h / heads_per_group) * d_state;
            const float *b = row_f32(B, t) + group_offset, *c = row_f32(C, t) + group_offset;
            for (int64_t ch = h * head_dim; ch < (h + 1) * head_dim; ++ch) {
                const float x = l.x_at(ch, t);
                // the sequence's first token reads the state before the call, the others their own
                float *state = l.state_out(s, ch);
                const float *before = first[s] == t ? l.state_in(s, ch) : state;
                const float y = step(before, state, b, c, decay, x * d, d_state);
                l.y[t * l.n_ch + ch] = D ? y + D[h] * x : y;
            }
        }
    }
    for (int64_t s = 0; s < l.n_seqs; ++s)
        if (first[s] < 0)
            for (int64_t ch = heads.begin * head_dim; ch < heads.end * head_dim; ++ch) l.carry_over(s, ch);
}

size_t work_size_ssm_scan_mamba2(const tensor &dst, int n_threads) {
    const int64_t n_seqs = dst.src[8] ? dst.src[8]->ne[1] : dst.src[5]->ne[2];
    return scratch_size(mamba2_scratch_floats(dst.src[1]->ne[0], n_seqs, n_threads), n_threads);
}

bool supports_ssm_scan_mamba2(const tensor &dst) {
    return supports_ssm_common(dst, 7) && (dst.src[7] == nullptr || dst.src[7]->type == dtype::f32) &&
           in_place_columns_ok(dst, 8);
}

}  // namespace weft::cpu
