// src/core/tensor.cpp — tensor shape helpers, naming, and host element access for tests and tools.
#include "weft/core/tensor.h"

#include <cstdarg>
#include <cstdio>

#include "weft/core/error.h"
#include "weft/core/fp16.h"

namespace weft {

int tensor::n_dims() const {
    for (int i = max_dims - 1; i >= 1; --i)
        if (ne[i] > 1) return i + 1;
    return 1;
}

size_t tensor::nbytes() const {
    for (int i = 0; i < max_dims; ++i)
        if (ne[i] <= 0) return 0;
    const auto &ti = type_traits(type);
    size_t bytes;
    if (ti.block_size == 1) {
        bytes = ti.type_size;
        for (int i = 0; i < max_dims; ++i) bytes += size_t(ne[i] - 1) * nb[i];
    } else {
        bytes = size_t(ne[0] / ti.block_size) * nb[0];
        for (int i = 1; i < max_dims; ++i) bytes += size_t(ne[i] - 1) * nb[i];
    }
    return bytes;
}

bool tensor::is_contiguous() const {
    size_t next = type_traits(type).type_size;
    for (int i = 0; i < max_dims; ++i) {
        if (ne[i] != 1 && nb[i] != next) return false;
        next = (i == 0 ? size_t(ne[0] / type_traits(type).block_size) * next : next * size_t(ne[i]));
    }
    return true;
}

tensor *tensor::set_name(const std::string &n) {
    std::snprintf(name, sizeof name, "%s", n.c_str());
    return this;
}

tensor *tensor::format_name(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(name, sizeof name, fmt, args);
    va_end(args);
    return this;
}

std::string tensor::shape_str() const {
    std::string s = "[";
    const int nd = n_dims();
    for (int i = 0; i < nd; ++i) {
        if (i) s += ", ";
        s += std::to_string(ne[i]);
    }
    return s + "]";
}

bool same_shape(const tensor &a, const tensor &b) {
    for (int i = 0; i < max_dims; ++i)
        if (a.ne[i] != b.ne[i]) return false;
    return true;
}

bool can_repeat(const tensor &b, const tensor &a) {
    for (int i = 0; i < max_dims; ++i)
        if (b.ne[i] <= 0 || a.ne[i] % b.ne[i] != 0) return false;
    return true;
}

namespace {
char *element_ptr(const tensor &t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    if (t.data == nullptr)
        throw error(std::string("tensor '") + t.name + "' has not been computed (no data)");
    WEFT_ASSERT(i0 >= 0 && i0 < t.ne[0] && i1 >= 0 && i1 < t.ne[1] && i2 >= 0 && i2 < t.ne[2] && i3 >= 0 &&
                i3 < t.ne[3]);
    return static_cast<char *>(t.data) + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}
}  // namespace

float tensor_get_f32(const tensor &t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const char *p = element_ptr(t, i0, i1, i2, i3);
    switch (t.type) {
        case dtype::f32: {
            float v;
            std::memcpy(&v, p, 4);
            return v;
        }
        case dtype::f16: {
            fp16_t v;
            std::memcpy(&v, p, 2);
            return fp16_to_fp32(v);
        }
        case dtype::bf16: {
            bf16_t v;
            std::memcpy(&v, p, 2);
            return bf16_to_fp32(v);
        }
        case dtype::i32: {
            int32_t v;
            std::memcpy(&v, p, 4);
            return float(v);
        }
        default:
            throw error(std::string("tensor_get_f32: unsupported type ") + type_name(t.type));
    }
}

void tensor_set_f32(tensor &t, float v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    char *p = element_ptr(t, i0, i1, i2, i3);
    switch (t.type) {
        case dtype::f32:
            std::memcpy(p, &v, 4);
            break;
        case dtype::f16: {
            fp16_t h = fp32_to_fp16(v);
            std::memcpy(p, &h, 2);
            break;
        }
        case dtype::bf16: {
            bf16_t h = fp32_to_bf16(v);
            std::memcpy(p, &h, 2);
            break;
        }
        case dtype::i32: {
            int32_t i = int32_t(v);
            std::memcpy(p, &i, 4);
            break;
        }
        default:
            throw error(std::string("tensor_set_f32: unsupported type ") + type_name(t.type));
    }
}

}  // namespace weft
