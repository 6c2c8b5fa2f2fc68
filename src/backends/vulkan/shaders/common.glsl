// src/backends/vulkan/shaders/common.glsl — what every weft compute shader shares: byte addressing of
// tensors in uint buffers, f16 loads and stores, the linear workgroup index, and float functions written
// out (exp, tanh, sin/cos) so that every driver computes them to about an ulp, as the CPU does.
//
// Tensors are bound as uint arrays; offsets and strides are in bytes (a binding starts at the tensor's
// offset rounded down to minStorageBufferOffsetAlignment, the rest comes in the push constants).

#extension GL_EXT_control_flow_attributes : enable

// word-aligned f32, 2-aligned f16 (the low or high half of a word)
#define LOAD_F32(buf, off) uintBitsToFloat(buf[(off) >> 2])
#define LOAD_F16(buf, off) unpackHalf2x16(buf[(off) >> 2] >> (((off)&2u) * 8u)).x
// type 0: f32, 1: f16
#define LOAD_FLOAT(buf, off, ty) ((ty) == 0u ? LOAD_F32(buf, off) : LOAD_F16(buf, off))
#define LOAD_U8(buf, off) ((buf[(off) >> 2] >> (((off)&3u) * 8u)) & 0xFFu)
#define LOAD_U16(buf, off) ((buf[(off) >> 2] >> (((off)&2u) * 8u)) & 0xFFFFu)
// four bytes at any offset (the second word is read only when they straddle two)
#define LOAD_U32_ANY(buf, off) \
    (((off)&3u) == 0u ? buf[(off) >> 2] : ((buf[(off) >> 2] >> (((off)&3u) * 8u)) | (buf[((off) >> 2) + 1u] << (32u - ((off)&3u) * 8u))))
// element i of a row of 32-value blocks at byte `row`: q8_0 {f16 d; i8 qs[32]}, q4_0 {f16 d; u8 qs[16]}
// (elements j and j + 16 in the low and high nibble of qs[j])
#define LOAD_Q8_0(buf, row, i)                                                  \
    (unpackHalf2x16(LOAD_U16(buf, (row) + 34u * ((i) >> 5))).x *                \
     float(int(LOAD_U8(buf, (row) + 34u * ((i) >> 5) + 2u + ((i)&31u)) << 24) >> 24))
#define LOAD_Q4_0(buf, row, i)                                                                \
    (unpackHalf2x16(LOAD_U16(buf, (row) + 18u * ((i) >> 5))).x *                              \
     float(int((LOAD_U8(buf, (row) + 18u * ((i) >> 5) + 2u + ((i)&15u)) >> (((i)&16u) >> 2)) & 15u) - 8))
// type 0: f32, 1: f16, 2: q8_0, 3: q4_0
#define LOAD_KV(buf, row, i, ty)                                                                      \
    ((ty) == 0u ? LOAD_F32(buf, (row) + 4u * (i))                                                     \
                : (ty) == 1u ? LOAD_F16(buf, (row) + 2u * (i))                                        \
                             : (ty) == 2u ? LOAD_Q8_0(buf, row, i) : LOAD_Q4_0(buf, row, i))
#define STORE_F32(buf, off, v) buf[(off) >> 2] = floatBitsToUint(v)
// the other half of the word may be written by another invocation at the same time: two atomics
#define STORE_F16(buf, off, v)                                                   \
    {                                                                            \
        const uint sh_ = ((off)&2u) * 8u;                                        \
        atomicAnd(buf[(off) >> 2], ~(0xFFFFu << sh_));                           \
        atomicOr(buf[(off) >> 2], (packHalf2x16(vec2((v), 0.0)) & 0xFFFFu) << sh_); \
    }
#define STORE_FLOAT(buf, off, ty, v) \
    if ((ty) == 0u) {                \
        STORE_F32(buf, off, v);      \
    } else                           \
        STORE_F16(buf, off, v)

// workgroups are dispatched as a 2-D grid (x at most 65535): their index in one line
uint wg_linear() {
    return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
}

float round_f16(float x) {
    return unpackHalf2x16(packHalf2x16(vec2(x, 0.0))).x;
}

// a / b correctly rounded (as the CPU divides) also where the driver's division is not: the reciprocal
// refined by one Newton step, then the quotient's remainder added back (Markstein)
float div_rn(float a, float b) {
    precise float r = 1.0 / b;
    precise float e = fma(-b, r, 1.0);
    r = fma(r, e, r);
    precise float q = a * r;
    precise float rem = fma(-q, b, a);
    return fma(rem, r, q);
}

// e^x as the CPU's exp_reference (canonical_math.h): reduction by ln 2 in two parts, a degree-5
// polynomial, scaling by 2^n in one or two steps. 0 for -INF.
float exp_ref(float x) {
    const float shifter = 12582912.0;
    precise float z = fma(x, 1.4426950216293335, shifter);
    precise float n = z - shifter;
    precise float b = fma(-n, 1.428606765330187e-06, fma(-n, 0.693145751953125, x));
    precise float u = b * b;
    precise float j = fma(fma(fma(0.008247390389442444, b, 0.04189976677298546), u,
                              fma(0.16668395698070526, b, 0.4999912679195404)),
                          u, fma(0.9999994039535522, b, 1.0));
    const float nc = !(n >= -192.0) ? -192.0 : (n > 192.0 ? 192.0 : n);
    const bool low = nc < -125.0;
    const int e1 = int(low ? nc + 100.0 : (nc > 127.0 ? 127.0 : nc)) + 127;
    const int e2 = low ? 27 : (nc > 127.0 ? int(nc - 127.0) + 127 : 127);
    precise float scaled = (j * uintBitsToFloat(uint(e1) << 23)) * uintBitsToFloat(uint(e2) << 23);
    const float big = n <= 0.0 ? 0.0 : uintBitsToFloat(0x7F800000u);
    return abs(n) > 192.0 ? big : scaled;
}

// tanh to about an ulp (Cephes' tanhf): a polynomial near 0, 1 - 2 / (e^2x + 1) beyond.
float tanh_ref(float x) {
    const float a = abs(x);
    if (a < 0.625) {
        const float z = x * x;
        precise float p = ((((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z +
                            1.33314422036e-1) * z - 3.33332819422e-1) * z * x + x;
        return p;
    }
    if (a > 44.0) return sign(x);
    precise float r = 1.0 - 2.0 / (exp_ref(2.0 * a) + 1.0);
    return x < 0.0 ? -r : r;
}

// sin and cos to about an ulp for |x| up to tens of thousands (Cephes' sinf/cosf: reduction by pi/4
// in three parts, a polynomial on [-pi/4, pi/4]); the drivers' own may be far coarser.
void sincos_ref(float x, out float s, out float c) {
    float sign_s = 1.0;
    if (x < 0.0) {
        x = -x;
        sign_s = -1.0;
    }
    float jf = floor(x * 1.27323954473516);
    uint j = uint(jf);
    if ((j & 1u) != 0u) {
        j += 1u;
        jf += 1.0;
    }
    j &= 7u;
    precise float r = ((x - jf * 0.78515625) - jf * 2.4187564849853515625e-4) - jf * 3.77489497744594108e-8;
    float sign_c = 1.0;
    if (j > 3u) {
        j -= 4u;
        sign_s = -sign_s;
        sign_c = -sign_c;
    }
    if (j > 1u) sign_c = -sign_c;
    const float z = r * r;
    precise float pc = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z -
                       0.5 * z + 1.0;
    precise float ps = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    if (j == 1u || j == 2u) {
        s = sign_s * pc;
        c = sign_c * ps;
    } else {
        s = sign_s * ps;
        c = sign_c * pc;
    }
}

float silu_ref(float x) {
    return x / (1.0 + exp_ref(-x));
}

// the tanh form of GELU, 1 + a x^2 as one fma (the CPU's gelu_tanh)
float gelu_ref(float x) {
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876;
    return 0.5 * x * (1.0 + tanh_ref(sqrt_2_over_pi * x * fma(0.044715 * x, x, 1.0)));
}
