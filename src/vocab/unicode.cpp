// src/vocab/unicode.cpp — UTF-8 decoding, the GPT-2 byte-level alphabet and utf8proc-backed classes.
#include "vocab/unicode.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>

#include "weft/core/error.h"

namespace weft::unicode {

size_t valid_sequence_length(std::string_view text, size_t pos) {
    const size_t left = text.size() - pos;
    const auto byte = [&](size_t i) { return uint8_t(text[pos + i]); };
    const uint8_t b0 = byte(0);
    if (b0 < 0x80) return 1;
    const auto is_cont = [](uint8_t b) { return (b & 0xC0) == 0x80; };
    if (b0 >= 0xC2 && b0 <= 0xDF) return left >= 2 && is_cont(byte(1)) ? 2 : 0;
    if (b0 >= 0xE0 && b0 <= 0xEF) {
        if (left < 3 || !is_cont(byte(1)) || !is_cont(byte(2))) return 0;
        if (b0 == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
        if (b0 == 0xED && byte(1) >= 0xA0) return 0;  // surrogate
        return 3;
    }
    if (b0 >= 0xF0 && b0 <= 0xF4) {
        if (left < 4 || !is_cont(byte(1)) || !is_cont(byte(2)) || !is_cont(byte(3))) return 0;
        if (b0 == 0xF0 && byte(1) < 0x90) return 0;   // overlong
        if (b0 == 0xF4 && byte(1) >= 0x90) return 0;  // > U+10FFFF
        return 4;
    }
    return 0;
}

uint32_t decode(std::string_view text, size_t &pos) {
    const size_t n = valid_sequence_length(text, pos);
    const auto b = [&](size_t i) { return uint32_t(uint8_t(text[pos + i])); };
    uint32_t cpt = invalid_cpt;
    switch (n) {
        case 1:
            cpt = b(0);
            break;
        case 2:
            cpt = ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
            break;
        case 3:
            cpt = ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
            break;
        case 4:
            cpt = ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
            break;
        default:
            pos += 1;
            return invalid_cpt;
    }
    pos += n;
    return cpt;
}

void append_utf8(std::string &out, uint32_t cpt) {
    if (cpt < 0x80) {
        out += char(cpt);
    } else if (cpt < 0x800) {
        out += char(0xC0 | (cpt >> 6));
        out += char(0x80 | (cpt & 0x3F));
    } else if (cpt < 0x10000) {
        out += char(0xE0 | (cpt >> 12));
        out += char(0x80 | ((cpt >> 6) & 0x3F));
        out += char(0x80 | (cpt & 0x3F));
    } else {
        out += char(0xF0 | (cpt >> 18));
        out += char(0x80 | ((cpt >> 12) & 0x3F));
        out += char(0x80 | ((cpt >> 6) & 0x3F));
        out += char(0x80 | (cpt & 0x3F));
    }
}

namespace {

// The GPT-2 table: printable Latin-1 bytes keep their code point, the other 68 bytes are numbered
// 256, 257, ... in byte order.
struct byte_alphabet {
    std::array<uint32_t, 256> cpt{};
    std::array<std::string, 256> utf8;
    std::array<int16_t, 512> byte_of{};  // every alphabet code point is < 256 + 68

    byte_alphabet() {
        byte_of.fill(-1);
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable =
                (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            cpt[b] = printable ? uint32_t(b) : next++;
            append_utf8(utf8[b], cpt[b]);
            byte_of[cpt[b]] = int16_t(b);
        }
    }
};

const byte_alphabet &alphabet() {
    static const byte_alphabet a;
    return a;
}

utf8proc_category_t category(uint32_t cpt) {
    if (cpt > 0x10FFFF) return UTF8PROC_CATEGORY_CN;
    return utf8proc_category(utf8proc_int32_t(cpt));
}

}  // namespace

uint32_t byte_to_cpt(uint8_t b) {
    return alphabet().cpt[b];
}
const std::string &byte_to_utf8(uint8_t b) {
    return alphabet().utf8[b];
}
int cpt_to_byte(uint32_t cpt) {
    return cpt < 512 ? alphabet().byte_of[cpt] : -1;
}

bool is_whitespace(uint32_t cpt) {
    if ((cpt >= 0x09 && cpt <= 0x0D) || cpt == 0x20 || cpt == 0x85) return true;
    const auto c = category(cpt);
    return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

bool is_control(uint32_t cpt) {
    const auto c = category(cpt);
    return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CO ||
           c == UTF8PROC_CATEGORY_CS;
}

bool is_punctuation(uint32_t cpt) {
    const auto c = category(cpt);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

bool is_symbol(uint32_t cpt) {
    const auto c = category(cpt);
    return c >= UTF8PROC_CATEGORY_SM && c <= UTF8PROC_CATEGORY_SO;
}

bool is_nonspacing_mark(uint32_t cpt) {
    return category(cpt) == UTF8PROC_CATEGORY_MN;
}

bool is_cjk_ideograph(uint32_t cpt) {
    // The ranges of BERT's reference implementation (its 0x2B920 start is kept as it is there).
    return (cpt >= 0x4E00 && cpt <= 0x9FFF) || (cpt >= 0x3400 && cpt <= 0x4DBF) ||
           (cpt >= 0x20000 && cpt <= 0x2A6DF) || (cpt >= 0x2A700 && cpt <= 0x2B73F) ||
           (cpt >= 0x2B740 && cpt <= 0x2B81F) || (cpt >= 0x2B920 && cpt <= 0x2CEAF) ||
           (cpt >= 0xF900 && cpt <= 0xFAFF) || (cpt >= 0x2F800 && cpt <= 0x2FA1F);
}

uint32_t to_lower(uint32_t cpt) {
    if (cpt > 0x10FFFF) return cpt;
    return uint32_t(utf8proc_tolower(utf8proc_int32_t(cpt)));
}

std::string nfd(std::string_view valid_utf8) {
    if (valid_utf8.empty()) return {};
    utf8proc_uint8_t *mapped = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t *>(valid_utf8.data()),
                                            utf8proc_ssize_t(valid_utf8.size()), &mapped, UTF8PROC_DECOMPOSE);
    if (n < 0) throw error(std::string("unicode NFD: ") + utf8proc_errmsg(n));
    std::string out(reinterpret_cast<const char *>(mapped), size_t(n));
    std::free(mapped);
    return out;
}

}  // namespace weft::unicode
