// cpy.comp — copies s into d element by element in the logical order of each (the same shape, or a
// reshaping copy of the same element count), converting between f32 and f16.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer S_ { uint s[]; };
layout(binding = 1) buffer D_ { uint d[]; };

layout(push_constant) uniform PC {
    uint s_ne0, s_ne1, s_ne2, s_ne3;
    uint s_nb0, s_nb1, s_nb2, s_nb3;
    uint d_ne0, d_ne1, d_ne2, d_ne3;
    uint d_nb0, d_nb1, d_nb2, d_nb3;
    uint s_off, d_off;
    uint s_type, d_type;
} p;

void main() {
    const uint e = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (e >= p.s_ne0 * p.s_ne1 * p.s_ne2 * p.s_ne3) return;
    const uint soff = p.s_off + (e % p.s_ne0) * p.s_nb0 + ((e / p.s_ne0) % p.s_ne1) * p.s_nb1 +
                      ((e / (p.s_ne0 * p.s_ne1)) % p.s_ne2) * p.s_nb2 + (e / (p.s_ne0 * p.s_ne1 * p.s_ne2)) * p.s_nb3;
    const uint doff = p.d_off + (e % p.d_ne0) * p.d_nb0 + ((e / p.d_ne0) % p.d_ne1) * p.d_nb1 +
                      ((e / (p.d_ne0 * p.d_ne1)) % p.d_ne2) * p.d_nb2 + (e / (p.d_ne0 * p.d_ne1 * p.d_ne2)) * p.d_nb3;
    const float v = LOAD_FLOAT(s, soff, p.s_type);
    STORE_FLOAT(d, doff, p.d_type, v);
}
