// tests/backends/test_cpu_ssm.cpp — ssm_conv and ssm_scan against slow double references: odd shapes,
// several sequences of unequal lengths interleaved in one call, split calls equal to one call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cpu/activations.h"
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

struct conv_case {
    int64_t n_ch, n_tokens, d_conv, n_seqs;
};

TEST(CpuSsm, ConvMatchesReferenceWithInterleavedSequences) {
    for (const conv_case k : {conv_case{7, 11, 4, 3}, conv_case{13, 1, 4, 2}, conv_case{5, 9, 5, 4},
                              conv_case{33, 17, 3, 5}, conv_case{3, 6, 2, 2}}) {
        auto ctx = data_context();
        tensor *x = ctx->new_tensor(dtype::f32, {k.n_ch, k.n_tokens});
        tensor *states = ctx->new_tensor(dtype::f32, {k.d_conv - 1, k.n_ch, k.n_seqs});
        tensor *w = ctx->new_tensor(dtype::f32, {k.d_conv, k.n_ch});
        fill_uniform(*x, 1);
        if (states->nelements() > 0) fill_uniform(*states, 2);
        fill_uniform(*w, 3);
        const std::vector<int32_t> seq_of = interleaved_sequences(k.n_tokens, k.n_seqs);
        tensor *out = ssm_conv(*ctx, x, states, w, i32_input(*ctx, seq_of));
        out->set_name("conv");
        ASSERT_EQ(out->ne[0], k.n_ch * k.n_tokens + states->nelements());
        const ssm_reference ref = conv_reference(*x, *states, *w, seq_of);
        expect_matches_reference(out, ref.fn(), 1e-12);
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
