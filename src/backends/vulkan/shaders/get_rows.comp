// get_rows.comp — d [ne0, n, ne2, ne3] f32: row (i1, i2, i3) is row ids[i1, i2, i3] of a's matrix
// (i2 % A2, i3 % A3), a of A_TYPE with contiguous rows. One invocation per unit of 32 values of a row;
// an id out of range leaves the row unwritten.
#version 450
#include "common.glsl"

layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer A_ { uint qa[]; };
layout(binding = 1) readonly buffer I_ { uint ids[]; };
layout(binding = 2) buffer D_ { float d[]; };

#include "dequant.glsl"

layout(push_constant) uniform PC {
    uint ne0, n, ne2, ne3;
    uint a_rows, a_ne2, a_ne3;
    uint a_nb1, a_nb2, a_nb3;  // bytes
    uint i_nb0, i_nb1, i_nb2;  // bytes
    uint d_nb1, d_nb2, d_nb3;  // floats
    uint a_off, i_off;         // bytes
    uint d_off;                // floats
    uint i_type;               // 0: i32, 1: i64
} p;

void main() {
    const uint units = (p.ne0 + 31u) / 32u;
    const uint e = wg_linear() * 64u + gl_LocalInvocationID.x;
    if (e >= units * p.n * p.ne2 * p.ne3) return;
    const uint u = e % units, row = e / units;
    const uint i1 = row % p.n, i2 = (row / p.n) % p.ne2, i3 = row / (p.n * p.ne2);
    const uint ioff = p.i_off + i1 * p.i_nb0 + i2 * p.i_nb1 + i3 * p.i_nb2;
    const uint id = ids[ioff >> 2];
    if (p.i_type == 1u && ids[(ioff >> 2) + 1u] != 0u) return;
    if (id >= p.a_rows) return;
    float v[32];
    dequant_unit(p.a_off + id * p.a_nb1 + (i2 % p.a_ne2) * p.a_nb2 + (i3 % p.a_ne3) * p.a_nb3, u, p.ne0, v);
    const uint dbase = p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3 + 32u * u;
    const uint len = min(32u, p.ne0 - 32u * u);
    for (uint j = 0u; j < len; ++j) d[dbase + j] = v[j];
}
