// src/backends/cpu/delta_net.cpp — the gated delta net op on the CPU: the value heads' columns shared
// out over the threads in whole heads or pieces of heads (plan_delta_net in partition.h), each
// computed by the ISA build of delta_net_impl.h the CPU supports (the scalar build here).
//
// A head's arithmetic is the same whatever the split (a value column's outputs and state are
// computed by the same operations whatever columns a thread takes) and whatever other sequences
// share the call (each sequence's tokens are taken in their own order, in blocks counted from its
// first token), so the results are bit for bit the same for any thread count, any mix of sequences
// and any cut of a sequence into calls.
#include <algorithm>
#include <string>

#include "backends/cpu/delta_net_impl.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_level.h"
#include "weft/core/ops.h"

WEFT_DEFINE_DELTA_NET(scalar)

namespace weft::cpu {

namespace {

static_assert(delta_net_chunk == gated_delta_net_chunk, "ops.h documents the kernel's block size");

using delta_net_head_fn = void (*)(const delta_net_head_task &);

delta_net_head_fn best_delta_net_head() {
    return best_of({delta_net_head_scalar, delta_net_head_avx2, delta_net_head_avx512});
}

size_t delta_net_scratch_bytes(const tensor &dst) {
    return pad_to_cache_line(size_t(delta_net_scratch_floats(dst.src[2]->ne[0] / dst.src[3]->ne[0])) *
                             sizeof(float));
}

size_t delta_net_block_copy_bytes(const tensor &dst) {
    return pad_to_cache_line(size_t(delta_net_block_copy_floats(dst.param_i32(2))) * sizeof(float));
}

// Per thread: the chunk scratch, the copy of a block's keys, then the token lists (n_tokens ints)
// and offsets (n_seqs + 1).
size_t delta_net_thread_bytes(const tensor &dst) {
    const tensor &v = *dst.src[2], &states = *dst.src[5];
    return delta_net_scratch_bytes(dst) + delta_net_block_copy_bytes(dst) +
           pad_to_cache_line(size_t(v.ne[1]) * sizeof(int32_t)) +
           pad_to_cache_line(size_t(states.ne[2] + 1) * sizeof(int64_t));
}

int64_t delta_net_row_floats(const tensor &t) {
    return int64_t(t.nb[1] / sizeof(float));
}

}  // namespace

void compute_gated_delta_net(const compute_params &p, tensor &dst) {
    const tensor &q = *dst.src[0], &k = *dst.src[1], &v = *dst.src[2], &g = *dst.src[3], &beta = *dst.src[4];
    const tensor &states = *dst.src[5];
    const auto *seq_of = static_cast<const int32_t *>(dst.src[6]->data);
    const int64_t n_tokens = v.ne[1], n_ch = v.ne[0], n_seqs = states.ne[2], d_k = dst.param_i32(2);
    const int64_t n_head_v = g.ne[0], n_head_k = q.ne[0] / d_k;
    for (int64_t t = 0; t < n_tokens; ++t)
        if (seq_of[t] < 0 || seq_of[t] >= n_seqs) {
            p.fail("[gated_delta_net] token " + std::to_string(t) + " is of sequence " +
                   std::to_string(seq_of[t]) + ", outside [0, " + std::to_string(n_seqs) + ")");
            return;
        }
    std::byte *mine = p.wdata + size_t(p.ith) * delta_net_thread_bytes(dst);
    delta_net_head_task a{};
    a.scratch = reinterpret_cast<float *>(mine);
    mine += delta_net_scratch_bytes(dst);
    a.block_copy = reinterpret_cast<float *>(mine);
    mine += delta_net_block_copy_bytes(dst);
    auto *seq_tokens = reinterpret_cast<int32_t *>(mine);
    mine += pad_to_cache_line(size_t(n_tokens) * sizeof(int32_t));
    auto *seq_begin = reinterpret_cast<int64_t *>(mine);
    // the tokens of each sequence, in order
    int64_t listed = 0;
    for (int64_t s = 0; s < n_seqs; ++s) {
        seq_begin[s] = listed;
        for (int64_t t = 0; t < n_tokens; ++t)
            if (seq_of[t] == s) seq_tokens[listed++] = int32_t(t);
    }
    seq_begin[n_seqs] = listed;

    a.q = static_cast<const float *>(q.data);
    a.k = static_cast<const float *>(k.data);
    a.v = static_cast<const float *>(v.data);
    a.g = static_cast<const float *>(g.data);
    a.beta = static_cast<const float *>(beta.data);
    a.q_row = delta_net_row_floats(q);
    a.k_row = delta_net_row_floats(k);
    a.v_row = delta_net_row_floats(v);
    a.g_row = delta_net_row_floats(g);
    a.beta_row = delta_net_row_floats(beta);
    a.y = static_cast<float *>(dst.data);
    a.states_in = static_cast<const float *>(states.data);
    a.states = a.y + n_ch * n_tokens;
    a.seq_tokens = seq_tokens;
    a.seq_begin = seq_begin;
    a.n_seqs = n_seqs;
    a.d_k = d_k;
    a.d_v = n_ch / n_head_v;
    a.n_ch = n_ch;
    a.state_floats = states.ne[0];
    a.n_head_v = n_head_v;
    a.scale = dst.param_f32(0);
    a.recurrent = delta_net_form(dst.param_i32(1)) == delta_net_form::recurrent;
    const delta_net_head_fn run = best_delta_net_head();
    const delta_net_plan plan = plan_delta_net(n_head_v, a.d_v, p.nth);
    for_each_delta_net_share(plan, n_head_v, a.d_v, p.ith, p.nth,
                             [&](int64_t head, int64_t begin, int64_t end) {
                                 a.head = head;
                                 a.head_k = head % n_head_k;
                                 a.col_begin = begin;
                                 a.col_end = end;
                                 run(a);
                             });
}

bool supports_gated_delta_net(const tensor &dst) {
    if (dst.type != dtype::f32) return false;
    for (int i = 0; i < 7; ++i)
        if (dst.src[i] == nullptr || dst.src[i]->type != (i == 6 ? dtype::i32 : dtype::f32)) return false;
    for (int i = 0; i < 5; ++i)
        if (dst.src[i]->nb[0] != sizeof(float) || dst.src[i]->nb[1] % sizeof(float) != 0) return false;
    return dst.src[5]->is_contiguous() && dst.src[6]->is_contiguous();
}

size_t work_size_gated_delta_net(const tensor &dst, int n_threads) {
    return delta_net_thread_bytes(dst) * size_t(n_threads);
}

}  // namespace weft::cpu
