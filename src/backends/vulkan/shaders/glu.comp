// glu.comp — act(gate) * up (swiglu: silu, geglu: gelu) into f32 d; gate, up and d of one shape.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer G_ { uint g[]; };
layout(binding = 1) readonly buffer U_ { uint u[]; };
layout(binding = 2) buffer D_ { uint d[]; };

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2, ne3;
    uint g_nb0, g_nb1, g_nb2, g_nb3;
    uint u_nb0, u_nb1, u_nb2, u_nb3;
    uint d_nb0, d_nb1, d_nb2, d_nb3;
    uint g_off, u_off, d_off;
    uint kind, g_type, u_type;
} p;

void main() {
    const uint e = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (e >= p.ne0 * p.ne1 * p.ne2 * p.ne3) return;
    const uint i0 = e % p.ne0, i1 = (e / p.ne0) % p.ne1, i2 = (e / (p.ne0 * p.ne1)) % p.ne2,
               i3 = e / (p.ne0 * p.ne1 * p.ne2);
    const float x = LOAD_FLOAT(g, p.g_off + i0 * p.g_nb0 + i1 * p.g_nb1 + i2 * p.g_nb2 + i3 * p.g_nb3, p.g_type);
    const float y = LOAD_FLOAT(u, p.u_off + i0 * p.u_nb0 + i1 * p.u_nb1 + i2 * p.u_nb2 + i3 * p.u_nb3, p.u_type);
    const float act = p.kind == 0u ? silu_ref(x) : gelu_ref(x);
    STORE_F32(d, p.d_off + i0 * p.d_nb0 + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3, act * y);
}
