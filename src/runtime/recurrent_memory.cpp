// src/runtime/recurrent_memory.cpp — a recurrent model's per-sequence states: buffer, positions, the
// all-or-nothing removal and copy of a sequence, snapshots for rollback.
#include "runtime/recurrent_memory.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "weft/core/backend.h"
#include "weft/core/error.h"
#include "weft/runtime/context.h"
#include "weft/runtime/kv_cache.h"

namespace weft {

recurrent_memory::recurrent_memory(const model &m, uint32_t n_seq_max, device *dev)
    : pos_min_(n_seq_max, -1), pos_max_(n_seq_max, -1) {
    const model_hparams &hp = m.hparams();
    WEFT_ASSERT(hp.has_recurrent_layers() && (hp.n_embd_r > 0 || hp.n_embd_s > 0));
    if (n_seq_max == 0 || n_seq_max > uint32_t(max_sequences))
        throw error("recurrent state: n_seq_max " + std::to_string(n_seq_max) + " must be in [1, " +
                    std::to_string(max_sequences) + "]");
    context_params cp;
    cp.mem_size = context_overhead(size_t(hp.n_layer) * 2 + 4);
    cp.no_alloc = true;
    ctx_ = std::make_unique<context>(cp);

    layers_.resize(size_t(hp.n_layer));
    std::vector<tensor *> tensors;
    for (int64_t il = m.layers().begin; il < m.layers().end; ++il) {  // a pipeline stage: its layers only
        if (!hp.is_recurrent(il)) continue;  // a hybrid model's attention layers use the KV cache
        recurrent_layer &l = layers_[size_t(il)];
        if (hp.n_embd_r > 0) {
            l.conv = ctx_->new_tensor(dtype::f32, {hp.n_embd_r, int64_t(n_seq_max)});
            l.conv->format_name("cache_conv_l%lld", static_cast<long long>(il));
            tensors.push_back(l.conv);
        }
        if (hp.n_embd_s > 0) {
            l.ssm = ctx_->new_tensor(dtype::f32, {hp.n_embd_s, int64_t(n_seq_max)});
            l.ssm->format_name("cache_ssm_l%lld", static_cast<long long>(il));
            tensors.push_back(l.ssm);
        }
    }
    buffer_type &memory = (dev ? *dev : select_device("")).default_buffer_type();
    try {
        buffer_ = alloc_placed(memory, tensors);
    } catch (const error &e) {
        throw error("the recurrent states of " + std::to_string(n_seq_max) + " sequences need " +
                    std::to_string(placed_size(memory, tensors) >> 20) +
                    " MiB, which cannot be allocated: " + e.what());
    }
}

recurrent_memory::~recurrent_memory() = default;

size_t recurrent_memory::total_bytes() const {
    return buffer_ ? buffer_->size() : 0;
}

uint32_t recurrent_memory::used_positions() const {
    uint32_t n = 0;
    for (size_t s = 0; s < pos_max_.size(); ++s)
        if (pos_max_[s] >= 0) n += uint32_t(pos_max_[s] - pos_min_[s] + 1);
    return n;
}

void recurrent_memory::advance(seq_id s, llm_pos pos) {
    if (pos_max_.at(size_t(s)) < 0) pos_min_[size_t(s)] = pos;
    pos_max_[size_t(s)] = pos;
}

uint8_t *recurrent_memory::conv_row(size_t il, seq_id s) const {
    const tensor &t = *layers_.at(il).conv;
    return static_cast<uint8_t *>(t.data) + size_t(s) * t.nb[1];
}

uint8_t *recurrent_memory::ssm_row(size_t il, seq_id s) const {
    const tensor &t = *layers_.at(il).ssm;
    return static_cast<uint8_t *>(t.data) + size_t(s) * t.nb[1];
}

void recurrent_memory::zero_state(seq_id s) {
    for (size_t il = 0; il < layers_.size(); ++il) {
        if (layers_[il].conv) std::memset(conv_row(il, s), 0, conv_row_bytes(il));
        if (layers_[il].ssm) std::memset(ssm_row(il, s), 0, ssm_row_bytes(il));
    }
}

void recurrent_memory::copy_state(seq_id src, seq_id dst) {
    for (size_t il = 0; il < layers_.size(); ++il) {
        if (layers_[il].conv) std::memcpy(conv_row(il, dst), conv_row(il, src), conv_row_bytes(il));
        if (layers_[il].ssm) std::memcpy(ssm_row(il, dst), ssm_row(il, src), ssm_row_bytes(il));
    }
}

void recurrent_memory::set_positions(seq_id s, llm_pos pos_min, llm_pos pos_max) {
    pos_min_.at(size_t(s)) = pos_min;
    pos_max_.at(size_t(s)) = pos_max;
}

namespace {

// How [p0, p1) meets the positions [lo, hi] of a state: all of them, none, or a part.
enum class coverage { all, none, part };
coverage covers(llm_pos lo, llm_pos hi, llm_pos p0, llm_pos p1) {
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = std::numeric_limits<llm_pos>::max();
    if (hi < 0 || p1 <= lo || p0 > hi || p0 >= p1) return coverage::none;
    return p0 <= lo && p1 > hi ? coverage::all : coverage::part;
}

}  // namespace

bool recurrent_memory::seq_rm(seq_id s, llm_pos p0, llm_pos p1) {
    if (s >= 0 && uint32_t(s) >= n_seq_max()) return false;
    const seq_id first = s < 0 ? 0 : s, last = s < 0 ? seq_id(n_seq_max()) - 1 : s;
    for (seq_id q = first; q <= last; ++q)
        if (covers(pos_min_[size_t(q)], pos_max_[size_t(q)], p0, p1) == coverage::part) return false;
    for (seq_id q = first; q <= last; ++q)
        if (covers(pos_min_[size_t(q)], pos_max_[size_t(q)], p0, p1) == coverage::all) {
            set_positions(q, -1, -1);
            zero_state(q);
        }
    return true;
}

void recurrent_memory::seq_cp(seq_id src, seq_id dst, llm_pos p0, llm_pos p1) {
    if (src < 0 || dst < 0 || uint32_t(src) >= n_seq_max() || uint32_t(dst) >= n_seq_max())
        throw error("seq_cp: sequences " + std::to_string(src) + " and " + std::to_string(dst) +
                    " must be in [0, n_seq_max " + std::to_string(n_seq_max()) + ")");
    if (src == dst) return;
    const coverage c = covers(pos_min_[size_t(src)], pos_max_[size_t(src)], p0, p1);
    if (c == coverage::part)
        throw error("seq_cp: a recurrent state holds all of sequence " + std::to_string(src) +
                    "'s positions [" + std::to_string(pos_min_[size_t(src)]) + ", " +
                    std::to_string(pos_max_[size_t(src)]) + "] at once; it cannot be copied in part");
    if (c == coverage::none && pos_max_[size_t(src)] >= 0) return;  // nothing of src in the range
    copy_state(src, dst);
    set_positions(dst, pos_min_[size_t(src)], pos_max_[size_t(src)]);
}

void recurrent_memory::seq_keep(seq_id s) {
    for (seq_id q = 0; q < seq_id(n_seq_max()); ++q)
        if (q != s && pos_max_[size_t(q)] >= 0) {
            set_positions(q, -1, -1);
            zero_state(q);
        }
}

void recurrent_memory::clear() {
    std::fill(pos_min_.begin(), pos_min_.end(), -1);
    std::fill(pos_max_.begin(), pos_max_.end(), -1);
    if (buffer_) buffer_->clear(0);
}

void recurrent_memory::save(std::span<const seq_id> seqs, snapshot &snap) const {
    snap.pos_min = pos_min_;
    snap.pos_max = pos_max_;
    snap.seqs.assign(seqs.begin(), seqs.end());
    snap.states.clear();
    for (seq_id s : seqs)
        for (size_t il = 0; il < layers_.size(); ++il) {
            if (layers_[il].conv)
                snap.states.insert(snap.states.end(), conv_row(il, s), conv_row(il, s) + conv_row_bytes(il));
            if (layers_[il].ssm)
                snap.states.insert(snap.states.end(), ssm_row(il, s), ssm_row(il, s) + ssm_row_bytes(il));
        }
}

void recurrent_memory::restore(const snapshot &snap) {
    pos_min_ = snap.pos_min;
    pos_max_ = snap.pos_max;
    const uint8_t *p = snap.states.data();
    for (seq_id s : snap.seqs)
        for (size_t il = 0; il < layers_.size(); ++il) {
            if (layers_[il].conv) std::memcpy(conv_row(il, s), p, conv_row_bytes(il));
            p += conv_row_bytes(il);
            if (layers_[il].ssm) std::memcpy(ssm_row(il, s), p, ssm_row_bytes(il));
            p += ssm_row_bytes(il);
        }
}

}  // namespace weft
