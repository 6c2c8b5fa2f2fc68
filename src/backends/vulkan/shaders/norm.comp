// norm.comp — rms_norm (mode 0) and norm (mode 1) over ne[0]: one workgroup per row.
#version 450
#include "common.glsl"

#define WG 128u
layout(local_size_x = 128) in;
layout(binding = 0) readonly buffer A_ { uint a[]; };
layout(binding = 1) buffer D_ { uint d[]; };

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2, ne3;
    uint a_nb0, a_nb1, a_nb2, a_nb3;
    uint d_nb0, d_nb1, d_nb2, d_nb3;
    uint a_off, d_off;
    uint mode, a_type;
    float eps;
} p;

shared float red[WG];

float reduce_sum(float v) {
    const uint t = gl_LocalInvocationID.x;
    red[t] = v;
    barrier();
    [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) red[t] += red[t + s];
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
    const uint t = gl_LocalInvocationID.x;
    float mean = 0.0;
    if (p.mode == 1u) {
        float s = 0.0;
        for (uint i = t; i < p.ne0; i += WG) s += LOAD_FLOAT(a, abase + i * p.a_nb0, p.a_type);
        mean = reduce_sum(s) / float(p.ne0);
    }
    float sq = 0.0;
    for (uint i = t; i < p.ne0; i += WG) {
        const float x = LOAD_FLOAT(a, abase + i * p.a_nb0, p.a_type) - mean;
        sq += x * x;
    }
    const float scale = 1.0 / sqrt(reduce_sum(sq) / float(p.ne0) + p.eps);
    for (uint i = t; i < p.ne0; i += WG)
        STORE_F32(d, dbase + i * p.d_nb0, (LOAD_FLOAT(a, abase + i * p.a_nb0, p.a_type) - mean) * scale);
}
