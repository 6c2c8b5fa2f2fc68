// mul_mat.comp — d[i, j] = dot(row i of a, row j of b): a [k, m, A2, A3] of A_TYPE (rows contiguous),
// b f32 [k, n, B2, B3] (rows contiguous), a broadcast over dims 2 and 3. A workgroup takes one row of a
// against NCOLS rows of b (each value of a read once for all of them); invocations split the row in
// units of 32 values, then the partial sums are added: within subgroups by subgroupAdd where the
// device has it (USE_SUBGROUP), then across them in shared memory.
#version 450
#include "common.glsl"
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

#define WG 64u
#define NCOLS 8u
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

shared float red[NCOLS][WG];

void main() {
    const uint col_groups = (p.n + NCOLS - 1u) / NCOLS;
    const uint id = wg_linear();
    if (id >= p.m * col_groups * p.ne12 * p.ne13) return;
    const uint i = id % p.m, cg = (id / p.m) % col_groups, batch = id / (p.m * col_groups);
    const uint i2 = batch % p.ne12, i3 = batch / p.ne12;
    const uint j0 = cg * NCOLS;
    const uint arow = p.a_off + i * p.a_nb1 + (i2 / p.r2) * p.a_nb2 + (i3 / p.r3) * p.a_nb3;
    const uint bbase = p.b_off + i2 * p.b_nb2 + i3 * p.b_nb3;
    const uint t = gl_LocalInvocationID.x;
    const uint units = (p.k + 31u) / 32u;
    const uint ncols = min(NCOLS, p.n - j0);

    float acc[NCOLS];
    [[unroll]] for (uint c = 0u; c < NCOLS; ++c) acc[c] = 0.0;
    for (uint u = t; u < units; u += WG) {
        float v[32];
        dequant_unit(arow, u, p.k, v);
        const uint len = min(32u, p.k - 32u * u);
        [[unroll]] for (uint c = 0u; c < NCOLS; ++c) {
            if (c >= ncols) break;
            const uint bo = bbase + (j0 + c) * p.b_nb1 + 32u * u;
            float s = 0.0;
            if (len == 32u) {
                [[unroll]] for (uint e = 0u; e < 32u; ++e) s = fma(v[e], b[bo + e], s);
            } else {
                for (uint e = 0u; e < len; ++e) s = fma(v[e], b[bo + e], s);
            }
            acc[c] += s;
        }
    }
#ifdef USE_SUBGROUP
    [[unroll]] for (uint c = 0u; c < NCOLS; ++c) acc[c] = subgroupAdd(acc[c]);
    if (subgroupElect())
        [[unroll]] for (uint c = 0u; c < NCOLS; ++c) red[c][gl_SubgroupID] = acc[c];
    barrier();
    if (t < ncols) {
        float sum = 0.0;
        for (uint s = 0u; s < gl_NumSubgroups; ++s) sum += red[t][s];
        d[p.d_off + i + (j0 + t) * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3] = sum;
    }
#else
    [[unroll]] for (uint c = 0u; c < NCOLS; ++c) red[c][t] = acc[c];
    barrier();
    [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s)
            [[unroll]] for (uint c = 0u; c < NCOLS; ++c) red[c][t] += red[c][t + s];
        barrier();
    }
    if (t < ncols) d[p.d_off + i + (j0 + t) * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3] = red[t][0];
#endif
}
