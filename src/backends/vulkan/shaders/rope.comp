// rope.comp — rotary position embedding, normal and NeoX pairs, freq factors, YaRN. One invocation per
// rotated pair (it reads both elements before writing either: in place is safe) or passed-through value.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;
layout(binding = 0) readonly buffer A_ { uint a[]; };
layout(binding = 1) readonly buffer P_ { uint pos[]; };
layout(binding = 2) readonly buffer F_ { uint ff[]; };
layout(binding = 3) buffer D_ { uint d[]; };

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2, ne3;
    uint a_nb0, a_nb1, a_nb2, a_nb3;
    uint d_nb0, d_nb1, d_nb2, d_nb3;
    uint a_off, p_off, f_off, d_off;
    uint a_type, n_dims, neox, has_ff;
    float freq_scale, ext_factor, mscale, corr0, corr1, theta_scale;
} p;

void main() {
    const uint half_dims = p.n_dims / 2u;
    const uint per_row = p.ne0 - half_dims;  // pairs, then the values past n_dims
    const uint e = wg_linear() * 256u + gl_LocalInvocationID.x;
    if (e >= per_row * p.ne1 * p.ne2 * p.ne3) return;
    const uint s = e % per_row, row = e / per_row;
    const uint i1 = row % p.ne1, i2 = (row / p.ne1) % p.ne2, i3 = row / (p.ne1 * p.ne2);
    const uint abase = p.a_off + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3;
    const uint dbase = p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
    if (s >= half_dims) {
        const uint i = p.n_dims + (s - half_dims);
        STORE_F32(d, dbase + i * p.d_nb0, LOAD_FLOAT(a, abase + i * p.a_nb0, p.a_type));
        return;
    }
    const float position = float(int(pos[(p.p_off >> 2) + i2]));
    // theta_base multiplied pair by pair, as the CPU does
    float theta_base = position;
    for (uint i = 0u; i < s; ++i) theta_base *= p.theta_scale;
    const float theta_extrap = theta_base / (p.has_ff != 0u ? uintBitsToFloat(ff[(p.f_off >> 2) + s]) : 1.0);
    precise float theta_interp = p.freq_scale * theta_extrap;
    precise float theta = theta_interp;
    if (p.ext_factor != 0.0) {
        const float y = (float(s) - p.corr0) / max(0.001, p.corr1 - p.corr0);
        const float ramp_mix = (1.0 - min(1.0, max(0.0, y))) * p.ext_factor;
        theta = fma(theta_interp, 1.0 - ramp_mix, theta_extrap * ramp_mix);
    }
    float sn, cs;
    sincos_ref(theta, sn, cs);
    cs *= p.mscale;
    sn *= p.mscale;
    const uint j0 = p.neox != 0u ? s : 2u * s;
    const uint j1 = p.neox != 0u ? s + half_dims : 2u * s + 1u;
    const float x0 = LOAD_FLOAT(a, abase + j0 * p.a_nb0, p.a_type);
    const float x1 = LOAD_FLOAT(a, abase + j1 * p.a_nb0, p.a_type);
    precise float o0 = fma(x0, cs, -(x1 * sn));
    precise float o1 = fma(x0, sn, x1 * cs);
    STORE_F32(d, dbase + j0 * p.d_nb0, o0);
    STORE_F32(d, dbase + j1 * p.d_nb0, o1);
}
