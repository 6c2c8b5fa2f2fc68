// src/backends/vulkan/shaders/dequant.glsl — the values of one weight type as floats, 32 at a time: unit
// u of a row is its elements [32u, 32u + 32) (a whole block of q8_0 / q4_0, an eighth of a q4_K / q6_K
// super-block). The shader including it names its weight buffer `qa` and defines one A_TYPE_*.
//
// Block layouts (include/weft/quant/blocks.h): q8_0 {f16 d; i8 qs[32]} 34 bytes; q4_0 {f16 d; u8 qs[16]}
// 18 bytes; q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]} 144 bytes; q6_K {u8 ql[128]; u8 qh[64];
// i8 scales[16]; f16 d} 210 bytes.

float half_at(uint off) {
    return unpackHalf2x16(LOAD_U16(qa, off)).x;
}

int i8_at(uint off) {
    return int(LOAD_U8(qa, off) << 24) >> 24;
}

// v[0..32) = elements [32u, 32u + 32) of the row at byte `row`; k = the row's length (float types
// may end within a unit: the rest are zeros)
void dequant_unit(uint row, uint u, uint k, out float v[32]) {
#if defined(A_TYPE_F32)
    [[unroll]] for (uint i = 0u; i < 32u; ++i) {
        const uint e = 32u * u + i;
        v[i] = e < k ? LOAD_F32(qa, row + 4u * e) : 0.0;
    }
#elif defined(A_TYPE_F16)
    [[unroll]] for (uint i = 0u; i < 32u; ++i) {
        const uint e = 32u * u + i;
        v[i] = e < k ? LOAD_F16(qa, row + 2u * e) : 0.0;
    }
#elif defined(A_TYPE_Q8_0)
    const uint bo = row + 34u * u;
    const float dd = half_at(bo);
    [[unroll]] for (uint w = 0u; w < 8u; ++w) {
        const uint q = LOAD_U32_ANY(qa, bo + 2u + 4u * w);
        [[unroll]] for (uint j = 0u; j < 4u; ++j) v[4u * w + j] = dd * float(int(q << (24u - 8u * j)) >> 24);
    }
#elif defined(A_TYPE_Q4_0)
    const uint bo = row + 18u * u;
    const float dd = half_at(bo);
    [[unroll]] for (uint w = 0u; w < 4u; ++w) {
        const uint q = LOAD_U32_ANY(qa, bo + 2u + 4u * w);
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
            const uint byte = (q >> (8u * j)) & 0xFFu;
            v[4u * w + j] = dd * float(int(byte & 15u) - 8);
            v[4u * w + j + 16u] = dd * float(int(byte >> 4) - 8);
        }
    }
#elif defined(A_TYPE_Q4_K)
    const uint bo = row + 144u * (u / 8u);
    const uint j = u % 8u;
    const float dd = half_at(bo), dmin = half_at(bo + 2u);
    const uint sc = bo + 4u;
    uint scale, mn;
    if (j < 4u) {
        scale = LOAD_U8(qa, sc + j) & 63u;
        mn = LOAD_U8(qa, sc + j + 4u) & 63u;
    } else {
        scale = (LOAD_U8(qa, sc + j + 4u) & 15u) | ((LOAD_U8(qa, sc + j - 4u) >> 6) << 4);
        mn = (LOAD_U8(qa, sc + j + 4u) >> 4) | ((LOAD_U8(qa, sc + j) >> 6) << 4);
    }
    const float d1 = dd * float(scale), m1 = dmin * float(mn);
    const uint qs = bo + 16u + 32u * (j / 2u);
    const uint shift = 4u * (j % 2u);
    [[unroll]] for (uint w = 0u; w < 8u; ++w) {
        const uint q = LOAD_U32_ANY(qa, qs + 4u * w);
        [[unroll]] for (uint b = 0u; b < 4u; ++b) v[4u * w + b] = d1 * float((q >> (8u * b + shift)) & 15u) - m1;
    }
#elif defined(A_TYPE_Q6_K)
    const uint bo = row + 210u * (u / 8u);
    const uint j = u % 8u;
    const uint h = j / 4u, c = j % 4u;
    const float dd = half_at(bo + 208u);
    const uint ql = bo + 64u * h + 32u * (c & 1u), qh = bo + 128u + 32u * h;
    const float s0 = dd * float(i8_at(bo + 192u + 8u * h + 2u * c));
    const float s1 = dd * float(i8_at(bo + 192u + 8u * h + 2u * c + 1u));
    const uint lshift = c < 2u ? 0u : 4u, hshift = 2u * c;
    [[unroll]] for (uint w = 0u; w < 8u; ++w) {
        const uint lo = LOAD_U32_ANY(qa, ql + 4u * w), hi = LOAD_U32_ANY(qa, qh + 4u * w);
        [[unroll]] for (uint b = 0u; b < 4u; ++b) {
            const int q = int(((lo >> (8u * b + lshift)) & 15u) | (((hi >> (8u * b + hshift)) & 3u) << 4)) - 32;
            v[4u * w + b] = (w < 4u ? s0 : s1) * float(q);
        }
    }
#else
#error "dequant.glsl: define one A_TYPE_*"
#endif
}
