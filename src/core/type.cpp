// src/core/type.cpp — the table of element types: names, block sizes, bytes per block.
#include "weft/core/type.h"

#include <array>
#include <cctype>

#include "weft/core/error.h"

namespace weft {
namespace {

constexpr size_t n_types = size_t(dtype::count);

// Block layouts are those of the established format: QK4_0 = 32 elements in 2 + 16 bytes, etc.
constexpr std::array<type_info, n_types> make_table() {
    std::array<type_info, n_types> t{};
    auto set = [&](dtype ty, const char *name, int64_t bs, size_t sz, bool q) {
        t[size_t(ty)] = type_info{name, bs, sz, q, true};
    };
    set(dtype::f32, "f32", 1, 4, false);
    set(dtype::f16, "f16", 1, 2, false);
    set(dtype::q4_0, "q4_0", 32, 2 + 16, true);
    set(dtype::q4_1, "q4_1", 32, 2 + 2 + 16, true);
    set(dtype::q5_0, "q5_0", 32, 2 + 4 + 16, true);
    set(dtype::q5_1, "q5_1", 32, 2 + 2 + 4 + 16, true);
    set(dtype::q8_0, "q8_0", 32, 2 + 32, true);
    set(dtype::q8_1, "q8_1", 32, 2 + 2 + 32, true);
    set(dtype::q2_k, "q2_K", 256, 16 + 64 + 2 + 2, true);
    set(dtype::q3_k, "q3_K", 256, 32 + 64 + 12 + 2, true);
    set(dtype::q4_k, "q4_K", 256, 2 + 2 + 12 + 128, true);
    set(dtype::q5_k, "q5_K", 256, 2 + 2 + 12 + 32 + 128, true);
    set(dtype::q6_k, "q6_K", 256, 128 + 64 + 16 + 2, true);
    set(dtype::q8_k, "q8_K", 256, 4 + 256 + 2 * 16, true);
    set(dtype::iq4_nl, "iq4_nl", 32, 2 + 16, true);
    set(dtype::iq4_xs, "iq4_xs", 256, 2 + 2 + 4 + 128, true);
    set(dtype::i8, "i8", 1, 1, false);
    set(dtype::i16, "i16", 1, 2, false);
    set(dtype::i32, "i32", 1, 4, false);
    set(dtype::i64, "i64", 1, 8, false);
    set(dtype::f64, "f64", 1, 8, false);
    set(dtype::bf16, "bf16", 1, 2, false);
    set(dtype::iq2_xxs, "iq2_xxs", 256, 2 + 64, true);
    set(dtype::iq2_xs, "iq2_xs", 256, 2 + 64 + 8, true);
    set(dtype::iq3_xxs, "iq3_xxs", 256, 2 + 96, true);
    set(dtype::iq2_s, "iq2_s", 256, 2 + 64 + 8 + 8, true);
    set(dtype::iq1_s, "iq1_s", 256, 2 + 32 + 16, true);
    set(dtype::iq1_m, "iq1_m", 256, 32 + 16 + 8, true);
    set(dtype::iq3_s, "iq3_s", 256, 2 + 64 + 8 + 32 + 4, true);
    set(dtype::tq1_0, "tq1_0", 256, 48 + 4 + 2, true);
    set(dtype::tq2_0, "tq2_0", 256, 64 + 2, true);
    set(dtype::mxfp4, "mxfp4", 32, 1 + 16, true);
    return t;
}

constexpr auto table = make_table();
static_assert(table[size_t(dtype::q4_k)].type_size == 144, "q4_K block is 144 bytes");
static_assert(table[size_t(dtype::q6_k)].type_size == 210, "q6_K block is 210 bytes");
static_assert(table[size_t(dtype::q8_k)].type_size == 292, "q8_K block is 292 bytes");
static_assert(table[size_t(dtype::iq4_nl)].type_size == 18, "iq4_nl block is 18 bytes");
static_assert(table[size_t(dtype::iq4_xs)].type_size == 136, "iq4_xs block is 136 bytes");
static_assert(table[size_t(dtype::iq2_xxs)].type_size == 66, "iq2_xxs block is 66 bytes");
static_assert(table[size_t(dtype::iq2_xs)].type_size == 74, "iq2_xs block is 74 bytes");
static_assert(table[size_t(dtype::iq3_xxs)].type_size == 98, "iq3_xxs block is 98 bytes");
static_assert(table[size_t(dtype::iq2_s)].type_size == 82, "iq2_s block is 82 bytes");
static_assert(table[size_t(dtype::iq1_s)].type_size == 50, "iq1_s block is 50 bytes");
static_assert(table[size_t(dtype::iq1_m)].type_size == 56, "iq1_m block is 56 bytes");
static_assert(table[size_t(dtype::iq3_s)].type_size == 110, "iq3_s block is 110 bytes");
static_assert(table[size_t(dtype::tq1_0)].type_size == 54, "tq1_0 block is 54 bytes");
static_assert(table[size_t(dtype::tq2_0)].type_size == 66, "tq2_0 block is 66 bytes");
static_assert(table[size_t(dtype::mxfp4)].type_size == 17, "mxfp4 block is 17 bytes");

const type_info unknown{};

}  // namespace

const type_info &type_traits(dtype t) {
    const auto i = size_t(t);
    return i < n_types ? table[i] : unknown;
}

bool type_is_known(int32_t raw) {
    return raw >= 0 && size_t(raw) < n_types && table[size_t(raw)].known;
}

const char *type_name(dtype t) {
    const auto &ti = type_traits(t);
    return ti.known ? ti.name : "unknown";
}

std::optional<dtype> type_from_name(std::string_view name) {
    for (size_t i = 0; i < n_types; ++i) {
        if (!table[i].known) continue;
        std::string_view n = table[i].name;
        if (n.size() != name.size()) continue;
        bool eq = true;
        for (size_t k = 0; k < n.size() && eq; ++k)
            eq = std::tolower(static_cast<unsigned char>(n[k])) ==
                 std::tolower(static_cast<unsigned char>(name[k]));
        if (eq) return dtype(i);
    }
    return std::nullopt;
}

size_t row_size(dtype t, int64_t ne0) {
    const auto &ti = type_traits(t);
    WEFT_ASSERT(ti.known);
    WEFT_ASSERT(ne0 % ti.block_size == 0);
    return size_t(ne0 / ti.block_size) * ti.type_size;
}

}  // namespace weft
