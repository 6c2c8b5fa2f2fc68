// attention.comp — the fused attention of ops.h: out[:, h, t] = softmax_j(q[:, t, h] . k[:, j, g] * scale
// (capped by softcap) + mask[j, t]) v[:, j, g], g = h / group. K and V f32, f16, q8_0 or q4_0 (rows
// contiguous; blocks widened to floats); q is rounded to f16 against an f16 K and the weights against an
// f16 V, as the CPU does; against a q8_0 or q4_0 K (whole blocks) q is quantized to q8_0 and the
// scores are integer dots, the CPU's (attention_impl.h). One workgroup per
// (token, head): a first pass over the cells finds the maximum and the sum (online), a second one
// weighs the V rows a chunk of WG cells at a time. A token without a visible cell gets zeros.
#version 450
#include "common.glsl"

#define WG 64u
#define MAX_HEAD 256u
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer Q_ { uint q[]; };
layout(binding = 1) readonly buffer K_ { uint kc[]; };
layout(binding = 2) readonly buffer V_ { uint vc[]; };
layout(binding = 3) readonly buffer M_ { uint mk[]; };
layout(binding = 4) buffer D_ { float d[]; };

layout(push_constant) uniform PC {
    uint head_k, head_v, n_kv, n_tokens, n_head, group;
    uint q_nb1, q_nb2, k_nb1, k_nb2, v_nb1, v_nb2, m_nb1;  // bytes
    uint q_off, k_off, v_off, m_off;                       // bytes
    uint d_off;                                            // floats
    uint k_type, v_type;  // 0: f32, 1: f16, 2: q8_0, 3: q4_0
    float scale, softcap;
} p;

shared float sq[MAX_HEAD];
shared int sqi[MAX_HEAD];          // q quantized to q8_0, for a q8_0 or q4_0 K of whole blocks
shared float sqd[MAX_HEAD / 32u];  // its blocks' scales (f16 values)
shared float red_max[WG];
shared float red_sum[WG];
shared float weights[WG];

// whether the scores are integer dots against q quantized to q8_0 (a q8_0 or q4_0 K of whole blocks)
bool k_ints() {
    return (p.k_type == 2u || p.k_type == 3u) && p.head_k % 32u == 0u;
}

// the score of cell j (its mask value m not -INF)
float score(uint kbase, uint j, float m) {
    const uint row = kbase + j * p.k_nb1;
    float dot = 0.0;
    if (p.k_type == 0u) {
        for (uint i = 0u; i < p.head_k; ++i) dot = fma(sq[i], LOAD_F32(kc, row + 4u * i), dot);
    } else if (p.k_type == 1u) {
        for (uint i = 0u; i < p.head_k; ++i) dot = fma(sq[i], LOAD_F16(kc, row + 2u * i), dot);
    } else if (k_ints()) {
        // per block: the exact integer sum (q4_0: nibbles less 8), times the two scales, by one fma
        const uint block_bytes = p.k_type == 2u ? 34u : 18u;
        for (uint b = 0u; b < p.head_k / 32u; ++b) {
            const uint blk = row + block_bytes * b;
            int sum = 0;
            if (p.k_type == 2u) {
                for (uint i = 0u; i < 32u; ++i)
                    sum += (int(LOAD_U8(kc, blk + 2u + i) << 24) >> 24) * sqi[32u * b + i];
            } else {
                for (uint i = 0u; i < 32u; ++i)
                    sum += (int((LOAD_U8(kc, blk + 2u + (i & 15u)) >> ((i & 16u) >> 2)) & 15u) - 8) * sqi[32u * b + i];
            }
            precise float scales = unpackHalf2x16(LOAD_U16(kc, blk)).x * sqd[b];
            dot = fma(float(sum), scales, dot);
        }
    } else {
        for (uint i = 0u; i < p.head_k; ++i) dot = fma(sq[i], LOAD_KV(kc, row, i, p.k_type), dot);
    }
    const float s = p.softcap > 0.0 ? p.softcap * tanh_ref(dot * p.scale) : dot * p.scale;
    return s + m;
}

void main() {
    const uint id = wg_linear();
    if (id >= p.n_tokens * p.n_head) return;
    const uint h = id % p.n_head, tok = id / p.n_head, g = h / p.group;
    const uint t = gl_LocalInvocationID.x;
    const float neg_inf = uintBitsToFloat(0xFF800000u);
    const uint qbase = p.q_off + tok * p.q_nb1 + h * p.q_nb2;
    for (uint i = t; i < p.head_k; i += WG) {
        const float x = LOAD_F32(q, qbase + 4u * i);
        sq[i] = p.k_type == 1u ? round_f16(x) : x;
    }
    barrier();
    if (k_ints()) {
        // the CPU's activation quantizer: d = amax / 127 (to f16), the values times 127 / amax to
        // nearest, ties to even
        for (uint b = t; b < p.head_k / 32u; b += WG) {
            float amax = 0.0;
            for (uint i = 0u; i < 32u; ++i) amax = max(amax, abs(sq[32u * b + i]));
            sqd[b] = round_f16(div_rn(amax, 127.0));
            const float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
            for (uint i = 0u; i < 32u; ++i) {
                precise float v = sq[32u * b + i] * id;
                sqi[32u * b + i] = int(roundEven(v));
            }
        }
        barrier();
    }
    const uint kbase = p.k_off + g * p.k_nb2, vbase = p.v_off + g * p.v_nb2;
    const uint mbase = p.m_off + tok * p.m_nb1;

    // pass 1: this invocation's maximum and its sum of e^(x - maximum), then the workgroup's
    float mx = neg_inf, sum = 0.0;
    for (uint j = t; j < p.n_kv; j += WG) {
        const float m = LOAD_F32(mk, mbase + 4u * j);
        if (m == neg_inf) continue;
        const float x = score(kbase, j, m);
        if (x > mx) {
            sum = (mx == neg_inf ? 0.0 : sum * exp_ref(mx - x)) + 1.0;
            mx = x;
        } else {
            sum += exp_ref(x - mx);
        }
    }
    red_max[t] = mx;
    barrier();
    [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) red_max[t] = max(red_max[t], red_max[t + s]);
        barrier();
    }
    const float M = red_max[0];
    red_sum[t] = mx == neg_inf ? 0.0 : sum * exp_ref(mx - M);
    barrier();
    [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) red_sum[t] += red_sum[t + s];
        barrier();
    }
    const float S = red_sum[0];
    const uint obase = p.d_off + (tok * p.n_head + h) * p.head_v;
    if (M == neg_inf) {
        for (uint i = t; i < p.head_v; i += WG) d[obase + i] = 0.0;
        return;
    }
    const float inv = 1.0 / S;

    // pass 2: the weights of WG cells at a time, then each invocation's output values over them
    float acc[MAX_HEAD / WG];
    [[unroll]] for (uint r = 0u; r < MAX_HEAD / WG; ++r) acc[r] = 0.0;
    for (uint c0 = 0u; c0 < p.n_kv; c0 += WG) {
        const uint j = c0 + t;
        float w = 0.0;
        if (j < p.n_kv) {
            const float m = LOAD_F32(mk, mbase + 4u * j);
            if (m != neg_inf) {
                w = exp_ref(score(kbase, j, m) - M) * inv;
                if (p.v_type == 1u) w = round_f16(w);
            }
        }
        weights[t] = w;
        barrier();
        const uint n = min(WG, p.n_kv - c0);
        [[unroll]] for (uint r = 0u; r < MAX_HEAD / WG; ++r) {
            const uint i = t + r * WG;
            if (i >= p.head_v) break;
            float a = acc[r];
            for (uint c = 0u; c < n; ++c) {
                const float wc = weights[c];
                if (wc == 0.0) continue;
                a = fma(wc, LOAD_KV(vc, vbase + (c0 + c) * p.v_nb1, i, p.v_type), a);
            }
            acc[r] = a;
        }
        barrier();
    }
    [[unroll]] for (uint r = 0u; r < MAX_HEAD / WG; ++r) {
        const uint i = t + r * WG;
        if (i < p.head_v) d[obase + i] = acc[r];
    }
}
