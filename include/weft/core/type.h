// weft/core/type.h — element types (numeric ids identical to GGUF's) and their block sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace weft {

// The ids are the on-disk GGUF type ids; holes are types that GGUF retired or that weft does not
// know. `count` sizes tables indexed by type.
enum class dtype : int32_t {
    f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q4_1 = 3,
    q5_0 = 6,
    q5_1 = 7,
    q8_0 = 8,
    q8_1 = 9,
    q2_k = 10,
    q3_k = 11,
    q4_k = 12,
    q5_k = 13,
    q6_k = 14,
    q8_k = 15,
    iq2_xxs = 16,
    iq2_xs = 17,
    iq3_xxs = 18,
    iq1_s = 19,
    iq4_nl = 20,
    iq3_s = 21,
    iq2_s = 22,
    iq4_xs = 23,
    i8 = 24,
    i16 = 25,
    i32 = 26,
    i64 = 27,
    f64 = 28,
    iq1_m = 29,
    bf16 = 30,
    tq1_0 = 34,
    tq2_0 = 35,
    mxfp4 = 39,  // gpt-oss's experts: 4-bit floats with a power-of-two scale per 32
    count = 40,
};

struct type_info {
    const char *name = nullptr;  // "f32", "q4_K" ... (as the established tools spell them)
    int64_t block_size = 0;      // elements per block (1 for plain types)
    size_t type_size = 0;        // bytes per block
    bool is_quantized = false;
    bool known = false;  // false for the holes in the id space
};

const type_info &type_traits(dtype t);
// True when `raw` (e.g. read from a file) names a type weft knows.
bool type_is_known(int32_t raw);
const char *type_name(dtype t);
// Case-insensitive: "Q4_K", "q4_k", "F16" ...
std::optional<dtype> type_from_name(std::string_view name);
// Bytes of a row of ne0 elements; ne0 must be a multiple of the block size (asserted).
size_t row_size(dtype t, int64_t ne0);

}  // namespace weft
