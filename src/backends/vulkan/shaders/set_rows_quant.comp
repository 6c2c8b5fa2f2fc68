// set_rows_quant.comp — set_rows.comp into a block-quantized destination (A_TYPE_Q8_0 or A_TYPE_Q4_0, a KV
// cache): an invocation quantizes one block of 32 values of a row of s (f32 or f16) and writes it into
// the row of d the ids (i32 or i64) name, bit for bit as the CPU backend does (row_kernels.cpp's q8_0
// activation quantizer, quant's q4_0 reference). An id out of range writes nothing.
#version 450
#include "common.glsl"

layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer S_ { uint s[]; };
layout(binding = 1) readonly buffer I_ { uint ids[]; };
layout(binding = 2) buffer D_ { uint d[]; };

layout(push_constant) uniform PC {
    uint ne0, ne1, ne2, ne3;  // s
    uint s_nb0, s_nb1, s_nb2, s_nb3;
    uint i_ne1, i_ne2, i_nb0, i_nb1, i_nb2;
    uint d_nb0, d_nb1, d_nb2, d_nb3;  // d_nb0: the block's bytes
    uint d_rows;
    uint s_off, i_off, d_off;
    uint s_type, d_type, i_type;  // i_type 0: i32, 1: i64; d_type unused
} p;

#if defined(A_TYPE_Q8_0)
#define BLOCK_BYTES 34u
#elif defined(A_TYPE_Q4_0)
#define BLOCK_BYTES 18u
#else
#error "set_rows_quant.comp: define A_TYPE_Q8_0 or A_TYPE_Q4_0"
#endif

void main() {
    const uint blocks = p.ne0 / 32u;
    const uint e = wg_linear() * 64u + gl_LocalInvocationID.x;
    if (e >= blocks * p.ne1 * p.ne2 * p.ne3) return;
    const uint ib = e % blocks, i1 = (e / blocks) % p.ne1, i2 = (e / (blocks * p.ne1)) % p.ne2,
               i3 = e / (blocks * p.ne1 * p.ne2);
    const uint ioff = p.i_off + i1 * p.i_nb0 + (i2 % p.i_ne1) * p.i_nb1 + (i3 % p.i_ne2) * p.i_nb2;
    const uint lo = ids[ioff >> 2];
    if (p.i_type == 1u && ids[(ioff >> 2) + 1u] != 0u) return;
    if (lo >= p.d_rows) return;  // negative ids are huge as uint

    float x[32];
    const uint srow = p.s_off + 32u * ib * p.s_nb0 + i1 * p.s_nb1 + i2 * p.s_nb2 + i3 * p.s_nb3;
    [[unroll]] for (uint j = 0u; j < 32u; ++j) x[j] = LOAD_FLOAT(s, srow + j * p.s_nb0, p.s_type);

    uint bytes[BLOCK_BYTES];
#if defined(A_TYPE_Q8_0)
    // d = amax / 127, the values times 127 / amax rounded to nearest, ties to even
    float amax = 0.0;
    [[unroll]] for (uint j = 0u; j < 32u; ++j) amax = max(amax, abs(x[j]));
    const float dd = div_rn(amax, 127.0);
    const float id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
    [[unroll]] for (uint j = 0u; j < 32u; ++j) {
        precise float v = x[j] * id;
        bytes[2u + j] = uint(int(roundEven(v))) & 0xFFu;
    }
#else
    // d = the value of largest magnitude (the first of ties) / -8; min(15, trunc(x / d + 8.5))
    float amax = 0.0, mx = 0.0;
    [[unroll]] for (uint j = 0u; j < 32u; ++j) {
        if (abs(x[j]) > amax) {
            amax = abs(x[j]);
            mx = x[j];
        }
    }
    const float dd = mx / -8.0;
    const float id = dd != 0.0 ? div_rn(1.0, dd) : 0.0;
    [[unroll]] for (uint j = 0u; j < 16u; ++j) {
        precise float v0 = x[j] * id;
        precise float v1 = x[j + 16u] * id;
        precise float s0 = v0 + 8.5;
        precise float s1 = v1 + 8.5;
        bytes[2u + j] = uint(min(15, int(s0))) | (uint(min(15, int(s1))) << 4);
    }
#endif
    const uint h = packHalf2x16(vec2(dd, 0.0));
    bytes[0] = h & 0xFFu;
    bytes[1] = (h >> 8) & 0xFFu;

    // the words the block covers: whole ones stored, shared ones (a neighbouring block's bytes) merged
    // with atomics, as another invocation may write the rest at the same time
    const uint off = p.d_off + ib * p.d_nb0 + lo * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
    for (uint w = off >> 2; w <= (off + BLOCK_BYTES - 1u) >> 2; ++w) {
        uint value = 0u, mask = 0u;
        [[unroll]] for (uint b = 0u; b < 4u; ++b) {
            const uint at = 4u * w + b;
            if (at >= off && at < off + BLOCK_BYTES) {
                value |= bytes[at - off] << (8u * b);
                mask |= 0xFFu << (8u * b);
            }
        }
        if (mask == 0xFFFFFFFFu) {
            d[w] = value;
        } else {
            atomicAnd(d[w], ~mask);
            atomicOr(d[w], value);
        }
    }
}
