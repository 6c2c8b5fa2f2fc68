// unary.comp — scale, silu, gelu (tanh form), tanh, sigmoid of a into f32 d, element by element.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer A_ { uint a[]; };
layout(binding = 1) buffer D_ { uint d[]; };

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2, ne3;
    uint a_nb0, a_nb1, a_nb2, a_nb3;
    uint d_nb0, d_nb1, d_nb2, d_nb3;
    uint a_off, d_off;
    uint op, a_type;
    float param;
} p;

void main() {
    const uint e = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (e >= p.ne0 * p.ne1 * p.ne2 * p.ne3) return;
    const uint i0 = e % p.ne0, i1 = (e / p.ne0) % p.ne1, i2 = (e / (p.ne0 * p.ne1)) % p.ne2,
               i3 = e / (p.ne0 * p.ne1 * p.ne2);
    const float x = LOAD_FLOAT(a, p.a_off + i0 * p.a_nb0 + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3, p.a_type);
    float r;
    if (p.op == 0u)
        r = x * p.param;
    else if (p.op == 1u)
        r = silu_ref(x);
    else if (p.op == 2u)
        r = gelu_ref(x);
    else if (p.op == 3u)
        r = tanh_ref(x);
    else
        r = 1.0 / (1.0 + exp_ref(-x));
    STORE_F32(d, p.d_off + i0 * p.d_nb0 + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3, r);
}
