// weft/core/ops.h — op constructors: each validates shapes, records (op, src, params), returns.
//
// Nothing here computes. Shapes follow the convention of tensor.h: ne[0] is innermost, and
// mul_mat(a, b) takes a as [k, m] and b as [k, n] and yields [m, n]. A mismatch throws
// weft::error naming the op and the shapes, e.g.
//   "[mul_mat] a is [4096, 11008], b is [4095, 7]: ne[0] must match".
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "weft/core/context.h"

namespace weft {

// op_params layout (int32 words; p.i[k] = param_i32(k), p.f[k] = param_f32(k)) is given next to
// each op; ops not mentioned have none.

// --- elementwise and broadcasting (result: a's shape, f32; b broadcast when b.ne[i] divides a.ne[i])
// a and b are f32, f16 or bf16.
tensor *add(context &ctx, tensor *a, tensor *b);
tensor *sub(context &ctx, tensor *a, tensor *b);
tensor *mul(context &ctx, tensor *a, tensor *b);
tensor *div(context &ctx, tensor *a, tensor *b);
tensor *scale(context &ctx, tensor *a, float s);  // p.f[0] = s
tensor *silu(context &ctx, tensor *a);
tensor *gelu(context &ctx, tensor *a);
tensor *tanh(context &ctx, tensor *a);      // std::tanh of each element
tensor *sigmoid(context &ctx, tensor *a);   // 1 / (1 + e^-a)
tensor *softplus(context &ctx, tensor *a);  // ln(1 + e^a), a itself above 20 (the reference engine's cut)
// act(gate) * up; gate and up have the same shape; p.i[0] = glu_kind
tensor *glu(context &ctx, tensor *gate, tensor *up, glu_kind kind);
inline tensor *swiglu(context &ctx, tensor *gate, tensor *up) {
    return glu(ctx, gate, up, glu_kind::swiglu);
}
// gpt-oss's activation (glu_kind::swiglu_oai; glu() itself refuses that kind, which needs these
// params): g = min(gate, limit), u = clamp(up, -limit, limit), out = g * sigmoid(alpha * g) * (u + 1).
// gpt-oss: alpha 1.702, limit 7. p.i[0] = glu_kind::swiglu_oai, p.f[1] = alpha, p.f[2] = limit (> 0).
tensor *swiglu_oai(context &ctx, tensor *gate, tensor *up, float alpha, float limit);

// --- normalisation over ne[0]; p.f[0] = eps (>= 0)
tensor *rms_norm(context &ctx, tensor *a, float eps);
tensor *norm(context &ctx, tensor *a, float eps);
// x / max(sqrt(sum x^2), eps) (the reference engine's l2_norm; Qwen3-Next's q and k before the delta net)
tensor *l2_norm(context &ctx, tensor *a, float eps);

// --- matrix product: a [k, m, A2, A3] any type, b [k, n, B2, B3] f32 -> f32 [m, n, B2, B3];
// B2 % A2 == 0 and B3 % A3 == 0 (a is broadcast: grouped-query attention needs no copies)
tensor *mul_mat(context &ctx, tensor *a, tensor *b);

// --- mixture of experts: each token's columns against the matrices its ids pick.
// experts [k, m, n_expert] any type mul_mat takes (one [k, m] matrix per expert), b f32
// [k, n_b, n_tokens] with n_b 1 (every pick reads the token's one column) or n_used (pick i reads
// column i), ids i32 [n_used, n_tokens] with values in [0, n_expert) (checked when computed)
// -> f32 [m, n_used, n_tokens]: dst[:, i, t] = mul_mat(experts[:, :, ids[i, t]], b[:, i % n_b, t]),
// equal bit for bit to that mul_mat. src[] = {experts, b, ids}.
tensor *mul_mat_id(context &ctx, tensor *experts, tensor *b, tensor *ids);
// The per-expert bias of mul_mat_id's results (gpt-oss): a f32 [m, n_used, n_tokens], bias f32
// [m, n_expert] (rows contiguous), ids i32 [n_used, n_tokens] as mul_mat_id's (values in [0,
// n_expert), checked when computed) -> f32 a's shape: dst[:, i, t] = a[:, i, t] + bias[:, ids[i, t]].
// src[] = {a, bias, ids}.
tensor *add_id(context &ctx, tensor *a, tensor *bias, tensor *ids);
// Indices of the k largest values of each row of a f32 [n, rows...] -> i32 [k, rows...], largest
// first; equal values keep their order (the lower index first), NaN ranks as -infinity.
// p.i[0] = k (1 <= k <= n).
tensor *top_k(context &ctx, tensor *a, int64_t k);
// Every index of each row, sorted by value, descending (top_k with k = n).
tensor *argsort_desc(context &ctx, tensor *a);

// --- rows
// a [n_embd, n_rows, A2, A3] any type, ids i32 [n, A2, A3] -> f32 [n_embd, n, A2, A3]
tensor *get_rows(context &ctx, tensor *a, tensor *ids);
// writes the rows of src [ne0, n, ...] into dst [ne0, rows, ...] at ids (i32 or i64 [n]), in place,
// converting to dst's type; returns a view of dst that depends on the write.
// src is f32 [ne0, n, ne2, ne3] (ne2, ne3 as dst's); ids [n, I2, I3] with I2 | ne2, I3 | ne3.
// src[] = {dst, src, ids}.
tensor *set_rows(context &ctx, tensor *dst, tensor *src, tensor *ids);

// --- positions
struct rope_params {
    int32_t n_dims = 0;  // rotated dims (<= head size; the rest pass through)
    int32_t mode = rope_mode_normal;
    int32_t n_ctx_orig = 0;  // training context (YaRN)
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;  // 1 / linear scaling factor
    float ext_factor = 0.0f;  // YaRN extrapolation mix (0: off)
    float attn_factor = 1.0f;
    float beta_fast = 32.0f;
    float beta_slow = 1.0f;
};
// a f32/f16 [head_dim, n_head, n_tokens, 1], pos i32 [n_tokens], freq_factors optional f32 [>= n_dims/2]
// -> f32, a's shape. src[] = {a, pos, freq_factors}. op_params: p.i[0] n_dims, p.i[1] mode,
// p.i[2] n_ctx_orig, p.f[3] freq_base, p.f[4] freq_scale, p.f[5] ext_factor, p.f[6] attn_factor,
// p.f[7] beta_fast, p.f[8] beta_slow (rope_params_of reads them back). May run in place: a
// kernel must read both elements of a rotated pair before writing either.
tensor *rope(context &ctx, tensor *a, tensor *pos, const rope_params &p, tensor *freq_factors = nullptr);
rope_params rope_params_of(const tensor &rope_node);

// softmax over ne[0] of (a * scale + mask); mask f32/f16 [ne0, >= ne1] broadcast over dims 2, 3
// (mask.ne[2] | a.ne[2], mask.ne[3] | a.ne[3]), contiguous. src[] = {a, mask}; p.f[0] = scale.
tensor *soft_max(context &ctx, tensor *a, tensor *mask = nullptr, float scale = 1.0f);

// Fused attention of every query head against the cells of its KV head:
// out[:, h, t] = softmax_j(q[:, t, h] . k[:, j, g] * scale + mask[j, t]) v[:, j, g], g = h / (n_head /
// n_head_kv). q f32 [head_k, n_tokens, n_head] (any strides, contiguous rows), k [head_k, n_kv,
// n_head_kv], v [head_v, n_kv, n_head_kv] (cells as rows: no transposed copy) of the attention_kv_types,
// mask f32 contiguous [n_kv, >= n_tokens] (-INF hides a cell) -> f32 [head_v, n_head, n_tokens]. A
// token with no visible cell gets zeros. src[] = {q, k, v, mask}; p.f[0] = scale.
// softcap > 0 caps the scores first (Gemma 2): s = softcap * tanh(q . k * scale), then s + mask
// (the caller folds 1/softcap into scale); p.f[1] = softcap.
// positions (optional, i32 [>= n_kv], src[4]): each cell's position. The sums run in an order fixed
// by the positions of the cells a token sees (the reference engine's order for a sequence stored
// from cell 0), so a token's result does not depend on where its cells lie in the cache; without
// it, a cell's position is its index.
// sinks (optional, f32 [n_head] contiguous, src[5]; gpt-oss): query head h's softmax has one more
// term, the sink logit sinks[h], in its denominator only: M = max(sinks[h], max_j x_j),
// out = sum_j e^(x_j - M) v_j / (e^(sinks[h] - M) + sum_j e^(x_j - M)) (the sink adds no value).
// A token with no visible cell still gets zeros.
tensor *attention(context &ctx, tensor *q, tensor *k, tensor *v, tensor *mask, float scale,
                  float softcap = 0.0f, tensor *positions = nullptr, tensor *sinks = nullptr);
// The types attention reads K and V in (a KV cache's types): f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,
// q5_1. A block type's rows are whole blocks, so its head size is a multiple of the block size.
std::span<const dtype> attention_kv_types();
bool is_attention_kv_type(dtype t);
std::string attention_kv_type_names();  // "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1"

// --- recurrent sequences (state-space models). Tokens are the columns of x; token t belongs to
// sequence seq_of[t] (i32 [n_tokens], values in [0, n_seqs)), whose running state is column
// seq_of[t] of states and advances token by token in column order: sequences of any lengths may
// interleave in one call. The result is f32 1-d: y [n_ch, n_tokens] (the first n_ch * n_tokens
// floats), then each sequence's state after its last token, laid out as states (states of
// sequences without tokens are copied unchanged). Channels are independent: a kernel may split
// them, never the sums over time or state.
// Causal depthwise convolution: states f32 [d_conv - 1, n_ch, n_seqs] hold each channel's last
// d_conv - 1 inputs (oldest first), weight f32 [d_conv, n_ch], x f32 [n_ch, n_tokens]:
// y[c, t] = sum_k weight[k, c] * w[k] over the window w = (state of channel c, x[c, t]), and
// x[c, t] then enters the state. src[] = {x, states, weight, seq_of, rows}.
//
// In place (ssm_conv and ssm_scan_mamba2 given rows, i32 [2, n_seqs] contiguous): states is a cache of
// state columns, f32 [state_len, n_ch, n_cols] contiguous (a recurrent memory's layer tensor,
// reshaped). Sequence s's state is read from column rows[2 s] and its state after its last token
// written into column rows[2 s + 1] (the same column, or another: a spare, so the one read stays as it
// was until the caller commits the new one). Columns are in [0, n_cols), each written by one sequence
// only. The result is y alone, f32 1-d [n_ch * n_tokens]. No gather into a temporary and no scatter
// back: each state is read and written once. The same bits as the gathered form.
tensor *ssm_conv(context &ctx, tensor *x, tensor *states, tensor *weight, tensor *seq_of,
                 tensor *rows = nullptr);
// Selective scan: x, dt f32 [n_ch, n_tokens], A f32 [d_state, n_ch], B, C f32 [d_state, n_tokens]
// (rows may be strided views), states f32 [d_state, n_ch, n_seqs]. Per channel c and token t:
// delta = softplus(dt[c, t]) (dt itself above 20), h = h * exp(delta * A[:, c]) + B[:, t] * (delta *
// x[c, t]), y[c, t] = sum_i C[i, t] * h[i]. src[] = {x, dt, A, B, C, states, seq_of}.
tensor *ssm_scan(context &ctx, tensor *x, tensor *dt, tensor *A, tensor *B, tensor *C, tensor *states,
                 tensor *seq_of);
// Mamba-2's scan (also Granite 4's hybrid layers): heads of head_dim channels whose states decay by
// one scalar per head and token, B and C shared by the heads of a group. x f32 [head_dim * n_head,
// n_tokens] (channel p of head h at h * head_dim + p), dt f32 [n_head, n_tokens] (the dt bias
// already added), A f32 [n_head] contiguous (-exp(A_log)), B, C f32 [d_state * n_group, n_tokens]
// (rows may be strided views; head h reads group h / (n_head / n_group)), states f32 [d_state,
// head_dim * n_head, n_seqs] (the reference engine's [d_state, head_dim, n_head, n_seqs], flattened),
// D optional f32 [n_head] contiguous. Per head h and token t: delta = softplus(dt[h, t]) (dt itself
// above 20), decay = exp(delta * A[h]); for each channel p of the head, with b, c the group's rows:
// h[i, p] = h[i, p] * decay + b[i] * (x[p, t] * delta), y[p, t] = sum_i c[i] * h[i, p], then
// y[p, t] += D[h] * x[p, t] when D is given (the skip the reference adds as mul + add after its
// scan). The gated norm after it, rms_norm(y * silu(z)) over groups of channels times a weight, is
// glu(z, y), rms_norm of a [d_inner / n_group, n_group * n_tokens] reshape and mul: passes over
// d_inner floats a token, against the scan's d_state multiply-adds per channel.
// src[] = {x, dt, A, B, C, states, seq_of, D, rows} (rows: the in-place form, as ssm_conv's).
tensor *ssm_scan_mamba2(context &ctx, tensor *x, tensor *dt, tensor *A, tensor *B, tensor *C, tensor *states,
                        tensor *seq_of, tensor *D = nullptr, tensor *rows = nullptr);
// The source node n writes in place besides its result (the states of an in-place ssm_conv or
// ssm_scan_mamba2), or -1. The scheduler never substitutes it (like a view's write target) and
// runs n on a backend that reaches it.
int op_state_source(const tensor &n);
// Gated delta net (Qwen3-Next and Qwen3.5's linear attention): n_head_v value heads of d_v channels,
// each with a state S [d_k, d_v]. q, k f32 [d_k * n_head_k, n_tokens], v f32 [d_v * n_head_v,
// n_tokens], g f32 [n_head_v, n_tokens] (the log of each head's decay), beta f32 [n_head_v,
// n_tokens] (already sigmoided); rows may be strided views. n_head_k divides n_head_v and value head
// h reads q/k head h % n_head_k (tiled, as the reference engine broadcasts them: its converter
// orders the value heads for that). Per token and head, in token order:
//   S = S * exp(g);  u = beta * (v - S^T k);  S = S + k u^T;  y = scale * S^T q
// The graph L2-normalises q and k (l2_norm) before; scale is p.f[0], 1 / sqrt(d_k) in both models
// (the reference engine's fused op scales its output the same way; its unfused graph scales q).
//
// Forms. automatic (the block form): each sequence's tokens go in blocks of gated_delta_net_chunk
// (64) counted from its first token, whatever calls they come in; within a block the recurrence is
// the chunked (WY) form, every token computed from the state before the block and the block's
// tokens up to it alone. So a token's bits are the same however its sequence is cut into calls (a
// whole prompt, ubatches of any size, or one token a call when decoding), whatever other sequences
// share the call and whatever the thread count. form = recurrent (p.i[1] = 1) runs the recurrence
// token by token (the reference the block form is held to: the two agree within 1e-6).
//
// states f32 [gated_delta_net_state_floats(d_k, d_v), n_head_v, n_seqs], zeros for a new
// sequence; per head and sequence: S0 [d_k rows of d_v] (S0[i, j] at i * d_v + j: the state before
// the current block), the block's keys so far [d_k rows of 64 slots] (k_s[i] at i * 64 + s), their
// writes u_s [64 slots of d_v], G_s = g_0 + ... + g_s of the block [64], the count of the block's
// tokens so far (as a float), then padding to a multiple of 16. The recurrent form leaves no block
// pending (S0 is then the state). src[] = {q, k, v, g, beta, states, seq_of}; the result as
// ssm_scan's: y [d_v * n_head_v, n_tokens], then the states. p.i[2] = d_k.
enum class delta_net_form : int32_t { automatic = 0, recurrent = 1 };
constexpr int64_t gated_delta_net_chunk = 64;
int64_t gated_delta_net_state_floats(int64_t d_k, int64_t d_v);
tensor *gated_delta_net(context &ctx, tensor *q, tensor *k, tensor *v, tensor *g, tensor *beta,
                        tensor *states, tensor *seq_of, float scale,
                        delta_net_form form = delta_net_form::automatic);

// --- copies and layout
// cpy: same element count; returns a view of dst (dst's type, shape and strides: the same memory)
// with src[] = {src, dst}. Kernels write src[0], converted, into src[1] when it is set and into the
// node itself when it is not: cast records a cpy whose result owns its memory and whose src[1] is
// null. The scheduler never substitutes a write target (src[1] of cpy, src[0] of set_rows).
tensor *cpy(context &ctx, tensor *src, tensor *dst);
tensor *cont(context &ctx, tensor *a);
tensor *cast(context &ctx, tensor *a, dtype t);               // contiguous copy converted to t (op cpy)
tensor *concat(context &ctx, tensor *a, tensor *b, int dim);  // same types; p.i[0] = dim

// --- reductions: argmax f32 [n, rows] -> i32 [rows]; sum_rows, mean [n, ...] -> f32 [1, ...]
tensor *argmax(context &ctx, tensor *a);
tensor *sum_rows(context &ctx, tensor *a);
tensor *mean(context &ctx, tensor *a);

// --- views (no copies: strides change, data is shared)
tensor *view_1d(context &ctx, tensor *a, int64_t ne0, size_t offset);
tensor *view_2d(context &ctx, tensor *a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset);
tensor *view_3d(context &ctx, tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1, size_t nb2,
                size_t offset);
tensor *view_4d(context &ctx, tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, size_t nb1,
                size_t nb2, size_t nb3, size_t offset);
tensor *reshape(context &ctx, tensor *a, std::initializer_list<int64_t> ne);  // a must be contiguous
tensor *reshape_2d(context &ctx, tensor *a, int64_t ne0, int64_t ne1);
tensor *reshape_3d(context &ctx, tensor *a, int64_t ne0, int64_t ne1, int64_t ne2);
tensor *reshape_4d(context &ctx, tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
// axis i of a becomes axis ax[i] of the result; p.i[0..3] = ax (transpose: 1, 0, 2, 3)
tensor *permute(context &ctx, tensor *a, int ax0, int ax1, int ax2, int ax3);
tensor *transpose(context &ctx, tensor *a);  // swaps dims 0 and 1

// Per-op metadata tables (sized by op_kind::count).
const char *op_name(op_kind op);    // "mul_mat"
const char *op_symbol(op_kind op);  // "X" for mul_mat, "+" for add ... (DOT labels)
// The op may write its result over src[0]'s memory (same size, element i read before written).
bool op_can_inplace(op_kind op);
// Result is a view of a source: no memory of its own.
bool op_is_view(op_kind op);

}  // namespace weft
