// src/backends/cpu/interleaved.cpp — repacking to and from the interleaved layout, the scalar group
// kernel (the oracle the SIMD kernels must match bit for bit) and the run-time ISA choice.
#include "backends/cpu/interleaved.h"

#include "backends/cpu/kernels.h"
#include "weft/backends/cpu.h"

#include <cmath>
#include <cstring>

#include "weft/core/cpu_features.h"
#include "weft/core/error.h"
#include "weft/core/fp16.h"
#include "weft/quant/blocks.h"
#include "weft/quant/quant.h"

namespace weft::cpu {

namespace {

constexpr size_t scales_bytes = interleave_rows * sizeof(fp16_t);  // 32
constexpr size_t slot_bytes = interleave_rows * 4;                 // 64

const interleaved_layout layout_q4_0{interleaved_kind::q4_0x16, scales_bytes + 4 * slot_bytes, 8};
const interleaved_layout layout_q8_0{interleaved_kind::q8_0x16, scales_bytes + 8 * slot_bytes, 128};

static_assert(sizeof(block_q4_0) * interleave_rows == scales_bytes + 4 * slot_bytes);
static_assert(sizeof(block_q8_0) * interleave_rows == scales_bytes + 8 * slot_bytes);

const interleaved_layout *layout_for(dtype t) {
    switch (t) {
        case dtype::q4_0:
            return &layout_q4_0;
        case dtype::q8_0:
            return &layout_q8_0;
        default:
            return nullptr;
    }
}

// The fp16 scale and the 32 unsigned stored quants (value + offset) of one plain block.
void plain_block_quants(dtype t, const void *block, fp16_t &d, uint8_t u[32]) {
    if (t == dtype::q4_0) {
        const auto &b = *static_cast<const block_q4_0 *>(block);
        d = b.d;
        for (int i = 0; i < 16; ++i) {
            u[i] = b.qs[i] & 0x0F;
            u[i + 16] = b.qs[i] >> 4;
        }
    } else {
        const auto &b = *static_cast<const block_q8_0 *>(block);
        d = b.d;
        for (int i = 0; i < 32; ++i) u[i] = uint8_t(int(b.qs[i]) + 128);
    }
}

// Unsigned quant i (0..31) of row r (0..15) of one interleaved block.
uint8_t interleaved_quant(const interleaved_layout &l, const uint8_t *block, int r, int i) {
    const uint8_t *slots = block + scales_bytes;
    if (l.kind == interleaved_kind::q4_0x16) {
        const int s = (i % 16) / 4;
        const uint8_t byte = slots[size_t(s) * slot_bytes + size_t(r) * 4 + size_t(i % 4)];
        return i < 16 ? (byte & 0x0F) : (byte >> 4);
    }
    return slots[size_t(i / 4) * slot_bytes + size_t(r) * 4 + size_t(i % 4)];
}

}  // namespace

const interleaved_layout *interleaved_layout_of(const tensor &t) {
    if (t.extra == &layout_q4_0 || t.extra == &layout_q8_0)
        return static_cast<const interleaved_layout *>(t.extra);
    return nullptr;
}

bool can_interleave(const tensor &t) {
    return layout_for(t.type) != nullptr && t.ne[2] == 1 && t.ne[3] == 1 && t.ne[1] % interleave_rows == 0 &&
           t.ne[0] % interleave_block == 0 && t.is_contiguous() && !t.is_view() && t.extra == nullptr;
}

void interleave_tensor(tensor &t, const void *src, void *dst) {
    WEFT_ASSERT(can_interleave(t));
    const interleaved_layout &l = *layout_for(t.type);
    const int64_t nb = t.ne[0] / interleave_block;
    const size_t block_size = type_traits(t.type).type_size;
    const auto *in = static_cast<const uint8_t *>(src);
    auto *out = static_cast<uint8_t *>(dst);
    for (int64_t g = 0; g < t.ne[1] / interleave_rows; ++g) {
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t *block = out + (size_t(g) * size_t(nb) + size_t(b)) * l.block_bytes;
            uint8_t *slots = block + scales_bytes;
            for (int r = 0; r < interleave_rows; ++r) {
                const int64_t row = g * interleave_rows + r;
                fp16_t d;
                uint8_t u[32];
                plain_block_quants(t.type, in + size_t(row) * t.nb[1] + size_t(b) * block_size, d, u);
                std::memcpy(block + size_t(r) * sizeof(fp16_t), &d, sizeof d);
                if (l.kind == interleaved_kind::q4_0x16) {
                    for (int s = 0; s < 4; ++s)
                        for (int j = 0; j < 4; ++j)
                            slots[size_t(s) * slot_bytes + size_t(r) * 4 + size_t(j)] =
                                uint8_t(u[4 * s + j] | (u[16 + 4 * s + j] << 4));
                } else {
                    for (int s = 0; s < 8; ++s)
                        for (int j = 0; j < 4; ++j)
                            slots[size_t(s) * slot_bytes + size_t(r) * 4 + size_t(j)] = u[4 * s + j];
                }
            }
        }
    }
    t.extra = const_cast<interleaved_layout *>(&l);
}

void deinterleave_row(const tensor &t, int64_t row, void *dst_blocks) {
    const interleaved_layout *l = interleaved_layout_of(t);
    WEFT_ASSERT(l != nullptr && row >= 0 && row < t.ne[1]);
    const int64_t nb = t.ne[0] / interleave_block;
    const int64_t g = row / interleave_rows;
    const int r = int(row % interleave_rows);
    const auto *base = static_cast<const uint8_t *>(t.data);
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *block = base + (size_t(g) * size_t(nb) + size_t(b)) * l->block_bytes;
        fp16_t d;
        std::memcpy(&d, block + size_t(r) * sizeof(fp16_t), sizeof d);
        if (l->kind == interleaved_kind::q4_0x16) {
            auto &out = static_cast<block_q4_0 *>(dst_blocks)[b];
            out.d = d;
            for (int i = 0; i < 16; ++i)
                out.qs[i] = uint8_t(interleaved_quant(*l, block, r, i) |
                                    (interleaved_quant(*l, block, r, i + 16) << 4));
        } else {
            auto &out = static_cast<block_q8_0 *>(dst_blocks)[b];
            out.d = d;
            for (int i = 0; i < 32; ++i) out.qs[i] = int8_t(int(interleaved_quant(*l, block, r, i)) - 128);
        }
    }
}

void group_kernel_scalar(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0,
                         int64_t n_cols, float *dst, int64_t dst_stride) {
    const int64_t nb = a.nb();
    for (int64_t c = 0; c < n_cols; ++c) {
        const int64_t col = c0 + c;
        const int8_t *qs = a.qs + col * a.k;
        const float *da = a.d + col * nb;
        const int32_t *sa = a.sum + col * nb;
        for (int r = 0; r < interleave_rows; ++r) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t *block = group + size_t(b) * l.block_bytes;
                int32_t isum = 0;
                for (int i = 0; i < 32; ++i)
                    isum += int32_t(interleaved_quant(l, block, r, i)) * qs[b * 32 + i];
                isum -= l.offset * sa[b];
                fp16_t dw;
                std::memcpy(&dw, block + size_t(r) * sizeof(fp16_t), sizeof dw);
                acc = std::fma(float(isum), fp16_to_fp32(dw) * da[b], acc);
            }
            dst[c * dst_stride + r] = acc;
        }
    }
}

bool interleaved_isa_supported(interleaved_isa isa) {
    const cpu_features &f = host_cpu_features();
    switch (isa) {
        case interleaved_isa::scalar:
            return true;
        case interleaved_isa::avx2:
            return f.avx2 && f.fma && f.f16c;
        case interleaved_isa::avx512vnni:
            return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
    }
    return false;
}

group_kernel_fn group_kernel_at(interleaved_isa isa) {
    switch (isa) {
        case interleaved_isa::scalar:
            return group_kernel_scalar;
        case interleaved_isa::avx2:
            return group_kernel_avx2;
        case interleaved_isa::avx512vnni:
            return group_kernel_avx512vnni;
    }
    return group_kernel_scalar;
}

group_kernel_fn best_group_kernel() {
    for (interleaved_isa isa : {interleaved_isa::avx512vnni, interleaved_isa::avx2})
        if (interleaved_isa_supported(isa)) return group_kernel_at(isa);
    return group_kernel_scalar;
}

}  // namespace weft::cpu

namespace weft {

std::unique_ptr<backend_buffer> cpu_repack_weights(std::span<tensor *const> weights) {
    size_t total = 0;
    for (const tensor *t : weights)
        if (t && cpu::can_interleave(*t)) total += cpu::pad_to_cache_line(t->nbytes());
    if (total == 0) return nullptr;
    std::unique_ptr<backend_buffer> buf = cpu_buffer_type().alloc(total);
    auto *base = static_cast<uint8_t *>(buf->base());
    size_t at = 0;
    for (tensor *t : weights) {
        if (!t || !cpu::can_interleave(*t)) continue;
        cpu::interleave_tensor(*t, t->data, base + at);
        t->data = base + at;
        t->buffer = buf.get();
        at += cpu::pad_to_cache_line(t->nbytes());
    }
    return buf;
}

}  // namespace weft

namespace weft::cpu {

void quantize_q8_row(const float *x, int64_t k, int8_t *qs, float *d, int32_t *sum, void *block_scratch) {
    quant_traits_of(dtype::q8_0).from_float(x, block_scratch, k);
    const auto *blocks = static_cast<const block_q8_0 *>(block_scratch);
    for (int64_t b = 0; b < k / interleave_block; ++b) {
        std::memcpy(qs + b * 32, blocks[b].qs, 32);
        d[b] = fp16_to_fp32(blocks[b].d);
        int32_t s = 0;
        for (int i = 0; i < 32; ++i) s += blocks[b].qs[i];
        sum[b] = s;
    }
}

}  // namespace weft::cpu
