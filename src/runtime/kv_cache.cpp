// src/runtime/kv_cache.cpp — KV cache: tensors in one host buffer, cells per sequence, slots, mask.
#include "weft/runtime/kv_cache.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "weft/core/backend.h"
#include "weft/core/error.h"
#include "weft/core/ops.h"
#include "weft/runtime/context.h"

namespace weft {

namespace {

bool in_range(llm_pos p, llm_pos p0, llm_pos p1) {
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = std::numeric_limits<llm_pos>::max();
    return p >= p0 && p < p1;
}

}  // namespace

dtype kv_cache_type_from_name(std::string_view name) {
    const std::optional<dtype> t = type_from_name(name);
    if (!t || !is_attention_kv_type(*t))
        throw error("unknown KV cache type '" + printable(name, 64) +
                    "' (valid: " + attention_kv_type_names() + ")");
    return *t;
}

kv_cache::kv_cache(const model &m, uint32_t kv_size, dtype type_k, dtype type_v, uint32_t n_seq_max,
                   device *dev, bool offload)
    : type_k_(type_k), type_v_(type_v), n_seq_max_(n_seq_max), cells_(kv_size) {
    const model_hparams &hp = m.hparams();
    // A block type quantizes each head's rows in whole blocks (attention reads a head's rows alone).
    auto check_type = [&](dtype type, const char *which, int64_t head_size) {
        if (!is_attention_kv_type(type))
            throw error(std::string("KV cache type ") + type_name(type) + " for " + which +
                        " is not supported (" + attention_kv_type_names() + ")");
        const int64_t block = type_traits(type).block_size;
        if (head_size % block != 0)
            throw error(std::string("KV cache type ") + type_name(type) + " for " + which +
                        " needs a head size that is a multiple of its block size " + std::to_string(block) +
                        ", but " + m.arch_name() + " has " + which + " heads of " +
                        std::to_string(head_size) + " (use f32, f16 or bf16 for " + which + ")");
    };
    for (int64_t il = 0; il < hp.n_layer; ++il) {  // heads of the sliding-window layers' own size (gemma4)
        check_type(type_k, "K", hp.head_k(il));
        check_type(type_v, "V", hp.head_v(il));
    }
    if (kv_size == 0) throw error("KV cache: the context size must be positive");
    if (n_seq_max == 0 || n_seq_max > uint32_t(max_sequences))
        throw error("KV cache: n_seq_max " + std::to_string(n_seq_max) + " must be in [1, " +
                    std::to_string(max_sequences) + "]");

    context_params cp;
    cp.mem_size = context_overhead(size_t(hp.n_layer) * 2 + 4);
    cp.no_alloc = true;
    ctx_ = std::make_unique<context>(cp);

    layers_.resize(size_t(hp.n_layer));
    std::vector<tensor *> local, offloaded;
    for (int64_t il = m.layers().begin; il < m.layers().end; ++il) {  // a pipeline stage: its layers only
        if (hp.is_recurrent(il)) continue;  // a hybrid model's recurrent layers keep states instead
        if (!hp.has_own_kv(il)) continue;   // it attends over an earlier layer's rows (gemma4)
        kv_layer &l = layers_[size_t(il)];
        l.k = ctx_->new_tensor(type_k, {hp.n_embd_k_gqa(il), int64_t(kv_size)});
        l.v = ctx_->new_tensor(type_v, {hp.n_embd_v_gqa(il), int64_t(kv_size)});
        l.k->format_name("cache_k_l%lld", static_cast<long long>(il));
        l.v->format_name("cache_v_l%lld", static_cast<long long>(il));
        std::vector<tensor *> &home = offload && m.layer_offloaded(il) ? offloaded : local;
        home.insert(home.end(), {l.k, l.v});
    }
    auto allocate = [&](device &d, std::vector<tensor *> &tensors) -> std::unique_ptr<backend_buffer> {
        if (tensors.empty()) return nullptr;
        buffer_type &memory = d.default_buffer_type();
        try {
            return alloc_placed(memory, tensors);
        } catch (const error &e) {
            throw error("the KV cache of " + std::to_string(kv_size) + " cells (" +
                        std::to_string(tensors.size() / 2) + " layers on " + d.name() + ", " +
                        std::string(type_name(type_k_)) + "/" + type_name(type_v_) + ") needs " +
                        std::to_string(placed_size(memory, tensors) >> 20) +
                        " MiB, which cannot be allocated (a smaller context size -c would fit): " + e.what());
        }
    };
    buffer_ = allocate(dev ? *dev : select_device(""), local);
    if (!offloaded.empty()) offload_buffer_ = allocate(*m.offload_device(), offloaded);
}

kv_cache::~kv_cache() = default;

size_t kv_cache::total_bytes() const {
    return (buffer_ ? buffer_->size() : 0) + (offload_buffer_ ? offload_buffer_->size() : 0);
}

const kv_cache::summary &kv_cache::summed() const {
    if (summary_valid_) return summary_;
    summary &m = summary_;
    m.used = 0;
    m.used_end = 0;
    m.shifted = false;
    m.pos_max.assign(n_seq_max_, -1);
    m.last_cell.assign(n_seq_max_, -1);
    for (uint32_t i = 0; i < cells_.size(); ++i) {
        const kv_cell &c = cells_[i];
        if (c.empty()) continue;
        ++m.used;
        m.used_end = i + 1;
        m.shifted = m.shifted || c.delta != 0;
        for (uint64_t bits = c.seq_mask; bits; bits &= bits - 1) {
            const auto seq = size_t(std::countr_zero(bits));
            m.pos_max[seq] = std::max(m.pos_max[seq], c.pos);
            m.last_cell[seq] = i;
        }
    }
    summary_valid_ = true;
    return m;
}

uint32_t kv_cache::used_cells() const {
    return summed().used;
}

std::vector<uint32_t> kv_cache::find_slots(uint32_t n_tokens) const {
    std::vector<uint32_t> slots;
    slots.reserve(n_tokens);
    for (uint32_t i = 0; i < cells_.size() && slots.size() < n_tokens; ++i)
        if (cells_[i].empty()) slots.push_back(i);
    if (slots.size() < n_tokens) slots.clear();
    return slots;
}

std::vector<uint32_t> kv_cache::find_slots(std::span<const std::vector<seq_id>> seqs,
                                           bool out_of_order) const {
    const uint32_t size = this->size();
    std::vector<int64_t> last = summed().last_cell;  // the highest cell of each sequence
    // the cells this call took (grown as far as it looks: a decode step looks at a few cells)
    std::vector<bool> taken_below;
    auto taken = [&](uint32_t i) { return i < taken_below.size() && taken_below[i]; };
    std::vector<uint32_t> slots;
    slots.reserve(seqs.size());
    uint32_t any = 0;  // where the out-of-order fallback looks next
    for (const auto &token_seqs : seqs) {
        int64_t after = -1;
        for (seq_id s : token_seqs) {
            WEFT_ASSERT(s >= 0 && size_t(s) < last.size());
            after = std::max(after, last[size_t(s)]);
        }
        uint32_t found = size;
        for (uint32_t i = uint32_t(after + 1); i < size; ++i)
            if (cells_[i].empty() && !taken(i)) {
                found = i;
                break;
            }
        for (; found == size && out_of_order && any < size; ++any)
            if (cells_[any].empty() && !taken(any)) found = any;
        if (found == size) return {};
        if (found >= taken_below.size()) taken_below.resize(found + 1, false);
        taken_below[found] = true;
        slots.push_back(found);
        for (seq_id s : token_seqs) last[size_t(s)] = std::max<int64_t>(last[size_t(s)], found);
    }
    return slots;
}

void kv_cache::assign(uint32_t cell, llm_pos pos, std::span<const seq_id> seqs) {
    WEFT_ASSERT(cell < cells_.size() && cells_[cell].empty());
    kv_cell &c = cells_[cell];
    c.pos = pos;
    c.delta = 0;  // its key is computed at this position
    for (seq_id s : seqs) {
        WEFT_ASSERT(s >= 0 && uint32_t(s) < n_seq_max_);
        c.seq_mask |= uint64_t(1) << s;
    }
    if (!summary_valid_ || c.empty()) return;
    summary &m = summary_;
    ++m.used;
    m.used_end = std::max(m.used_end, cell + 1);
    for (seq_id s : seqs) {
        m.pos_max[size_t(s)] = std::max(m.pos_max[size_t(s)], pos);
        m.last_cell[size_t(s)] = std::max<int64_t>(m.last_cell[size_t(s)], cell);
    }
}

void kv_cache::unassign(std::span<const uint32_t> cells) {
    for (uint32_t c : cells) {
        WEFT_ASSERT(c < cells_.size());
        cells_[c] = kv_cell{};
    }
    changed();
}

uint32_t kv_cache::n_kv_for_graph(uint32_t pad) const {
    const uint32_t used_end = summed().used_end;
    const uint32_t padded = std::max<uint32_t>(1, (used_end + pad - 1) / pad) * pad;
    return std::min<uint32_t>(padded, size());
}

bool kv_cache::seq_rm(seq_id s, llm_pos p0, llm_pos p1) {
    if (s >= int32_t(n_seq_max_)) return false;
    changed();
    for (kv_cell &c : cells_) {
        if (c.empty() || !in_range(c.pos, p0, p1)) continue;
        if (s < 0)
            c.seq_mask = 0;
        else
            c.seq_mask &= ~(uint64_t(1) << s);
        if (c.empty()) c = kv_cell{};
    }
    return true;
}

void kv_cache::seq_cp(seq_id src, seq_id dst, llm_pos p0, llm_pos p1) {
    if (src == dst || src < 0 || dst < 0 || uint32_t(src) >= n_seq_max_ || uint32_t(dst) >= n_seq_max_)
        return;
    changed();
    for (kv_cell &c : cells_)
        if (c.has_seq(src) && in_range(c.pos, p0, p1)) c.seq_mask |= uint64_t(1) << dst;
}

void kv_cache::seq_keep(seq_id s) {
    changed();
    for (kv_cell &c : cells_) {
        if (s >= 0 && uint32_t(s) < n_seq_max_ && c.has_seq(s)) {
            c.seq_mask = uint64_t(1) << s;
        } else {
            c = kv_cell{};
        }
    }
}

llm_pos kv_cache::seq_pos_max(seq_id s) const {
    if (s < 0 || uint32_t(s) >= n_seq_max_) return -1;
    return summed().pos_max[size_t(s)];
}

std::vector<llm_pos> kv_cache::seq_pos_max_all() const {
    return summed().pos_max;
}

llm_pos kv_cache::seq_pos_min(seq_id s) const {
    llm_pos m = -1;
    if (s < 0 || uint32_t(s) >= n_seq_max_) return m;
    for (const kv_cell &c : cells_)
        if (c.has_seq(s) && (m < 0 || c.pos < m)) m = c.pos;
    return m;
}

void kv_cache::clear() {
    for (kv_cell &c : cells_) c = kv_cell{};
    changed();
}

void kv_cache::seq_add(seq_id s, llm_pos p0, llm_pos p1, llm_pos delta) {
    if (delta == 0 || s >= int32_t(n_seq_max_)) return;
    changed();
    for (kv_cell &c : cells_) {
        if (c.empty() || !in_range(c.pos, p0, p1) || (s >= 0 && !c.has_seq(s))) continue;
        c.pos += delta;
        c.delta += delta;
        if (c.pos < 0) c = kv_cell{};
    }
}

void kv_cache::seq_div(seq_id s, llm_pos p0, llm_pos p1, int d) {
    WEFT_ASSERT(d >= 1);
    if (d == 1 || s >= int32_t(n_seq_max_)) return;
    changed();
    for (kv_cell &c : cells_) {
        if (c.empty() || !in_range(c.pos, p0, p1) || (s >= 0 && !c.has_seq(s))) continue;
        const llm_pos divided = c.pos / d;
        c.delta += divided - c.pos;
        c.pos = divided;
    }
}

std::vector<uint32_t> kv_cache::shifted_cells() const {
    std::vector<uint32_t> moved;
    if (!summed().shifted) return moved;
    for (uint32_t i = 0; i < cells_.size(); ++i)
        if (!cells_[i].empty() && cells_[i].delta != 0) moved.push_back(i);
    return moved;
}

void kv_cache::clear_shift() {
    // empty cells keep delta 0 (whatever empties a cell resets it): with no used cell moved there
    // is nothing to clear
    if (!summed().shifted) return;
    for (kv_cell &c : cells_) c.delta = 0;
    summary_.shifted = false;
}

void kv_cache::read_row(const tensor &t, uint32_t c, void *dst) {
    if (t.buffer->is_host())
        std::memcpy(dst, static_cast<const uint8_t *>(t.data) + size_t(c) * t.nb[1], t.nb[1]);
    else
        t.buffer->get_tensor(t, dst, size_t(c) * t.nb[1], t.nb[1]);
}

void kv_cache::write_row(tensor &t, uint32_t c, const void *src) {
    if (t.buffer->is_host())
        std::memcpy(static_cast<uint8_t *>(t.data) + size_t(c) * t.nb[1], src, t.nb[1]);
    else
        t.buffer->set_tensor(t, src, size_t(c) * t.nb[1], t.nb[1]);
}

uint32_t kv_cache::defrag() {
    changed();
    uint32_t moved = 0, to = 0;
    std::vector<uint8_t> row;
    for (uint32_t from = 0; from < cells_.size(); ++from) {
        if (cells_[from].empty()) continue;
        if (from != to) {
            // to < from and every cell below `to` is already placed: the rows never overlap
            for (size_t il = 0; il < layers_.size(); ++il) {
                if (!layers_[il].k) continue;  // a layer of another pipeline stage
                for (tensor *t : {layers_[il].k, layers_[il].v}) {
                    row.resize(t->nb[1]);
                    read_row(*t, from, row.data());
                    write_row(*t, to, row.data());
                }
            }
            cells_[to] = cells_[from];
            cells_[from] = kv_cell{};
            ++moved;
        }
        ++to;
    }
    return moved;
}

void kv_cache::fill_mask(float *mask, uint32_t n_kv, std::span<const llm_pos> pos,
                         std::span<const std::vector<seq_id>> seqs, int64_t window, bool causal,
                         model_hparams::swa_kind kind) const {
    WEFT_ASSERT(pos.size() == seqs.size() && n_kv <= cells_.size());
    const float hidden = -std::numeric_limits<float>::infinity();
    const bool chunked = window > 0 && kind == model_hparams::swa_kind::chunked;
    for (size_t t = 0; t < pos.size(); ++t) {
        uint64_t token_seqs = 0;
        for (seq_id s : seqs[t]) token_seqs |= uint64_t(1) << s;
        // the lowest position the token sees (positions are never negative)
        const int64_t p = pos[t];
        const int64_t first = window <= 0 ? 0 : chunked ? p / window * window : p - window + 1;
        float *row = mask + t * n_kv;
        for (uint32_t c = 0; c < n_kv; ++c) {
            const kv_cell &cell = cells_[c];
            const bool visible =
                (cell.seq_mask & token_seqs) != 0 && (!causal || cell.pos <= p) && int64_t(cell.pos) >= first;
            row[c] = visible ? 0.0f : hidden;
        }
    }
}

}  // namespace weft
