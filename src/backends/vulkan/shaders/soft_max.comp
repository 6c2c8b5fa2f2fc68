// soft_max.comp — softmax over ne[0] of a * scale + mask (f32 or f16, broadcast over rows and dims 2,
// 3); a row with every position masked is zeros. One workgroup per row.
#version 450
#include "common.glsl"

#define WG 128u
layout(local_size_x = 128) in;
layout(binding = 0) readonly buffer A_ { uint a[]; };
layout(binding = 1) readonly buffer M_ { uint m[]; };
layout(binding = 2) buffer D_ { uint d[]; };

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2, ne3;
    uint a_nb0, a_nb1, a_nb2, a_nb3;
    uint d_nb0, d_nb1, d_nb2, d_nb3;
    uint m_ne1, m_ne2, m_ne3;
    uint m_nb1, m_nb2, m_nb3;
    uint a_off, m_off, d_off;
    uint a_type, m_type;  // m_type 2: no mask
    float scale;
} p;

shared float red[WG];

float reduce(float v, bool is_max) {
    const uint t = gl_LocalInvocationID.x;
    red[t] = v;
    barrier();
    [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) red[t] = is_max ? max(red[t], red[t + s]) : red[t] + red[t + s];
        barrier();
    }
    const float r = red[0];
    barrier();
    return r;
}

void main() {
    const uint row = wg_linear();
    if (row >= p.ne1 * p.ne2 * p.ne3) return;
    const uint i1 = row % p.ne1, i2 = (row / p.ne1) % p.ne2, i3 = row / (p.ne1 * p.ne2);
    const uint abase = p.a_off + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3;
    const uint dbase = p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
    const uint mbase = p.m_off + (i1 % p.m_ne1) * p.m_nb1 + (i2 % p.m_ne2) * p.m_nb2 + (i3 % p.m_ne3) * p.m_nb3;
    const uint msize = p.m_type == 0u ? 4u : 2u;
    const uint t = gl_LocalInvocationID.x;
    const float neg_inf = uintBitsToFloat(0xFF800000u);

    float mx = neg_inf;
    for (uint i = t; i < p.ne0; i += WG) {
        float x = LOAD_FLOAT(a, abase + i * p.a_nb0, p.a_type) * p.scale;
        if (p.m_type != 2u) x += LOAD_FLOAT(m, mbase + i * msize, p.m_type);
        mx = max(mx, x);
    }
    mx = reduce(mx, true);
    if (mx == neg_inf) {
        for (uint i = t; i < p.ne0; i += WG) STORE_F32(d, dbase + i * p.d_nb0, 0.0);
        return;
    }
    float s = 0.0;
    for (uint i = t; i < p.ne0; i += WG) {
        float x = LOAD_FLOAT(a, abase + i * p.a_nb0, p.a_type) * p.scale;
        if (p.m_type != 2u) x += LOAD_FLOAT(m, mbase + i * msize, p.m_type);
        const float e = exp_ref(x - mx);
        STORE_F32(d, dbase + i * p.d_nb0, e);
        s += e;
    }
    const float inv = 1.0 / reduce(s, false);
    for (uint i = t; i < p.ne0; i += WG) STORE_F32(d, dbase + i * p.d_nb0, LOAD_F32(d, dbase + i * p.d_nb0) * inv);
}
