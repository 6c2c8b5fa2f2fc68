// set_rows.comp — writes the rows of s into d at the rows the ids (i32 or i64) name, converting to d's
// type (f32 or f16). An id out of range writes nothing.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer S_ { uint s[]; };
layout(binding = 1) readonly buffer I_ { uint ids[]; };
layout(binding = 2) buffer D_ { uint d[]; };

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2, ne3;  // s
    uint s_nb0, s_nb1, s_nb2, s_nb3;
    uint i_ne1, i_ne2, i_nb0, i_nb1, i_nb2;
    uint d_nb0, d_nb1, d_nb2, d_nb3;
    uint d_rows;
    uint s_off, i_off, d_off;
    uint s_type, d_type, i_type;  // i_type 0: i32, 1: i64
} p;

void main() {
    const uint e = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (e >= p.ne0 * p.ne1 * p.ne2 * p.ne3) return;
    const uint i0 = e % p.ne0, i1 = (e / p.ne0) % p.ne1, i2 = (e / (p.ne0 * p.ne1)) % p.ne2,
               i3 = e / (p.ne0 * p.ne1 * p.ne2);
    const uint ioff = p.i_off + i1 * p.i_nb0 + (i2 % p.i_ne1) * p.i_nb1 + (i3 % p.i_ne2) * p.i_nb2;
    const uint lo = ids[ioff >> 2];
    if (p.i_type == 1u && ids[(ioff >> 2) + 1u] != 0u) return;
    if (lo >= p.d_rows) return;  // negative ids are huge as uint
    const float v = LOAD_FLOAT(s, p.s_off + i0 * p.s_nb0 + i1 * p.s_nb1 + i2 * p.s_nb2 + i3 * p.s_nb3, p.s_type);
    STORE_FLOAT(d, p.d_off + i0 * p.d_nb0 + lo * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3, p.d_type, v);
}
