// src/gguf/gguf_format.h — GGUF on-disk constants and helpers shared by the reader and the writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "weft/gguf/gguf.h"

namespace weft {

inline constexpr size_t gguf_default_alignment = 32;
inline constexpr uint32_t gguf_version_current = 3;
// Smallest possible encodings, used to reject counts that cannot fit in the bytes left.
inline constexpr uint64_t gguf_min_kv_bytes = 8 + 4 + 1;               // key length, type, 1-byte value
inline constexpr uint64_t gguf_min_tensor_info_bytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

// True for the 13 metadata value type ids.
inline bool gguf_type_is_valid(uint32_t raw) {
    return raw <= uint32_t(gguf_type::f64);
}

// Bytes of one element of a numeric/bool type; 0 for string and array.
size_t gguf_type_size(gguf_type t);

// "[4096, 32000]" — the tensor's shape as in error messages (ne[0] first).
std::string gguf_shape_string(const gguf_tensor_info &t);

}  // namespace weft
