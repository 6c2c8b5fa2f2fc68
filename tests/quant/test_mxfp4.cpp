// tests/quant/test_mxfp4.cpp — mxfp4's block format, its e8m0 scale, and its quantizer on values whose
// bytes follow from the established algorithm by hand (the shared exponent puts the block's largest
// magnitude in [4, 8) x 2^(e - 127); each value takes the nearest level, the first on ties).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "quant/quant_testing.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"
#include "weft/quant/blocks.h"
#include "weft/quant/quant.h"

using namespace weft;
using namespace weft::test;

namespace {

block_mxfp4 quantize_block(const std::vector<float> &x) {
    EXPECT_EQ(x.size(), size_t(qk_mxfp4));
    const auto q = quantize(dtype::mxfp4, x, qk_mxfp4);
    block_mxfp4 b;
    std::memcpy(&b, q.data(), sizeof b);
    return b;
}

int index_at(const block_mxfp4 &b, int j) {
    return j < 16 ? b.qs[j] & 0x0F : b.qs[j - 16] >> 4;
}

}  // namespace

TEST(Mxfp4, E8m0HalfScaleIsTwoToTheEMinus128) {
    for (int e = 0; e < 256; ++e)
        EXPECT_EQ(e8m0_to_fp32_half(uint8_t(e)), std::ldexp(1.0f, e - 128)) << "e = " << e;
    // the two subnormals, written out
    EXPECT_EQ(e8m0_half_bits(0), 0x00200000u);
    EXPECT_EQ(e8m0_half_bits(1), 0x00400000u);
    EXPECT_EQ(e8m0_half_bits(2), 0x00800000u);
    EXPECT_EQ(e8m0_half_bits(127), 0x3F000000u);  // 0.5
}

TEST(Mxfp4, DequantizesTheDoubledE2m1LevelsTimesTheHalfScale) {
    block_mxfp4 b{};
    b.e = 130;  // 2^2: levels x 4
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
    std::vector<float> out(32);
    quant_traits_of(dtype::mxfp4).to_float(&b, out.data(), 32);
    const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int j = 0; j < 16; ++j) {
        const float lo = (j < 8 ? 1.0f : -1.0f) * e2m1[j % 8] * 8.0f;  // 2^(130 - 127) = 8
        const float hi = (15 - j < 8 ? 1.0f : -1.0f) * e2m1[(15 - j) % 8] * 8.0f;
        EXPECT_EQ(out[size_t(j)], lo) << j;
        EXPECT_EQ(out[size_t(j) + 16], hi) << j;
    }
}

// amax 6: floor(log2 6) = 2, e = 127, levels x 0.5. Ties go to the first index in table order:
// 0.25 between 0 (index 0) and 0.5 (1) -> 0; -0.75 between -0.5 (9) and -1 (10) -> 9; 5 between 4 (6)
// and 6 (7) -> 6; -0.25 -> 0 (index 0's 0 comes before index 8's -0).
TEST(Mxfp4, QuantizesAKnownBlock) {
    std::vector<float> x(32, 0.0f);
    const float in[] = {6.0f, -6.0f, 0.25f, 0.75f, -0.25f, -0.75f, 5.0f, 2.4f, -3.2f, 1.0f, 0.1f, -5.5f};
    const int want[] = {7, 15, 0, 1, 0, 9, 6, 4, 13, 2, 0, 15};
    // value j at element j (even j, the low nibbles) or 16 + j (odd j, the high ones)
    auto at = [](size_t j) { return int(j % 2 ? 16 + j : j); };
    for (size_t j = 0; j < std::size(in); ++j) x[size_t(at(j))] = in[j];
    const block_mxfp4 b = quantize_block(x);
    EXPECT_EQ(b.e, 127);
    for (size_t j = 0; j < std::size(in); ++j) EXPECT_EQ(index_at(b, at(j)), want[j]) << "value " << in[j];
    for (int j = 0; j < 32; ++j) {
        if (x[size_t(j)] != 0.0f) continue;
        EXPECT_EQ(index_at(b, j), 0) << j;
    }
}

// The exponent follows the largest magnitude: amax in [4, 8) x 2^k gives e = 127 + k; a value
// beyond 6 x 2^k takes the largest level; an all-zero block has e = 0.
TEST(Mxfp4, SharedExponentAndClamping) {
    for (int k : {-20, -3, 0, 1, 9}) {
        std::vector<float> x(32, 0.0f);
        x[5] = std::ldexp(7.5f, k);  // beyond 6 x 2^k: the largest level, 12 x 2^(k - 1)
        x[20] = -std::ldexp(4.0f, k);
        const block_mxfp4 b = quantize_block(x);
        EXPECT_EQ(int(b.e), 127 + k);
        EXPECT_EQ(index_at(b, 5), 7);
        EXPECT_EQ(index_at(b, 20), 14);  // -8 x 2^(k - 1)
    }
    const block_mxfp4 zero = quantize_block(std::vector<float>(32, 0.0f));
    EXPECT_EQ(zero.e, 0);
    for (uint8_t q : zero.qs) EXPECT_EQ(q, 0);
}

// Below 2^-125 the established exponent formula goes negative and its byte conversion keeps the low
// 8 bits (x86): 2^-126 gives -1 -> 255, a scale of 2^127 under which every value rounds to level 0.
TEST(Mxfp4, TinyBlocksKeepTheEstablishedExponentByte) {
    std::vector<float> x(32, 0.0f);
    x[0] = std::ldexp(1.0f, -126);
    x[1] = -std::ldexp(1.0f, -127);
    const block_mxfp4 b = quantize_block(x);
    EXPECT_EQ(b.e, 255);
    for (uint8_t q : b.qs) EXPECT_EQ(q, 0);
}

TEST(Mxfp4, NormalDataRoundTripsWithinFp4Resolution) {
    const int64_t n = 32 * 64;
    const auto x = normal_values(size_t(n) * 3, 77, 0.02f);
    const auto q = quantize(dtype::mxfp4, x, n);
    ASSERT_EQ(q.size(), size_t(3 * 64 * 17));
    const auto back = dequantize(dtype::mxfp4, q, int64_t(x.size()));
    const double err = relative_rmse(back.data(), x.data(), x.size());
    RecordProperty("relative_rmse", std::to_string(err));
    EXPECT_GT(err, 0.02);  // 4-bit floats: not lossless
    EXPECT_LE(err, 0.13);
    // every value decodes to a representable level times the block's scale, and re-quantizing the
    // decoded values gives the same bytes (the levels are fixed points of the quantizer)
    EXPECT_EQ(quantize(dtype::mxfp4, back, n), q);
}

TEST(Mxfp4, ImportanceIsIgnoredAsInTheEstablishedQuantizer) {
    const auto x = normal_values(64, 5, 1.0f);
    std::vector<float> importance(64, 1.0f);
    importance[3] = 100.0f;
    std::vector<uint8_t> plain(row_size(dtype::mxfp4, 64)), weighted(plain.size());
    quantize_rows(dtype::mxfp4, x.data(), plain.data(), 1, 64);
    quantize_rows(dtype::mxfp4, x.data(), weighted.data(), 1, 64, importance.data());
    EXPECT_EQ(plain, weighted);
}

TEST(Mxfp4, TypeTableAndNames) {
    EXPECT_EQ(int(dtype::mxfp4), 39);  // GGUF's id
    EXPECT_TRUE(type_is_known(39));
    EXPECT_STREQ(type_name(dtype::mxfp4), "mxfp4");
    EXPECT_EQ(type_from_name("MXFP4"), dtype::mxfp4);
    EXPECT_EQ(row_size(dtype::mxfp4, 64), 34u);
    EXPECT_THROW(quantize_rows(dtype::mxfp4, nullptr, nullptr, 1, 48), error);
}

// Byte for byte against the established quantizer's own file: WEFT_MXFP4_F32 names an F32 model and
// WEFT_MXFP4_REFERENCE the reference's MXFP4_MOE quantization of it (scripts/mxfp4-vs-reference.sh
// makes both and runs this). Every mxfp4 tensor of the reference's file, quantized here from the
// F32 values, must give the same bytes. Skips when the variables are unset.
TEST(Mxfp4, QuantizesAsTheEstablishedQuantizerOnItsFile) {
    const char *f32_path = std::getenv("WEFT_MXFP4_F32");
    const char *ref_path = std::getenv("WEFT_MXFP4_REFERENCE");
    if (!f32_path || !ref_path)
        GTEST_SKIP()
            << "WEFT_MXFP4_F32 / WEFT_MXFP4_REFERENCE unset (scripts/mxfp4-vs-reference.sh sets them)";
    const auto f32 = gguf_file::open(f32_path);
    const auto ref = gguf_file::open(ref_path);
    int compared = 0;
    for (const gguf_tensor_info &t : ref->tensors()) {
        if (t.type != dtype::mxfp4) continue;
        SCOPED_TRACE(t.name);
        const gguf_tensor_info *orig = f32->find_tensor(t.name);
        ASSERT_NE(orig, nullptr);
        ASSERT_EQ(orig->type, dtype::f32);
        const int64_t rows = t.ne[1] * t.ne[2] * t.ne[3];
        std::vector<uint8_t> ours(t.nbytes);
        quantize_rows(dtype::mxfp4, reinterpret_cast<const float *>(f32->tensor_data(*orig)), ours.data(),
                      rows, t.ne[0]);
        const uint8_t *theirs = ref->tensor_data(t);
        size_t differing = 0;
        for (size_t b = 0; b < t.nbytes / sizeof(block_mxfp4); ++b)
            differing += std::memcmp(ours.data() + b * sizeof(block_mxfp4), theirs + b * sizeof(block_mxfp4),
                                     sizeof(block_mxfp4)) != 0;
        EXPECT_EQ(differing, 0u) << "of " << t.nbytes / sizeof(block_mxfp4) << " blocks";
        RecordProperty(t.name, std::to_string(t.nbytes / sizeof(block_mxfp4)) + " blocks equal");
        ++compared;
    }
    EXPECT_GT(compared, 0) << ref_path << " has no mxfp4 tensor";
    std::printf("compared %d mxfp4 tensors of %s byte for byte\n", compared, ref_path);

    // WEFT_MXFP4_WEFT (optional): `weft quantize F32 OUT MXFP4_MOE`'s file has the reference's tensors,
    // each of the same type and with the same bytes (its q8_0 tensors too)
    const char *weft_path = std::getenv("WEFT_MXFP4_WEFT");
    if (!weft_path) return;
    const auto mine = gguf_file::open(weft_path);
    ASSERT_EQ(mine->tensors().size(), ref->tensors().size());
    for (const gguf_tensor_info &t : ref->tensors()) {
        SCOPED_TRACE(t.name);
        const gguf_tensor_info *m = mine->find_tensor(t.name);
        ASSERT_NE(m, nullptr);
        EXPECT_STREQ(type_name(m->type), type_name(t.type));
        ASSERT_EQ(m->nbytes, t.nbytes);
        EXPECT_EQ(std::memcmp(mine->tensor_data(*m), ref->tensor_data(t), t.nbytes), 0);
    }
    std::printf("%s: %zu tensors of the same types and bytes as the reference's\n", weft_path,
                mine->tensors().size());
}
