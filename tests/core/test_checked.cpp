// tests/core/test_checked.cpp — overflow-checked size arithmetic, and new_tensor refusing shapes
// whose element count or byte size does not fit.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "weft/core/checked.h"
#include "weft/core/context.h"

namespace weft {
namespace {

constexpr int64_t i64_max = std::numeric_limits<int64_t>::max();
constexpr uint64_t u64_max = std::numeric_limits<uint64_t>::max();

std::string error_of(const std::function<void()> &f) {
    try {
        f();
    } catch (const error &e) {
        return e.what();
    }
    return "";
}

TEST(Checked, ProductsAndSumsThatFitAreExact) {
    EXPECT_EQ(checked_mul<int64_t>(3037000499, 3037000499, "x"), 9223372030926249001);  // just below 2^63
    EXPECT_EQ(checked_mul<int64_t>(-4, 5, "x"), -20);
    EXPECT_EQ(checked_mul<uint64_t>(uint64_t(1) << 32, (uint64_t(1) << 32) - 1, "x"),
              u64_max - (uint64_t(1) << 32) + 1);
    EXPECT_EQ(checked_add<int64_t>(i64_max - 1, 1, "x"), i64_max);
    int64_t out = 0;
    EXPECT_FALSE(mul_overflows<int64_t>(0, i64_max, out));
    EXPECT_EQ(out, 0);
}

TEST(Checked, OverflowIsAnErrorNamingTheOperands) {
    EXPECT_EQ(
        error_of([] { checked_mul<int64_t>(3037000500, 3037000500, "llama.attention.key_length x heads"); }),
        "llama.attention.key_length x heads: 3037000500 x 3037000500 overflows");
    EXPECT_NE(error_of([] { checked_mul<int64_t>(std::numeric_limits<int64_t>::min(), -1, "m"); }), "");
    EXPECT_NE(error_of([] { checked_mul<uint64_t>(u64_max, 2, "m"); }), "");
    EXPECT_EQ(error_of([] { checked_add<int64_t>(i64_max, 1, "rank + rope"); }),
              "rank + rope: 9223372036854775807 + 1 overflows");
    uint64_t out = 0;
    EXPECT_TRUE(add_overflows<uint64_t>(u64_max, 1, out));
}

// An f32 tensor of 2^62 elements counts fine in int64 but is 2^64 bytes: refused, not wrapped to 0.
TEST(Checked, NewTensorRefusesAByteSizeThatOverflows) {
    context ctx{context_params{context_overhead(8), true}};
    const std::vector<int64_t> huge = {int64_t(1) << 31, int64_t(1) << 31};
    const std::string msg = error_of([&] { ctx.new_tensor(dtype::f32, huge); });
    EXPECT_NE(msg.find("new_tensor: byte size"), std::string::npos) << msg;
    const std::vector<int64_t> count_overflows = {int64_t(1) << 32, int64_t(1) << 32};
    EXPECT_NE(error_of([&] { ctx.new_tensor(dtype::f32, count_overflows); }).find("element count"),
              std::string::npos);
    const std::vector<int64_t> fits = {int64_t(1) << 30, int64_t(1) << 30};  // 4 EiB of metadata only
    EXPECT_EQ(error_of([&] { ctx.new_tensor(dtype::f32, fits); }), "");
}

}  // namespace
}  // namespace weft
