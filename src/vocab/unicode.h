// src/vocab/unicode.h — UTF-8 decoding, the byte-level alphabet of GPT-2 BPE, and character classes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace weft::unicode {

constexpr uint32_t invalid_cpt = 0xFFFFFFFFu;

// Length in bytes of the well-formed UTF-8 sequence starting at text[pos] (1 to 4), or 0 when the
// bytes there are not one (bad lead byte, truncated sequence, overlong form, surrogate, > U+10FFFF).
size_t valid_sequence_length(std::string_view text, size_t pos);

// Decodes one code point at text[pos] and advances pos. An invalid byte decodes to invalid_cpt
// and advances pos by exactly one byte, so every byte of the input is visited once.
uint32_t decode(std::string_view text, size_t &pos);

void append_utf8(std::string &out, uint32_t cpt);

// GPT-2 byte-level alphabet: every byte maps to one printable code point ('!' stays '!', ' ' becomes
// 'Ġ' U+0120, '\n' becomes 'Ċ' U+010A ...). byte_to_cpt(b) is that code point; cpt_to_byte returns
// -1 for a code point outside the alphabet.
uint32_t byte_to_cpt(uint8_t b);
const std::string &byte_to_utf8(uint8_t b);
int cpt_to_byte(uint32_t cpt);

// Character classes as the BERT normalizer and the established engine define them (utf8proc data).
bool is_whitespace(uint32_t cpt);       // \t \n \v \f \r U+0085 and the Z categories
bool is_control(uint32_t cpt);          // Cc Cf Co Cs
bool is_punctuation(uint32_t cpt);      // P*
bool is_symbol(uint32_t cpt);           // S*
bool is_nonspacing_mark(uint32_t cpt);  // Mn (what accent stripping removes)
bool is_cjk_ideograph(uint32_t cpt);    // the CJK blocks BERT splits into single characters
uint32_t to_lower(uint32_t cpt);

// Canonical decomposition (NFD) of well-formed UTF-8.
std::string nfd(std::string_view valid_utf8);

}  // namespace weft::unicode
