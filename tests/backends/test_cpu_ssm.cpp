// tests/backends/test_cpu_ssm.cpp — the recurrent sequence ops (ssm_conv, ssm_scan, ssm_scan_mamba2)
// against slow double references: odd shapes, strided views, several sequences of unequal lengths
// interleaved in one call, each sequence alone equal to the interleaved call, split calls equal to
// one call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cpu/activations.h"
#include "backends/cpu/partition.h"
#include "backends/cpu/ssm_conv.h"
#include "backends/cpu_testing.h"
#include "weft/core/cpu_features.h"
#include "weft/core/error.h"

namespace weft::test {
namespace {

// A token -> sequence map with sequences of unequal lengths, interleaved, and the last sequence
// without tokens (its state must come out unchanged).
std::vector<int32_t> interleaved_sequences(int64_t n_tokens, int64_t n_seqs) {
    std::vector<int32_t> seq_of;
    for (int64_t t = 0; t < n_tokens; ++t) seq_of.push_back(int32_t((t * t + t / 3) % (n_seqs - 1)));
    return seq_of;
}

tensor *i32_input(context &ctx, const std::vector<int32_t> &values) {
    tensor *t = ctx.new_tensor(dtype::i32, {int64_t(values.size())});
    std::memcpy(t->data, values.data(), values.size() * sizeof(int32_t));
    return t;
}

// The reference result, laid out as the op's: y [n_ch, n_tokens], then the states.
struct ssm_reference {
    std::vector<double> out;
    reference_fn fn() const {
        return [this](int64_t i0, int64_t, int64_t, int64_t) { return out[size_t(i0)]; };
    }
};

ssm_reference conv_reference(const tensor &x, const tensor &states, const tensor &w,
                             const std::vector<int32_t> &seq_of) {
    const int64_t n_ch = x.ne[0], n_tokens = x.ne[1], d_conv = w.ne[0], n_seqs = states.ne[2];
    ssm_reference r;
    r.out.assign(size_t(n_ch * n_tokens + states.nelements()), 0.0);
    for (int64_t s = 0; s < n_seqs; ++s)
        for (int64_t c = 0; c < n_ch; ++c) {
            std::vector<double> window;  // every input of the sequence so far, its state first
            for (int64_t k = 0; k < d_conv - 1; ++k) window.push_back(at(states, k, c, s));
            for (int64_t t = 0; t < n_tokens; ++t) {
                if (seq_of[size_t(t)] != s) continue;
                window.push_back(at(x, c, t));
                double sum = 0.0;
                for (int64_t k = 0; k < d_conv; ++k)
                    sum += at(w, k, c) * window[window.size() - size_t(d_conv) + size_t(k)];
                r.out[size_t(t * n_ch + c)] = sum;
            }
            for (int64_t k = 0; k < d_conv - 1; ++k)
                r.out[size_t(n_ch * n_tokens + (s * n_ch + c) * (d_conv - 1) + k)] =
                    window[window.size() - size_t(d_conv - 1) + size_t(k)];
        }
    return r;
}

ssm_reference scan_reference(const tensor &x, const tensor &dt, const tensor &A, const tensor &B,
                             const tensor &C, const tensor &states, const std::vector<int32_t> &seq_of) {
    const int64_t n_ch = x.ne[0], n_tokens = x.ne[1], d_state = A.ne[0], n_seqs = states.ne[2];
    ssm_reference r;
    r.out.assign(size_t(n_ch * n_tokens + states.nelements()), 0.0);
    for (int64_t s = 0; s < n_seqs; ++s)
        for (int64_t c = 0; c < n_ch; ++c) {
            std::vector<double> h(static_cast<size_t>(d_state));
            for (int64_t i = 0; i < d_state; ++i) h[size_t(i)] = at(states, i, c, s);
            for (int64_t t = 0; t < n_tokens; ++t) {
                if (seq_of[size_t(t)] != s) continue;
                const double delta = std::log1p(std::exp(at(dt, c, t)));
                double y = 0.0;
                for (int64_t i = 0; i < d_state; ++i) {
                    h[size_t(i)] =
                        h[size_t(i)] * std::exp(delta * at(A, i, c)) + at(B, i, t) * delta * at(x, c, t);
                    y += at(C, i, t) * h[size_t(i)];
                }
                r.out[size_t(t * n_ch + c)] = y;
            }
            for (int64_t i = 0; i < d_state; ++i)
                r.out[size_t(n_ch * n_tokens + (s * n_ch + c) * d_state + i)] = h[size_t(i)];
        }
    return r;
}

// Builds a recurrent op from its per-token inputs (token t is column t of each), its states [...,
// n_seqs] (sequences along the last dim) and the token -> sequence map.
using recurrent_op_fn = std::function<tensor *(context &, const std::vector<tensor *> &token_inputs,
                                               tensor *states, tensor *seq_of)>;

tensor *run_alone(tensor *out, int n_threads) {
    graph g;
    build_forward_expand(g, out);
    auto b = host_memory_devices().front()->make_backend(n_threads);
    EXPECT_EQ(b->graph_compute(g, {}), compute_status::ok);
    return out;
}

// Each sequence computed alone (its tokens' columns copied out, its state alone) gives the bits the
// interleaved call gives it: its outputs and its final state. The op's batch invariance.
void expect_each_sequence_alone_equals_interleaved(const recurrent_op_fn &make,
                                                   const std::vector<tensor *> &token_inputs, tensor *states,
                                                   const std::vector<int32_t> &seq_of) {
    auto ctx = data_context();
    const int n_dims = states->n_dims() < 2 ? 2 : states->n_dims();
    const int64_t n_seqs = states->ne[n_dims - 1], state_floats = states->nelements() / n_seqs;
    const auto n_tokens = int64_t(seq_of.size());
    tensor *all = run_alone(make(*ctx, token_inputs, states, i32_input(*ctx, seq_of)), 3);
    const int64_t y_per_token = (all->nelements() - states->nelements()) / n_tokens;
    const auto *all_out = static_cast<const float *>(all->data);
    for (int64_t s = 0; s < n_seqs; ++s) {
        std::vector<int64_t> tokens;
        for (int64_t t = 0; t < n_tokens; ++t)
            if (seq_of[size_t(t)] == s) tokens.push_back(t);
        if (tokens.empty()) continue;
        std::vector<tensor *> inputs;
        for (tensor *in : token_inputs) {
            tensor *mine = ctx->new_tensor(dtype::f32, {in->ne[0], int64_t(tokens.size())});
            for (size_t j = 0; j < tokens.size(); ++j)
                for (int64_t i0 = 0; i0 < in->ne[0]; ++i0)
                    tensor_set_f32(*mine, tensor_get_f32(*in, i0, tokens[j]), i0, int64_t(j));
            inputs.push_back(mine);
        }
        int64_t ne[max_dims] = {states->ne[0], states->ne[1], states->ne[2], states->ne[3]};
        ne[n_dims - 1] = 1;
        tensor *state = ctx->new_tensor(dtype::f32, {ne[0], ne[1], ne[2], ne[3]});
        std::memcpy(state->data, static_cast<const float *>(states->data) + s * state_floats,
                    size_t(state_floats) * sizeof(float));
        tensor *alone =
            run_alone(make(*ctx, inputs, state, i32_input(*ctx, std::vector<int32_t>(tokens.size(), 0))), 2);
        const auto *alone_out = static_cast<const float *>(alone->data);
        for (size_t j = 0; j < tokens.size(); ++j)
            EXPECT_EQ(std::memcmp(alone_out + int64_t(j) * y_per_token, all_out + tokens[j] * y_per_token,
                                  size_t(y_per_token) * sizeof(float)),
                      0)
                << op_name(all->op) << ": sequence " << s << ", token " << tokens[j];
        EXPECT_EQ(std::memcmp(alone_out + int64_t(tokens.size()) * y_per_token,
                              all_out + n_tokens * y_per_token + s * state_floats,
                              size_t(state_floats) * sizeof(float)),
                  0)
            << op_name(all->op) << ": final state of sequence " << s;
    }
}

struct conv_case {
    int64_t n_ch, n_tokens, d_conv, n_seqs;
};

// x is a view into a wider projection (strided rows, as a model's in-projection gives it); channel
// counts below, at and past the kernel's blocks of 16 (1, 2 and 3 threads split them unevenly);
// LFM2's width 3, Mamba's 4, others, and one past the lane arrays (channel by channel).
TEST(CpuSsm, ConvMatchesReferenceWithInterleavedSequences) {
    for (const conv_case k : {conv_case{7, 11, 4, 3}, conv_case{13, 1, 4, 2}, conv_case{5, 9, 5, 4},
                              conv_case{33, 17, 3, 5}, conv_case{3, 6, 2, 2}, conv_case{50, 9, 3, 3},
                              conv_case{48, 1, 4, 4}, conv_case{37, 8, 7, 2}, conv_case{19, 6, 70, 3}}) {
        auto ctx = data_context();
        tensor *proj = ctx->new_tensor(dtype::f32, {k.n_ch + 5, k.n_tokens});
        tensor *x = view_2d(*ctx, proj, k.n_ch, k.n_tokens, proj->nb[1], 2 * sizeof(float));
        tensor *states = ctx->new_tensor(dtype::f32, {k.d_conv - 1, k.n_ch, k.n_seqs});
        tensor *w = ctx->new_tensor(dtype::f32, {k.d_conv, k.n_ch});
        fill_uniform(*proj, 1);
        if (states->nelements() > 0) fill_uniform(*states, 2);
        fill_uniform(*w, 3);
        const std::vector<int32_t> seq_of = interleaved_sequences(k.n_tokens, k.n_seqs);
        tensor *out = ssm_conv(*ctx, x, states, w, i32_input(*ctx, seq_of));
        out->set_name("conv");
        ASSERT_EQ(out->ne[0], k.n_ch * k.n_tokens + states->nelements());
        const ssm_reference ref = conv_reference(*x, *states, *w, seq_of);
        expect_matches_reference(out, ref.fn(), 1e-12);
        expect_each_sequence_alone_equals_interleaved(
            [&](context &c, const std::vector<tensor *> &in, tensor *st, tensor *seq) {
                return ssm_conv(c, in[0], st, w, seq);
            },
            {x}, states, seq_of);
    }
}

// The convolution's kernel is compiled per ISA (blocks of 16 channels in vector registers): every
// build gives the scalar build's bits, for every width path and channel ranges with a short block.
TEST(CpuSsm, ConvOfEveryIsaEqualsScalarBitForBit) {
    const cpu_features &f = host_cpu_features();
    std::vector<cpu::ssm_conv_channels_fn> builds;
    if (f.avx2 && f.fma) builds.push_back(cpu::ssm_conv_channels_avx2);
    if (f.avx512f && f.avx512bw && f.avx512vl && f.fma) builds.push_back(cpu::ssm_conv_channels_avx512);
    if (builds.empty()) GTEST_SKIP() << "no SIMD build of the convolution for this CPU";
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto random_floats = [&](int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (float &e : v) e = dist(rng);
        return v;
    };
    const int64_t n_ch = 45, n_tokens = 13, n_seqs = 3, x_row = n_ch + 3;
    const std::vector<int32_t> seq_of = interleaved_sequences(n_tokens, n_seqs);
    std::vector<int32_t> seq_tokens;
    std::vector<int64_t> seq_begin;
    for (int64_t s = 0; s < n_seqs; ++s) {
        seq_begin.push_back(int64_t(seq_tokens.size()));
        for (int64_t t = 0; t < n_tokens; ++t)
            if (seq_of[size_t(t)] == s) seq_tokens.push_back(int32_t(t));
    }
    seq_begin.push_back(int64_t(seq_tokens.size()));
    for (const int64_t d_conv : {2, 3, 4, 6, 70}) {
        const std::vector<float> x = random_floats(x_row * n_tokens), w = random_floats(d_conv * n_ch);
        const std::vector<float> states = random_floats((d_conv - 1) * n_ch * n_seqs);
        auto run = [&](cpu::ssm_conv_channels_fn kernel, int64_t c_begin, int64_t c_end) {
            std::vector<float> out(size_t(n_ch * n_tokens + (d_conv - 1) * n_ch * n_seqs), -7.0f);
            const cpu::ssm_conv_task a{.x = x.data(),
                                       .x_row = x_row,
                                       .weight = w.data(),
                                       .weight_row = d_conv,
                                       .states_in = states.data(),
                                       .states_out = out.data() + n_ch * n_tokens,
                                       .y = out.data(),
                                       .seq_tokens = seq_tokens.data(),
                                       .seq_begin = seq_begin.data(),
                                       .n_seqs = n_seqs,
                                       .n_ch = n_ch,
                                       .d_conv = d_conv};
            kernel(a, c_begin, c_end);
            return out;
        };
        for (const auto &[c_begin, c_end] : {std::pair<int64_t, int64_t>{0, n_ch}, {16, 45}, {3, 12}}) {
            const std::vector<float> want = run(cpu::ssm_conv_channels_scalar, c_begin, c_end);
            for (cpu::ssm_conv_channels_fn kernel : builds)
                EXPECT_EQ(
                    std::memcmp(run(kernel, c_begin, c_end).data(), want.data(), want.size() * sizeof(float)),
                    0)
                    << "width " << d_conv << ", channels [" << c_begin << ", " << c_end << ")";
        }
    }
}

struct scan_case {
    int64_t n_ch, n_tokens, d_state, n_seqs;
};

// B and C are views into one projection [dt_rank + 2 d_state, n_tokens], as a model makes them.
TEST(CpuSsm, ScanMatchesReferenceWithStridedInputsAndInterleavedSequences) {
    for (const scan_case k :
         {scan_case{7, 11, 5, 3}, scan_case{16, 1, 16, 2}, scan_case{9, 13, 3, 4}, scan_case{31, 8, 16, 2}}) {
        auto ctx = data_context();
        const int64_t dt_rank = 3;
        tensor *x = ctx->new_tensor(dtype::f32, {k.n_ch, k.n_tokens});
        tensor *dt = ctx->new_tensor(dtype::f32, {k.n_ch, k.n_tokens});
        tensor *A = ctx->new_tensor(dtype::f32, {k.d_state, k.n_ch});
        tensor *proj = ctx->new_tensor(dtype::f32, {dt_rank + 2 * k.d_state, k.n_tokens});
        tensor *states = ctx->new_tensor(dtype::f32, {k.d_state, k.n_ch, k.n_seqs});
        fill_uniform(*x, 11);
        fill_uniform(*dt, 12, -4.0f, 2.0f);
        fill_uniform(*A, 13, -4.0f, -0.1f);
        fill_uniform(*proj, 14);
        fill_uniform(*states, 15);
        // one dt above the softplus cut-off
        tensor_set_f32(*dt, 25.0f, 0, 0);
        tensor *B = view_2d(*ctx, proj, k.d_state, k.n_tokens, proj->nb[1], size_t(dt_rank) * sizeof(float));
        tensor *C = view_2d(*ctx, proj, k.d_state, k.n_tokens, proj->nb[1],
                            size_t(dt_rank + k.d_state) * sizeof(float));
        const std::vector<int32_t> seq_of = interleaved_sequences(k.n_tokens, k.n_seqs);
        tensor *out = ssm_scan(*ctx, x, dt, A, B, C, states, i32_input(*ctx, seq_of));
        out->set_name("scan");
        const ssm_reference ref = scan_reference(*x, *dt, *A, *B, *C, *states, seq_of);
        expect_matches_reference(out, ref.fn(), 1e-10);
    }
}

// A sequence's tokens in one call or split over two (the state handed from the first to the
// second) give the same outputs bit for bit: the ops' batch invariance.
TEST(CpuSsm, SplitCallsEqualOneCall) {
    const int64_t n_ch = 10, n_tokens = 7, d_state = 4, d_conv = 4;
    auto ctx = data_context();
    tensor *x = ctx->new_tensor(dtype::f32, {n_ch, n_tokens});
    tensor *dt = ctx->new_tensor(dtype::f32, {n_ch, n_tokens});
    tensor *A = ctx->new_tensor(dtype::f32, {d_state, n_ch});
    tensor *B = ctx->new_tensor(dtype::f32, {d_state, n_tokens});
    tensor *C = ctx->new_tensor(dtype::f32, {d_state, n_tokens});
    tensor *w = ctx->new_tensor(dtype::f32, {d_conv, n_ch});
    tensor *scan0 = ctx->new_tensor(dtype::f32, {d_state, n_ch, 1});
    tensor *conv0 = ctx->new_tensor(dtype::f32, {d_conv - 1, n_ch, 1});
    for (auto [t, seed] :
         {std::pair{x, 1u}, {dt, 2u}, {A, 3u}, {B, 4u}, {C, 5u}, {w, 6u}, {scan0, 7u}, {conv0, 8u}})
        fill_uniform(*t, seed);
    auto run = [&](int64_t t0, int64_t n, tensor *scan_in, tensor *conv_in) {
        auto cols = [&](tensor *m) { return view_2d(*ctx, m, m->ne[0], n, m->nb[1], size_t(t0) * m->nb[1]); };
        tensor *seq = i32_input(*ctx, std::vector<int32_t>(size_t(n), 0));
        tensor *scan = ssm_scan(*ctx, cols(x), cols(dt), A, cols(B), cols(C), scan_in, seq);
        tensor *conv = ssm_conv(*ctx, cols(x), conv_in, w, seq);
        for (tensor *o : {scan, conv}) {
            graph g;
            build_forward_expand(g, o);
            auto b = host_memory_devices().front()->make_backend(2);
            EXPECT_EQ(b->graph_compute(g, {}), compute_status::ok);
        }
        return std::pair{scan, conv};
    };
    const auto [scan_all, conv_all] = run(0, n_tokens, scan0, conv0);
    const auto [scan_a, conv_a] = run(0, 3, scan0, conv0);
    auto state_part = [&](tensor *out, tensor *like, int64_t n) {
        tensor *s = ctx->new_tensor(dtype::f32, {like->ne[0], like->ne[1], 1});
        std::memcpy(s->data, static_cast<float *>(out->data) + n_ch * n, s->nbytes());
        return s;
    };
    const auto [scan_b, conv_b] =
        run(3, n_tokens - 3, state_part(scan_a, scan0, 3), state_part(conv_a, conv0, 3));
    auto floats = [](tensor *t, int64_t begin, int64_t n) {
        const float *p = static_cast<const float *>(t->data) + begin;
        return std::vector<float>(p, p + n);
    };
    for (auto [all, a, b, state_len] :
         {std::tuple{scan_all, scan_a, scan_b, d_state}, std::tuple{conv_all, conv_a, conv_b, d_conv - 1}}) {
        std::vector<float> split = floats(a, 0, n_ch * 3);
        const std::vector<float> rest = floats(b, 0, n_ch * (n_tokens - 3));
        split.insert(split.end(), rest.begin(), rest.end());
        EXPECT_EQ(floats(all, 0, n_ch * n_tokens), split) << op_name(all->op);
        EXPECT_EQ(floats(all, n_ch * n_tokens, state_len * n_ch),
                  floats(b, n_ch * (n_tokens - 3), state_len * n_ch))
            << op_name(all->op);
    }
}

// The scan's step is compiled per ISA (vectorized exponentials and lane sums): every build gives the
// scalar build's bits, for state sizes with and without a tail past the 8 lanes.
TEST(CpuSsm, ScanStepOfEveryIsaEqualsScalarBitForBit) {
    const cpu_features &f = host_cpu_features();
    std::vector<cpu::ssm_scan_step_fn> builds;
    if (f.avx2 && f.fma) builds.push_back(cpu::ssm_scan_step_avx2);
    if (f.avx512f && f.avx512bw && f.avx512vl && f.fma) builds.push_back(cpu::ssm_scan_step_avx512);
    if (builds.empty()) GTEST_SKIP() << "no SIMD build of the scan step for this CPU";
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (const int64_t n : {1, 5, 8, 16, 21, 64}) {
        const size_t len = static_cast<size_t>(n);
        std::vector<float> a(len), b(len), c(len), h0(len);
        for (size_t i = 0; i < len; ++i) {
            a[i] = -float(i + 1);
            b[i] = dist(rng);
            c[i] = dist(rng);
            h0[i] = dist(rng);
        }
        std::vector<float> want_h = h0;
        const float want =
            cpu::ssm_scan_step_scalar(want_h.data(), a.data(), b.data(), c.data(), 0.03f, 0.7f, n);
        for (cpu::ssm_scan_step_fn step : builds) {
            std::vector<float> h = h0;
            const float got = step(h.data(), a.data(), b.data(), c.data(), 0.03f, 0.7f, n);
            EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << "state size " << n;
            EXPECT_EQ(std::memcmp(h.data(), want_h.data(), h.size() * sizeof(float)), 0)
                << "state size " << n;
        }
    }
}

// softplus, the scan's step size: every ISA build gives the scalar bits, close to log1p(exp(x)).
TEST(CpuSsm, SoftplusIsCloseToTheLibmOneAndTheSameInEveryIsa) {
    std::vector<float> x = {0.0f,   -0.0f,  1e-30f,  -1e-30f, 19.99f, 20.0f,
                            20.01f, 100.0f, -100.0f, -87.0f,  -90.0f};
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-30.0f, 30.0f);
    for (int i = 0; i < 2000; ++i) x.push_back(dist(rng));
    std::vector<float> want(x.size()), got(x.size());
    cpu::softplus_row_scalar(x.data(), want.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
        const double ref = x[i] > 20.0f ? double(x[i]) : std::log1p(std::exp(double(x[i])));
        EXPECT_NEAR(want[i], ref, 1e-6 * ref + 1e-37) << x[i];  // 0 where e^x is subnormal
    }
    const cpu_features &f = host_cpu_features();
    if (f.avx2 && f.fma) {
        cpu::softplus_row_avx2(x.data(), got.data(), int64_t(x.size()));
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << "avx2";
    }
    if (f.avx512f && f.avx512bw && f.avx512vl && f.fma) {
        cpu::softplus_row_avx512(x.data(), got.data(), int64_t(x.size()));
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << "avx512";
    }
}

// Mamba-2's scan in doubles, sequence by sequence; layout as the op's result.
ssm_reference mamba2_reference(const tensor &x, const tensor &dt, const tensor &A, const tensor &B,
                               const tensor &C, const tensor *D, const tensor &states,
                               const std::vector<int32_t> &seq_of) {
    const int64_t n_ch = x.ne[0], n_tokens = x.ne[1], n_head = dt.ne[0], head_dim = n_ch / n_head;
    const int64_t d_state = states.ne[0], n_seqs = states.ne[2], n_group = B.ne[0] / d_state;
    ssm_reference r;
    r.out.assign(size_t(n_ch * n_tokens + states.nelements()), 0.0);
    for (int64_t s = 0; s < n_seqs; ++s)
        for (int64_t ch = 0; ch < n_ch; ++ch) {
            const int64_t h = ch / head_dim, g = h / (n_head / n_group);
            std::vector<double> st(static_cast<size_t>(d_state));
            for (int64_t i = 0; i < d_state; ++i) st[size_t(i)] = at(states, i, ch, s);
            for (int64_t t = 0; t < n_tokens; ++t) {
                if (seq_of[size_t(t)] != s) continue;
                const double raw = at(dt, h, t);
                const double delta = raw > 20.0 ? raw : std::log1p(std::exp(raw));
                const double decay = std::exp(delta * at(A, h));
                double y = 0.0;
                for (int64_t i = 0; i < d_state; ++i) {
                    st[size_t(i)] = st[size_t(i)] * decay + at(B, g * d_state + i, t) * at(x, ch, t) * delta;
                    y += at(C, g * d_state + i, t) * st[size_t(i)];
                }
                r.out[size_t(t * n_ch + ch)] = y + (D ? at(*D, h) * at(x, ch, t) : 0.0);
            }
            for (int64_t i = 0; i < d_state; ++i)
                r.out[size_t(n_ch * n_tokens + (s * n_ch + ch) * d_state + i)] = st[size_t(i)];
        }
    return r;
}

struct mamba2_case {
    int64_t head_dim, n_head, n_group, d_state, n_tokens, n_seqs;
    bool with_D;
};

// x, B, C and dt are views into one projection [x | B | C | dt | pad, n_tokens], as the model's
// in-projection gives them (strided rows); groups of 1, 2 and 3; state sizes with and without a tail
// past the 16 lanes.
TEST(CpuSsm, Mamba2ScanMatchesReferenceWithStridedInputsAndInterleavedSequences) {
    for (const mamba2_case k : {mamba2_case{3, 4, 2, 5, 11, 3, true}, mamba2_case{4, 6, 3, 16, 9, 4, false},
                                mamba2_case{5, 2, 1, 21, 13, 2, true}, mamba2_case{8, 3, 3, 32, 1, 2, true},
                                mamba2_case{16, 4, 1, 64, 7, 3, true}}) {
        auto ctx = data_context();
        const int64_t n_ch = k.head_dim * k.n_head, n_bc = k.d_state * k.n_group;
        const int64_t width = n_ch + 2 * n_bc + k.n_head + 3;
        tensor *proj = ctx->new_tensor(dtype::f32, {width, k.n_tokens});
        tensor *A = ctx->new_tensor(dtype::f32, {k.n_head});
        tensor *D = ctx->new_tensor(dtype::f32, {k.n_head});
        tensor *states = ctx->new_tensor(dtype::f32, {k.d_state, n_ch, k.n_seqs});
        fill_uniform(*proj, 21);
        fill_uniform(*A, 22, -3.0f, -0.05f);
        fill_uniform(*D, 23);
        fill_uniform(*states, 24);
        auto cols = [&](int64_t offset, int64_t rows) {
            return view_2d(*ctx, proj, rows, k.n_tokens, proj->nb[1], size_t(offset) * sizeof(float));
        };
        tensor *x = cols(0, n_ch), *B = cols(n_ch, n_bc), *C = cols(n_ch + n_bc, n_bc);
        tensor *dt = cols(n_ch + 2 * n_bc, k.n_head);
        for (int64_t t = 0; t < k.n_tokens; ++t)
            for (int64_t h = 0; h < k.n_head; ++h)
                tensor_set_f32(*dt, float(-4.0 + 5.0 * ((h * 7 + t * 3) % 11) / 10.0), h, t);
        tensor_set_f32(*dt, 25.0f, 0, 0);  // above the softplus cut-off
        const std::vector<int32_t> seq_of = interleaved_sequences(k.n_tokens, k.n_seqs);
        tensor *out =
            ssm_scan_mamba2(*ctx, x, dt, A, B, C, states, i32_input(*ctx, seq_of), k.with_D ? D : nullptr);
        out->set_name("mamba2 scan");
        const ssm_reference ref =
            mamba2_reference(*x, *dt, *A, *B, *C, k.with_D ? D : nullptr, *states, seq_of);
        expect_matches_reference(out, ref.fn(), 1e-10);
        expect_each_sequence_alone_equals_interleaved(
            [&](context &c, const std::vector<tensor *> &in, tensor *st, tensor *seq) {
                return ssm_scan_mamba2(c, in[0], in[1], A, in[2], in[3], st, seq, k.with_D ? D : nullptr);
            },
            {x, dt, B, C}, states, seq_of);
    }
}

TEST(CpuSsm, Mamba2ScanStepOfEveryIsaEqualsScalarBitForBit) {
    const cpu_features &f = host_cpu_features();
    std::vector<cpu::ssm_scan_mamba2_step_fn> builds;
    if (f.avx2 && f.fma) builds.push_back(cpu::ssm_scan_mamba2_step_avx2);
    if (f.avx512f && f.avx512bw && f.avx512vl && f.fma) builds.push_back(cpu::ssm_scan_mamba2_step_avx512);
    if (builds.empty()) GTEST_SKIP() << "no SIMD build of the Mamba-2 scan step for this CPU";
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (const int64_t n : {1, 7, 16, 21, 64, 128}) {
        const size_t len = static_cast<size_t>(n);
        std::vector<float> b(len), c(len), h0(len);
        for (size_t i = 0; i < len; ++i) {
            b[i] = dist(rng);
            c[i] = dist(rng);
            h0[i] = dist(rng);
        }
        std::vector<float> want_h = h0;
        const float want = cpu::ssm_scan_mamba2_step_scalar(want_h.data(), want_h.data(), b.data(), c.data(),
                                                            0.93f, 0.7f, n);
        for (cpu::ssm_scan_mamba2_step_fn step : builds) {
            std::vector<float> h = h0, h_out(len, -5.0f);
            const float got = step(h.data(), h.data(), b.data(), c.data(), 0.93f, 0.7f, n);
            EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << "state size " << n;
            EXPECT_EQ(std::memcmp(h.data(), want_h.data(), h.size() * sizeof(float)), 0)
                << "state size " << n;
            // into another state: the same bits, the state read untouched
            const float got_out = step(h0.data(), h_out.data(), b.data(), c.data(), 0.93f, 0.7f, n);
            EXPECT_EQ(std::memcmp(&got_out, &want, sizeof got_out), 0) << "state size " << n;
            EXPECT_EQ(std::memcmp(h_out.data(), want_h.data(), h_out.size() * sizeof(float)), 0)
                << "state size " << n;
        }
    }
}

TEST(CpuSsm, Mamba2ShapeErrorsNameTheProblem) {
    auto ctx = data_context();
    tensor *x = ctx->new_tensor(dtype::f32, {12, 3});  // 4 heads of 3
    tensor *dt = ctx->new_tensor(dtype::f32, {4, 3});
    tensor *A = ctx->new_tensor(dtype::f32, {4});
    tensor *BC = ctx->new_tensor(dtype::f32, {16, 3});  // 2 groups of 8
    tensor *states = ctx->new_tensor(dtype::f32, {8, 12, 2});
    tensor *seq = ctx->new_tensor(dtype::i32, {3});
    EXPECT_NO_THROW(ssm_scan_mamba2(*ctx, x, dt, A, BC, BC, states, seq));
    auto expect_error = [](auto &&make, const char *what) {
        try {
            make();
            ADD_FAILURE() << "expected an error about " << what;
        } catch (const error &e) {
            EXPECT_NE(std::string(e.what()).find("[ssm_scan_mamba2]"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    tensor *dt5 = ctx->new_tensor(dtype::f32, {5, 3});
    expect_error([&] { ssm_scan_mamba2(*ctx, x, dt5, A, BC, BC, states, seq); }, "n_head dividing");
    tensor *A3 = ctx->new_tensor(dtype::f32, {3});
    expect_error([&] { ssm_scan_mamba2(*ctx, x, dt, A3, BC, BC, states, seq); }, "A must be");
    tensor *BC3 = ctx->new_tensor(dtype::f32, {24, 3});  // 3 groups do not divide 4 heads
    expect_error([&] { ssm_scan_mamba2(*ctx, x, dt, A, BC3, BC3, states, seq); }, "groups must divide");
    tensor *states_bad = ctx->new_tensor(dtype::f32, {8, 11, 2});
    expect_error([&] { ssm_scan_mamba2(*ctx, x, dt, A, BC, BC, states_bad, seq); }, "states must be");
    expect_error([&] { ssm_scan_mamba2(*ctx, x, dt, A, BC, BC, states, seq, A3); }, "D must be");
}

// --- gated delta net ---------------------------------------------------------------------------

// One head's state of one sequence in the op's layout (ops.h), as doubles: the state it stands for
// (S0 with the pending block folded in), st[i * d_v + j] = S[i, j].
std::vector<double> delta_net_current_state(const float *p, int64_t d_k, int64_t d_v) {
    const int64_t c = gated_delta_net_chunk;
    const float *kt = p + d_k * d_v, *us = kt + d_k * c, *cum = us + c * d_v;
    const auto n = int64_t(cum[c]);
    std::vector<double> st(p, p + d_k * d_v);
    if (n == 0) return st;
    const double last = cum[n - 1];
    for (double &x : st) x *= std::exp(last);
    for (int64_t s = 0; s < n; ++s)
        for (int64_t i = 0; i < d_k; ++i)
            for (int64_t j = 0; j < d_v; ++j)
                st[size_t(i * d_v + j)] +=
                    std::exp(last - double(cum[s])) * double(kt[i * c + s]) * us[s * d_v + j];
    return st;
}

// The delta rule's recurrence in doubles, token by token, sequence by sequence, from the states'
// current states: y [n_ch, n_tokens] in `out`, the final states [n_seqs][n_head][d_k * d_v].
struct delta_net_expected {
    std::vector<double> out;
    std::vector<std::vector<std::vector<double>>> states;
};

delta_net_expected delta_net_reference(const tensor &q, const tensor &k, const tensor &v, const tensor &g,
                                       const tensor &beta, const tensor &states, int64_t d_k, float scale,
                                       const std::vector<int32_t> &seq_of) {
    const int64_t n_ch = v.ne[0], n_tokens = v.ne[1], n_head = g.ne[0], d_v = n_ch / n_head;
    const int64_t n_head_k = q.ne[0] / d_k, n_seqs = states.ne[2];
    delta_net_expected r;
    r.out.assign(size_t(n_ch * n_tokens), 0.0);
    r.states.assign(size_t(n_seqs), {});
    for (int64_t s = 0; s < n_seqs; ++s)
        for (int64_t h = 0; h < n_head; ++h) {
            const int64_t hk = h % n_head_k;
            std::vector<double> st = delta_net_current_state(
                static_cast<const float *>(states.data) + (s * n_head + h) * states.ne[0], d_k, d_v);
            auto S = [&](int64_t i, int64_t j) -> double & { return st[size_t(i * d_v + j)]; };
            for (int64_t t = 0; t < n_tokens; ++t) {
                if (seq_of[size_t(t)] != s) continue;
                const double decay = std::exp(at(g, h, t)), b = at(beta, h, t);
                for (int64_t j = 0; j < d_v; ++j) {
                    double sk = 0.0;
                    for (int64_t i = 0; i < d_k; ++i) {
                        S(i, j) *= decay;
                        sk += S(i, j) * at(k, hk * d_k + i, t);
                    }
                    const double u = b * (at(v, h * d_v + j, t) - sk);
                    double y = 0.0;
                    for (int64_t i = 0; i < d_k; ++i) {
                        S(i, j) += at(k, hk * d_k + i, t) * u;
                        y += S(i, j) * at(q, hk * d_k + i, t);
                    }
                    r.out[size_t(t * n_ch + h * d_v + j)] = double(scale) * y;
                }
            }
            r.states[size_t(s)].push_back(st);
        }
    return r;
}

// The inputs of a delta net layer as the model makes them: q, k, v, g, beta views into one
// projection [q | k | v | g | beta | pad, n_tokens], q and k L2-normalised per head, beta in (0, 1),
// g in [-1.5, -0.01]; states with random S0 and no block pending.
struct delta_net_inputs {
    tensor *q, *k, *v, *g, *beta, *states;
    int64_t d_k, d_v;
};

delta_net_inputs make_delta_net_inputs(context &ctx, int64_t d_k, int64_t d_v, int64_t n_head_k,
                                       int64_t n_head_v, int64_t n_tokens, int64_t n_seqs, uint32_t seed) {
    const int64_t nq = d_k * n_head_k, nv = d_v * n_head_v;
    tensor *proj = ctx.new_tensor(dtype::f32, {2 * nq + nv + 2 * n_head_v + 3, n_tokens});
    fill_uniform(*proj, seed);
    auto cols = [&](int64_t offset, int64_t rows) {
        return view_2d(ctx, proj, rows, n_tokens, proj->nb[1], size_t(offset) * sizeof(float));
    };
    const int64_t state_floats = gated_delta_net_state_floats(d_k, d_v);
    delta_net_inputs in{cols(0, nq),
                        cols(nq, nq),
                        cols(2 * nq, nv),
                        cols(2 * nq + nv, n_head_v),
                        cols(2 * nq + nv + n_head_v, n_head_v),
                        ctx.new_tensor(dtype::f32, {state_floats, n_head_v, n_seqs}),
                        d_k,
                        d_v};
    std::memset(in.states->data, 0, in.states->nbytes());
    std::mt19937 rng(seed + 1);
    std::uniform_real_distribution<float> state(-0.5f, 0.5f), decay(-1.5f, -0.01f), gate(0.05f, 0.95f);
    for (int64_t h = 0; h < n_head_v * n_seqs; ++h)
        for (int64_t e = 0; e < d_k * d_v; ++e)
            static_cast<float *>(in.states->data)[h * state_floats + e] = state(rng);
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (tensor *m : {in.q, in.k})
            for (int64_t h = 0; h < n_head_k; ++h) {
                double norm = 0.0;
                for (int64_t i = 0; i < d_k; ++i) norm += at(*m, h * d_k + i, t) * at(*m, h * d_k + i, t);
                for (int64_t i = 0; i < d_k; ++i)
                    tensor_set_f32(*m, float(at(*m, h * d_k + i, t) / std::sqrt(norm)), h * d_k + i, t);
            }
        for (int64_t h = 0; h < n_head_v; ++h) {
            tensor_set_f32(*in.g, decay(rng), h, t);
            tensor_set_f32(*in.beta, gate(rng), h, t);
        }
    }
    return in;
}

// The op's outputs [y | states] after a run: y, and the current state of every sequence and head.
struct delta_net_result {
    std::vector<float> y;
    std::vector<double> states;  // sequence by sequence, head by head, d_k * d_v each
};

delta_net_result delta_net_result_of(const tensor &out, const delta_net_inputs &in) {
    const int64_t n_y = in.v->ne[0] * in.v->ne[1], state_floats = in.states->ne[0];
    const auto *p = static_cast<const float *>(out.data);
    delta_net_result r{std::vector<float>(p, p + n_y), {}};
    for (int64_t h = 0; h < in.states->ne[1] * in.states->ne[2]; ++h) {
        const std::vector<double> st = delta_net_current_state(p + n_y + h * state_floats, in.d_k, in.d_v);
        r.states.insert(r.states.end(), st.begin(), st.end());
    }
    return r;
}

struct delta_net_case {
    int64_t d_k, d_v, n_head_k, n_head_v, n_tokens, n_seqs;
};

// Odd head sizes (tails past the 16 lanes), value heads tiled over fewer q/k heads, strided inputs,
// interleaved sequences; 150 tokens give the first sequence two whole blocks and a part of a third.
// 1, 2 and 3 threads give the same bits; each sequence alone gives the interleaved call's bits.
TEST(CpuDeltaNet, MatchesTheRecurrenceWithStridedInputsAndInterleavedSequences) {
    for (const delta_net_case c : {delta_net_case{5, 3, 2, 4, 11, 3}, delta_net_case{16, 16, 1, 3, 7, 2},
                                   delta_net_case{21, 7, 3, 3, 1, 2}, delta_net_case{24, 16, 2, 4, 150, 3}}) {
        SCOPED_TRACE("d_k " + std::to_string(c.d_k) + ", " + std::to_string(c.n_tokens) + " tokens");
        auto ctx = data_context(size_t(256) << 20);
        const delta_net_inputs in =
            make_delta_net_inputs(*ctx, c.d_k, c.d_v, c.n_head_k, c.n_head_v, c.n_tokens, c.n_seqs, 31);
        // every eighth token to sequence 1 when there are three, the rest to sequence 0 (of 150: two
        // whole blocks and a rest), none to the last
        std::vector<int32_t> seq_of;
        for (int64_t t = 0; t < c.n_tokens; ++t) seq_of.push_back(c.n_seqs > 2 && t % 8 == 7 ? 1 : 0);
        const float scale = 1.0f / std::sqrt(float(c.d_k));
        tensor *out =
            gated_delta_net(*ctx, in.q, in.k, in.v, in.g, in.beta, in.states, i32_input(*ctx, seq_of), scale);
        out->set_name("delta net");
        const delta_net_expected ref =
            delta_net_reference(*in.q, *in.k, *in.v, *in.g, *in.beta, *in.states, c.d_k, scale, seq_of);
        tensor *y = view_1d(*ctx, out, c.d_v * c.n_head_v * c.n_tokens, 0);
        expect_matches_reference(
            out, [&](int64_t i0, int64_t, int64_t, int64_t) { return ref.out[size_t(i0)]; }, 1e-10, y);
        const delta_net_result got = delta_net_result_of(*out, in);
        std::vector<double> want;
        for (const auto &seq : ref.states)
            for (const auto &head : seq) want.insert(want.end(), head.begin(), head.end());
        EXPECT_LE(normalized_error(std::vector<float>(got.states.begin(), got.states.end()), want), 1e-10);
        expect_each_sequence_alone_equals_interleaved(
            [&](context &cx, const std::vector<tensor *> &t, tensor *st, tensor *seq) {
                return gated_delta_net(cx, t[0], t[1], t[2], t[3], t[4], st, seq, scale);
            },
            {in.q, in.k, in.v, in.g, in.beta}, in.states, seq_of);
    }
}

// Runs the tokens [0, n) as calls of the given sizes, each continuing the last one's states, call i
// in forms[i] (the last form for the calls past the list), on n_threads threads, token t of sequence
// seq_of[t] (all of sequence 0 when seq_of is empty): the y of every token, then the final states,
// as the op lays them out.
std::vector<float> delta_net_in_calls(const delta_net_inputs &in, const std::vector<int64_t> &calls,
                                      float scale,
                                      const std::vector<delta_net_form> &forms = {delta_net_form::automatic},
                                      int n_threads = 2, const std::vector<int32_t> &seq_of = {}) {
    const int64_t n_y = in.v->ne[0];
    std::vector<float> ys, state(static_cast<const float *>(in.states->data),
                                 static_cast<const float *>(in.states->data) + in.states->nelements());
    int64_t first = 0;
    for (size_t call = 0; call < calls.size(); ++call) {
        const int64_t n = calls[call];
        const delta_net_form form = forms[std::min(call, forms.size() - 1)];
        auto ctx = data_context(size_t(16) << 20);
        auto rows = [&](tensor *t) {
            return view_2d(*ctx, t, t->ne[0], n, t->nb[1], size_t(first) * t->nb[1]);
        };
        tensor *st = ctx->new_tensor(dtype::f32, {in.states->ne[0], in.states->ne[1], in.states->ne[2]});
        std::memcpy(st->data, state.data(), state.size() * sizeof(float));
        const std::vector<int32_t> seqs =
            seq_of.empty() ? std::vector<int32_t>(size_t(n), 0)
                           : std::vector<int32_t>(seq_of.begin() + first, seq_of.begin() + first + n);
        tensor *out = gated_delta_net(*ctx, rows(in.q), rows(in.k), rows(in.v), rows(in.g), rows(in.beta), st,
                                      i32_input(*ctx, seqs), scale, form);
        run_alone(out, n_threads);
        const auto *p = static_cast<const float *>(out->data);
        ys.insert(ys.end(), p, p + n_y * n);
        state.assign(p + n_y * n, p + n_y * n + in.states->nelements());
        first += n;
    }
    ys.insert(ys.end(), state.begin(), state.end());
    return ys;
}

// The block form's bits do not depend on how a sequence is cut into calls: one call, ubatch-like
// pieces across the block boundaries, a piece ending on one, and token by token (decoding) all give
// the same outputs and states, at an odd head size and at the models' (128).
TEST(CpuDeltaNet, AnyCutOfASequenceIntoCallsGivesTheSameBits) {
    for (const auto &[d_k, d_v, n_head_k, n_head_v] :
         {std::tuple<int64_t, int64_t, int64_t, int64_t>{21, 19, 1, 2}, {128, 128, 2, 4}}) {
        SCOPED_TRACE("d_k " + std::to_string(d_k));
        auto ctx = data_context(size_t(64) << 20);
        const int64_t n = 150;
        const delta_net_inputs in = make_delta_net_inputs(*ctx, d_k, d_v, n_head_k, n_head_v, n, 1, 53);
        const float scale = 1.0f / std::sqrt(float(d_k));
        const std::vector<float> whole = delta_net_in_calls(in, {n}, scale);
        for (const std::vector<int64_t> &calls :
             std::vector<std::vector<int64_t>>{{60, 40, 50},
                                               {64, 64, 22},
                                               {1, 63, 1, 85},
                                               {37, 100, 13},
                                               std::vector<int64_t>(size_t(n), 1)})
            EXPECT_EQ(delta_net_in_calls(in, calls, scale), whole)
                << calls.size() << " calls, first " << calls[0];
        // and it is not the recurrence run twice: the forms' sums differ in their last bits
        EXPECT_NE(delta_net_in_calls(in, {n}, scale, {delta_net_form::recurrent}), whole);
    }
}

// The threads share a call's heads out in pieces of their value columns where that pays
// (plan_delta_net): 1 to 7 and 64 threads give the bits of 1, in the block form, the recurrent form
// and the recurrent form continuing pending blocks, over calls that leave blocks pending, for
// interleaved sequences (the last one without tokens), heads not a multiple of the threads, value
// heads of odd multiples of 8 and 16 columns (pieces of 16 with a tail of 8) and of 7 (whole heads).
TEST(CpuDeltaNet, HeadsSharedOutInPiecesGiveTheSameBitsAtAnyThreadCount) {
    const int threads[] = {2, 3, 4, 5, 6, 7, 64};
    int split = 0;  // the thread counts that cut heads into pieces, over the shapes
    for (const delta_net_case c : {delta_net_case{16, 24, 1, 3, 150, 2}, delta_net_case{8, 48, 2, 6, 100, 3},
                                   delta_net_case{21, 80, 1, 5, 90, 3}, delta_net_case{5, 7, 1, 3, 80, 2}}) {
        SCOPED_TRACE("d_v " + std::to_string(c.d_v) + ", " + std::to_string(c.n_head_v) + " heads");
        for (const int nth : threads)
            split += cpu::plan_delta_net(c.n_head_v, c.d_v, nth).pieces_per_head > 1;
        auto ctx = data_context(size_t(64) << 20);
        const delta_net_inputs in =
            make_delta_net_inputs(*ctx, c.d_k, c.d_v, c.n_head_k, c.n_head_v, c.n_tokens, c.n_seqs, 61);
        const std::vector<int32_t> seq_of = interleaved_sequences(c.n_tokens, c.n_seqs);
        const float scale = 1.0f / std::sqrt(float(c.d_k));
        const std::vector<int64_t> calls = {c.n_tokens - 11, 1, 10};
        using forms = std::vector<delta_net_form>;
        for (const forms &f : {forms{delta_net_form::automatic}, forms{delta_net_form::recurrent},
                               forms{delta_net_form::automatic, delta_net_form::recurrent}}) {
            const std::vector<float> one = delta_net_in_calls(in, calls, scale, f, 1, seq_of);
            for (const int nth : threads)
                EXPECT_EQ(delta_net_in_calls(in, calls, scale, f, nth, seq_of), one)
                    << nth << " threads, " << (f[0] == delta_net_form::automatic ? "block" : "recurrent")
                    << " form first, " << f.size() << " forms";
        }
    }
    EXPECT_GE(split, 8) << "the pieces are not exercised";
}

// The block form against the recurrence, at a model's head size (128) over 2 whole blocks and a
// short rest (a long one would decay the blocks' last bits out of the state), in one call and cut
// into calls across the blocks: within 1e-6 normalized error, outputs and states; every ISA build
// gives the same bits.
TEST(CpuDeltaNet, ChunkedFormAgreesWithTheRecurrentForm) {
    auto ctx = data_context(size_t(256) << 20);
    const int64_t d = 128, n_tokens = 131;
    const delta_net_inputs in = make_delta_net_inputs(*ctx, d, d, 1, 2, n_tokens, 1, 41);
    tensor *seq = i32_input(*ctx, std::vector<int32_t>(size_t(n_tokens), 0));
    const float scale = 1.0f / std::sqrt(float(d));
    tensor *chunked = gated_delta_net(*ctx, in.q, in.k, in.v, in.g, in.beta, in.states, seq, scale);
    tensor *recurrent = gated_delta_net(*ctx, in.q, in.k, in.v, in.g, in.beta, in.states, seq, scale,
                                        delta_net_form::recurrent);
    run_alone(chunked, 3);
    run_alone(recurrent, 2);
    const delta_net_result want = delta_net_result_of(*recurrent, in),
                           got = delta_net_result_of(*chunked, in);
    EXPECT_LE(normalized_error(got.y, std::vector<double>(want.y.begin(), want.y.end())), 1e-6) << "outputs";
    EXPECT_NE(got.y, want.y) << "the chunked form did not run";  // the forms' sums differ
    EXPECT_LE(normalized_error(std::vector<float>(got.states.begin(), got.states.end()), want.states), 1e-6)
        << "states";
    // the recurrent form continuing a block form's state (its pending block of 6 folded first), and
    // the other way round
    for (const auto &forms : {std::vector{delta_net_form::automatic, delta_net_form::recurrent},
                              std::vector{delta_net_form::recurrent, delta_net_form::automatic}}) {
        const std::vector<float> mixed = delta_net_in_calls(in, {70, 61}, scale, forms);
        EXPECT_LE(normalized_error(std::vector<float>(mixed.begin(), mixed.begin() + int64_t(want.y.size())),
                                   std::vector<double>(want.y.begin(), want.y.end())),
                  1e-6)
            << "first call " << (forms[0] == delta_net_form::automatic ? "block" : "recurrent") << " form";
    }
    const std::vector<float> best(static_cast<const float *>(chunked->data),
                                  static_cast<const float *>(chunked->data) + chunked->nelements());
    for (int build = 0; build < 2; ++build) {
        (build == 0 ? force_scalar : limit_to_avx2)(true);
        run_alone(chunked, 1);
        (build == 0 ? force_scalar : limit_to_avx2)(false);
        EXPECT_EQ(std::vector<float>(static_cast<const float *>(chunked->data),
                                     static_cast<const float *>(chunked->data) + chunked->nelements()),
                  best)
            << (build == 0 ? "scalar" : "avx2") << " build";
    }
}

TEST(CpuDeltaNet, ShapeErrorsNameTheProblem) {
    auto ctx = data_context();
    const delta_net_inputs in = make_delta_net_inputs(*ctx, 8, 4, 2, 4, 3, 2, 5);
    tensor *seq = ctx->new_tensor(dtype::i32, {3});
    EXPECT_NO_THROW(gated_delta_net(*ctx, in.q, in.k, in.v, in.g, in.beta, in.states, seq, 0.3f));
    auto expect_error = [](auto &&make, const char *what) {
        try {
            make();
            ADD_FAILURE() << "expected an error about " << what;
        } catch (const error &e) {
            EXPECT_NE(std::string(e.what()).find("[gated_delta_net]"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    tensor *g3 = ctx->new_tensor(dtype::f32, {3, 3});  // 3 value heads: not a multiple of 2 q/k heads
    expect_error([&] { gated_delta_net(*ctx, in.q, in.k, in.v, g3, g3, in.states, seq, 0.3f); },
                 "must divide");
    tensor *states_bad = ctx->new_tensor(dtype::f32, {gated_delta_net_state_floats(8, 4) + 16, 4, 2});
    expect_error([&] { gated_delta_net(*ctx, in.q, in.k, in.v, in.g, in.beta, states_bad, seq, 0.3f); },
                 "gated_delta_net_state_floats");
    tensor *states_rows = ctx->new_tensor(dtype::f32, {gated_delta_net_state_floats(8, 4), 3, 2});
    expect_error([&] { gated_delta_net(*ctx, in.q, in.k, in.v, in.g, in.beta, states_rows, seq, 0.3f); },
                 "states must be");
    tensor *k_short = ctx->new_tensor(dtype::f32, {8, 3});
    expect_error([&] { gated_delta_net(*ctx, in.q, k_short, in.v, in.g, in.beta, in.states, seq, 0.3f); },
                 "share a shape");
}

// The in-place form (ops.h) of an op: states is a cache of more columns than sequences, each
// sequence's state in a column of its own (not in order), its new state written there (in place) or
// into a spare column. For 1, 2 and 3 threads the op gives the gathered form's y and writes its
// states into the columns written, bit for bit, leaving every other column as it was.
using in_place_op_fn = std::function<tensor *(context &, tensor *states, tensor *seq_of, tensor *rows)>;

void expect_in_place_equals_gathered(const in_place_op_fn &make, tensor *states,
                                     const std::vector<int32_t> &seq_of) {
    auto ctx = data_context();
    const int64_t n_seqs = states->ne[2], column_floats = states->ne[0] * states->ne[1];
    const int64_t n_cols = 2 * n_seqs + 1;
    tensor *gathered = run_alone(make(*ctx, states, i32_input(*ctx, seq_of), nullptr), 3);
    const int64_t n_y = gathered->nelements() - states->nelements();
    const auto *want = static_cast<const float *>(gathered->data);
    for (const bool spare : {false, true})
        for (const int n_threads : {1, 2, 3}) {
            std::vector<int32_t> columns;  // read: reversed from 1 (0 unused), written: after them
            for (int64_t s = 0; s < n_seqs; ++s) {
                columns.push_back(int32_t(n_seqs - s));
                columns.push_back(spare ? int32_t(n_seqs + 1 + s) : int32_t(n_seqs - s));
            }
            tensor *cache = ctx->new_tensor(dtype::f32, {states->ne[0], states->ne[1], n_cols});
            fill_uniform(*cache, 40 + uint32_t(n_threads));
            auto *cols = static_cast<float *>(cache->data);
            for (int64_t s = 0; s < n_seqs; ++s)
                std::memcpy(cols + columns[size_t(2 * s)] * column_floats,
                            static_cast<const float *>(states->data) + s * column_floats,
                            size_t(column_floats) * sizeof(float));
            const std::vector<float> before(cols, cols + cache->nelements());
            tensor *rows = ctx->new_tensor(dtype::i32, {2, n_seqs});
            std::memcpy(rows->data, columns.data(), columns.size() * sizeof(int32_t));
            tensor *y = run_alone(make(*ctx, cache, i32_input(*ctx, seq_of), rows), n_threads);
            const std::string what = std::string(op_name(y->op)) +
                                     (spare ? ", a spare column" : ", in place") + ", " +
                                     std::to_string(n_threads) + " threads";
            ASSERT_EQ(y->nelements(), n_y) << what << ": the in-place result is y alone";
            EXPECT_EQ(std::memcmp(y->data, want, size_t(n_y) * sizeof(float)), 0) << what << ": y";
            for (int64_t col = 0; col < n_cols; ++col) {
                int64_t written = -1;
                for (int64_t s = 0; s < n_seqs; ++s)
                    if (columns[size_t(2 * s + 1)] == col) written = s;
                const float *expected =
                    written < 0 ? before.data() + col * column_floats : want + n_y + written * column_floats;
                EXPECT_EQ(
                    std::memcmp(cols + col * column_floats, expected, size_t(column_floats) * sizeof(float)),
                    0)
                    << what << ": column " << col << (written < 0 ? " (not written)" : "");
            }
        }
}

TEST(CpuSsm, InPlaceConvEqualsTheGatheredForm) {
    for (const conv_case k :
         {conv_case{7, 11, 4, 3}, conv_case{33, 17, 3, 5}, conv_case{48, 1, 4, 4}, conv_case{19, 6, 70, 3}}) {
        auto ctx = data_context();
        tensor *x = ctx->new_tensor(dtype::f32, {k.n_ch, k.n_tokens});
        tensor *states = ctx->new_tensor(dtype::f32, {k.d_conv - 1, k.n_ch, k.n_seqs});
        tensor *w = ctx->new_tensor(dtype::f32, {k.d_conv, k.n_ch});
        fill_uniform(*x, 1);
        fill_uniform(*states, 2);
        fill_uniform(*w, 3);
        expect_in_place_equals_gathered([&](context &c, tensor *st, tensor *seq,
                                            tensor *rows) { return ssm_conv(c, x, st, w, seq, rows); },
                                        states, interleaved_sequences(k.n_tokens, k.n_seqs));
    }
}

TEST(CpuSsm, InPlaceMamba2ScanEqualsTheGatheredForm) {
    for (const mamba2_case k :
         {mamba2_case{3, 4, 2, 5, 11, 3, true}, mamba2_case{8, 3, 3, 32, 1, 2, true},
          mamba2_case{16, 4, 1, 64, 7, 3, false}, mamba2_case{4, 8, 1, 128, 1, 1, true}}) {
        auto ctx = data_context();
        const int64_t n_ch = k.head_dim * k.n_head, n_bc = k.d_state * k.n_group;
        tensor *x = ctx->new_tensor(dtype::f32, {n_ch, k.n_tokens});
        tensor *dt = ctx->new_tensor(dtype::f32, {k.n_head, k.n_tokens});
        tensor *B = ctx->new_tensor(dtype::f32, {n_bc, k.n_tokens});
        tensor *C = ctx->new_tensor(dtype::f32, {n_bc, k.n_tokens});
        tensor *A = ctx->new_tensor(dtype::f32, {k.n_head});
        tensor *D = ctx->new_tensor(dtype::f32, {k.n_head});
        tensor *states = ctx->new_tensor(dtype::f32, {k.d_state, n_ch, k.n_seqs});
        fill_uniform(*x, 21);
        fill_uniform(*dt, 22, -4.0f, 1.0f);
        fill_uniform(*B, 23);
        fill_uniform(*C, 24);
        fill_uniform(*A, 25, -3.0f, -0.05f);
        fill_uniform(*D, 26);
        fill_uniform(*states, 27);
        const std::vector<int32_t> seq_of = k.n_seqs == 1 ? std::vector<int32_t>(size_t(k.n_tokens), 0)
                                                          : interleaved_sequences(k.n_tokens, k.n_seqs);
        expect_in_place_equals_gathered(
            [&](context &c, tensor *st, tensor *seq, tensor *rows) {
                return ssm_scan_mamba2(c, x, dt, A, B, C, st, seq, k.with_D ? D : nullptr, rows);
            },
            states, seq_of);
    }
}

// A state column outside the cache, or a column written that another sequence reads or writes, fails
// the graph with a clear error.
TEST(CpuSsm, InPlaceColumnsOutsideOrSharedFailTheGraph) {
    auto ctx = data_context();
    tensor *x = ctx->new_tensor(dtype::f32, {4, 2});
    tensor *cache = ctx->new_tensor(dtype::f32, {3, 4, 3});
    tensor *w = ctx->new_tensor(dtype::f32, {4, 4});
    fill_uniform(*x, 1);
    fill_uniform(*cache, 2);
    fill_uniform(*w, 3);
    for (const auto &[columns, what] :
         {std::pair<std::vector<int32_t>, const char *>{{0, 0, 1, 3}, "outside [0, 3)"},
          {{-1, 2, 1, 1}, "outside [0, 3)"},
          {{0, 2, 2, 2}, "sequence 1's too"},
          {{0, 1, 1, 2}, "sequence 1's too"}}) {
        tensor *rows = ctx->new_tensor(dtype::i32, {2, 2});
        std::memcpy(rows->data, columns.data(), columns.size() * sizeof(int32_t));
        tensor *out = ssm_conv(*ctx, x, cache, w, i32_input(*ctx, {0, 1}), rows);
        graph g;
        build_forward_expand(g, out);
        auto b = host_memory_devices().front()->make_backend(1);
        try {
            b->graph_compute(g, {});
            ADD_FAILURE() << "expected an error about " << what;
        } catch (const error &e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    }
    // rows must be [2, n_seqs]
    EXPECT_THROW(ssm_conv(*ctx, x, cache, w, i32_input(*ctx, {0, 1}), i32_input(*ctx, {0, 1, 2})), error);
}

TEST(CpuSsm, SequenceOutsideTheStatesFailsTheGraph) {
    auto ctx = data_context();
    tensor *x = ctx->new_tensor(dtype::f32, {4, 2});
    tensor *states = ctx->new_tensor(dtype::f32, {3, 4, 1});
    tensor *w = ctx->new_tensor(dtype::f32, {4, 4});
    fill_uniform(*x, 1);
    fill_uniform(*states, 2);
    fill_uniform(*w, 3);
    tensor *out = ssm_conv(*ctx, x, states, w, i32_input(*ctx, {0, 1}));
    graph g;
    build_forward_expand(g, out);
    auto b = host_memory_devices().front()->make_backend(1);
    EXPECT_THROW(b->graph_compute(g, {}), error);
}

TEST(CpuSsm, ShapeErrorsNameTheOp) {
    auto ctx = data_context();
    tensor *x = ctx->new_tensor(dtype::f32, {8, 3});
    tensor *states = ctx->new_tensor(dtype::f32, {3, 8, 2});
    tensor *seq = ctx->new_tensor(dtype::i32, {3});
    tensor *w_bad = ctx->new_tensor(dtype::f32, {4, 7});
    try {
        ssm_conv(*ctx, x, states, w_bad, seq);
        FAIL() << "expected an error";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("[ssm_conv]"), std::string::npos) << e.what();
    }
    tensor *A = ctx->new_tensor(dtype::f32, {16, 8});
    tensor *B = ctx->new_tensor(dtype::f32, {16, 3});
    EXPECT_THROW(ssm_scan(*ctx, x, x, A, B, B, states, seq), error);  // states hold 3, A says d_state 16
    tensor *seq_short = ctx->new_tensor(dtype::i32, {2});
    tensor *scan_states = ctx->new_tensor(dtype::f32, {16, 8, 2});
    EXPECT_THROW(ssm_scan(*ctx, x, x, A, B, B, scan_states, seq_short), error);
    EXPECT_NO_THROW(ssm_scan(*ctx, x, x, A, B, B, scan_states, seq));
}

}  // namespace
}  // namespace weft::test
