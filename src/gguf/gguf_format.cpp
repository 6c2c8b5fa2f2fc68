// src/gguf/gguf_format.cpp — names and sizes of GGUF metadata value types.
#include "gguf/gguf_format.h"

#include <array>

namespace weft {

namespace {

struct value_type_info {
    const char *name;
    size_t size;
};

constexpr std::array<value_type_info, 13> value_types = {{
    {"u8", 1},
    {"i8", 1},
    {"u16", 2},
    {"i16", 2},
    {"u32", 4},
    {"i32", 4},
    {"f32", 4},
    {"bool", 1},
    {"string", 0},
    {"array", 0},
    {"u64", 8},
    {"i64", 8},
    {"f64", 8},
}};
static_assert(value_types.size() == size_t(gguf_type::f64) + 1, "one entry per metadata value type");

}  // namespace

const char *gguf_type_name(gguf_type t) {
    const auto i = size_t(t);
    return i < value_types.size() ? value_types[i].name : "unknown";
}

size_t gguf_type_size(gguf_type t) {
    const auto i = size_t(t);
    return i < value_types.size() ? value_types[i].size : 0;
}

std::string gguf_shape_string(const gguf_tensor_info &t) {
    std::string s = "[";
    for (uint32_t d = 0; d < t.n_dims && d < 4; ++d) {
        if (d) s += ", ";
        s += std::to_string(t.ne[d]);
    }
    return s + "]";
}

const char *gguf_file_type_name(int64_t file_type) {
    // The established numbering (llama_ftype); holes are retired values (4-6, 33-35).
    switch (file_type) {
        case 0:
            return "ALL_F32";
        case 1:
            return "MOSTLY_F16";
        case 2:
            return "MOSTLY_Q4_0";
        case 3:
            return "MOSTLY_Q4_1";
        case 7:
            return "MOSTLY_Q8_0";
        case 8:
            return "MOSTLY_Q5_0";
        case 9:
            return "MOSTLY_Q5_1";
        case 10:
            return "MOSTLY_Q2_K";
        case 11:
            return "MOSTLY_Q3_K_S";
        case 12:
            return "MOSTLY_Q3_K_M";
        case 13:
            return "MOSTLY_Q3_K_L";
        case 14:
            return "MOSTLY_Q4_K_S";
        case 15:
            return "MOSTLY_Q4_K_M";
        case 16:
            return "MOSTLY_Q5_K_S";
        case 17:
            return "MOSTLY_Q5_K_M";
        case 18:
            return "MOSTLY_Q6_K";
        case 19:
            return "MOSTLY_IQ2_XXS";
        case 20:
            return "MOSTLY_IQ2_XS";
        case 21:
            return "MOSTLY_Q2_K_S";
        case 22:
            return "MOSTLY_IQ3_XS";
        case 23:
            return "MOSTLY_IQ3_XXS";
        case 24:
            return "MOSTLY_IQ1_S";
        case 25:
            return "MOSTLY_IQ4_NL";
        case 26:
            return "MOSTLY_IQ3_S";
        case 27:
            return "MOSTLY_IQ3_M";
        case 28:
            return "MOSTLY_IQ2_S";
        case 29:
            return "MOSTLY_IQ2_M";
        case 30:
            return "MOSTLY_IQ4_XS";
        case 31:
            return "MOSTLY_IQ1_M";
        case 32:
            return "MOSTLY_BF16";
        case 36:
            return "MOSTLY_TQ1_0";
        case 37:
            return "MOSTLY_TQ2_0";
        case 38:
            return "MOSTLY_MXFP4_MOE";
        case 1024:
            return "GUESSED";
        default:
            return nullptr;
    }
}

}  // namespace weft
