// tests/core/test_type.cpp — the type table and the half/bfloat16 conversions.
#include <gtest/gtest.h>

#include <cmath>

#include "weft/core/fp16.h"
#include "weft/core/type.h"

using namespace weft;

TEST(Type, BlockSizesMatchTheFileFormat) {
    EXPECT_EQ(type_traits(dtype::q4_0).type_size, 18u);
    EXPECT_EQ(type_traits(dtype::q8_0).type_size, 34u);
    EXPECT_EQ(type_traits(dtype::q5_k).type_size, 176u);
    EXPECT_EQ(type_traits(dtype::q2_k).type_size, 84u);
    EXPECT_EQ(type_traits(dtype::q3_k).type_size, 110u);
    EXPECT_EQ(row_size(dtype::q4_k, 512), 288u);
    EXPECT_FALSE(type_is_known(4));
    EXPECT_FALSE(type_is_known(-1));
    EXPECT_FALSE(type_is_known(1000));
    EXPECT_EQ(type_from_name("Q4_K"), dtype::q4_k);
    EXPECT_EQ(type_from_name("nope"), std::nullopt);
}

TEST(Type, HalfRoundTripsEveryFiniteValue) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float f = fp16_to_fp32(fp16_t(h));
        if (std::isnan(f)) continue;
        EXPECT_EQ(fp32_to_fp16(f), h) << std::hex << h;
    }
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);            // rounds to infinity
    EXPECT_EQ(fp32_to_fp16(1.0f + 1.0f / 2048), 0x3c00);  // tie rounds to even
}

TEST(Type, Bfloat16RoundsToNearestEven) {
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
    EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
}
