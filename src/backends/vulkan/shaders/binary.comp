// binary.comp — add, sub, mul, div of a and b (b repeated where b.ne[i] divides a.ne[i]) into f32 d.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer A_ { uint a[]; };
layout(binding = 1) readonly buffer B_ { uint b[]; };
layout(binding = 2) buffer D_ { uint d[]; };

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2, ne3;
    uint a_nb0, a_nb1, a_nb2, a_nb3;
    uint b_ne0, b_ne1, b_ne2, b_ne3;
    uint b_nb0, b_nb1, b_nb2, b_nb3;
    uint d_nb0, d_nb1, d_nb2, d_nb3;
    uint a_off, b_off, d_off;
    uint op, a_type, b_type;
} p;

void main() {
    const uint e = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (e >= p.ne0 * p.ne1 * p.ne2 * p.ne3) return;
    const uint i0 = e % p.ne0, i1 = (e / p.ne0) % p.ne1, i2 = (e / (p.ne0 * p.ne1)) % p.ne2,
               i3 = e / (p.ne0 * p.ne1 * p.ne2);
    const float x = LOAD_FLOAT(a, p.a_off + i0 * p.a_nb0 + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3, p.a_type);
    const uint boff = p.b_off + (i0 % p.b_ne0) * p.b_nb0 + (i1 % p.b_ne1) * p.b_nb1 + (i2 % p.b_ne2) * p.b_nb2 +
                      (i3 % p.b_ne3) * p.b_nb3;
    const float y = LOAD_FLOAT(b, boff, p.b_type);
    float r;
    if (p.op == 0u)
        r = x + y;
    else if (p.op == 1u)
        r = x - y;
    else if (p.op == 2u)
        r = x * y;
    else
        r = x / y;
    STORE_F32(d, p.d_off + i0 * p.d_nb0 + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3, r);
}
