// mul_mm.comp — the tiled form of mul_mat.comp for many columns (prompt processing): d[i, j] = dot(row i
// of a, row j of b), a [k, m, A2, A3] of A_TYPE (rows contiguous), b f32 [k, n, B2, B3] (rows
// contiguous), a broadcast over dims 2 and 3. A workgroup computes a TM x TN tile of d: it walks k in
// units of 32 values, dequantizing TM rows of a and loading TN rows of b into shared memory (as f32),
// and each invocation accumulates an RM x RN block of the tile in registers. Each value of a is so
// read once per TN columns instead of once per 8 as in mul_mat.comp.
#version 450
#include "common.glsl"

#define WG 64u
#define TM 64u
#define TN 64u
#define RM 8u                   // TM / (WG / (TN / RN))
#define RN 8u                   // TN / (WG / (TM / RM))
#define PAD 1u                  // keeps the columns of a unit in distinct banks
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer A_ { uint qa[]; };
layout(binding = 1) readonly buffer B_ { float b[]; };
layout(binding = 2) buffer D_ { float d[]; };

#include "dequant.glsl"

layout(push_constant) uniform PC {
    uint k, m, n, ne12, ne13, r2, r3;
    uint a_nb1, a_nb2, a_nb3;  // bytes
    uint b_nb1, b_nb2, b_nb3;  // floats
    uint d_nb1, d_nb2, d_nb3;  // floats
    uint a_off;                // bytes
    uint b_off, d_off;         // floats
} p;

// unit e-th values: sa[e][row of the tile], sb[e][column of the tile]
shared float sa[32][TM + PAD];
shared float sb[32][TN + PAD];

void main() {
    const uint tiles_m = (p.m + TM - 1u) / TM, tiles_n = (p.n + TN - 1u) / TN;
    const uint id = wg_linear();
    if (id >= tiles_m * tiles_n * p.ne12 * p.ne13) return;
    const uint tm = id % tiles_m, tn = (id / tiles_m) % tiles_n, batch = id / (tiles_m * tiles_n);
    const uint i2 = batch % p.ne12, i3 = batch / p.ne12;
    const uint i0 = tm * TM, j0 = tn * TN;
    const uint abase = p.a_off + (i2 / p.r2) * p.a_nb2 + (i3 / p.r3) * p.a_nb3;
    const uint bbase = p.b_off + i2 * p.b_nb2 + i3 * p.b_nb3;
    const uint t = gl_LocalInvocationID.x;
    // this invocation's block: rows tr + (TM / RM) * r, columns tc + (TN / RN) * c of the tile (strided,
    // so that neighbouring invocations read neighbouring shared words)
    const uint tr = t % (TM / RM), tc = t / (TM / RM);
    const uint units = (p.k + 31u) / 32u;

    float acc[RM][RN];
    [[unroll]] for (uint r = 0u; r < RM; ++r)
        [[unroll]] for (uint c = 0u; c < RN; ++c) acc[r][c] = 0.0;

    for (uint u = 0u; u < units; ++u) {
        // a: one row of the tile per invocation (TM == WG); rows past m are zeros
        {
            float v[32];
            if (i0 + t < p.m) {
                dequant_unit(abase + (i0 + t) * p.a_nb1, u, p.k, v);
            } else {
                [[unroll]] for (uint e = 0u; e < 32u; ++e) v[e] = 0.0;
            }
            [[unroll]] for (uint e = 0u; e < 32u; ++e) sa[e][t] = v[e];
        }
        // b: 32 consecutive values of a column per 32 invocations (consecutive addresses); past n or k, zeros
        const uint len = min(32u, p.k - 32u * u);
        [[unroll]] for (uint s = 0u; s < 32u * TN / WG; ++s) {
            const uint idx = s * WG + t, c = idx / 32u, e = idx % 32u;
            sb[e][c] = (j0 + c < p.n && e < len) ? b[bbase + (j0 + c) * p.b_nb1 + 32u * u + e] : 0.0;
        }
        barrier();
        for (uint e = 0u; e < 32u; ++e) {  // not unrolled: the code would be large, slow to compile
            float av[RM], bv[RN];
            [[unroll]] for (uint r = 0u; r < RM; ++r) av[r] = sa[e][tr + (TM / RM) * r];
            [[unroll]] for (uint c = 0u; c < RN; ++c) bv[c] = sb[e][tc + (TN / RN) * c];
            [[unroll]] for (uint r = 0u; r < RM; ++r)
                [[unroll]] for (uint c = 0u; c < RN; ++c) acc[r][c] = fma(av[r], bv[c], acc[r][c]);
        }
        barrier();
    }

    const uint dbase = p.d_off + i2 * p.d_nb2 + i3 * p.d_nb3;
    [[unroll]] for (uint c = 0u; c < RN; ++c) {
        const uint j = j0 + tc + (TN / RN) * c;
        if (j >= p.n) break;
        [[unroll]] for (uint r = 0u; r < RM; ++r) {
            const uint i = i0 + tr + (TM / RM) * r;
            if (i < p.m) d[dbase + i + j * p.d_nb1] = acc[r][c];
        }
    }
}
