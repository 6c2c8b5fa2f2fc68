// src/runtime/recurrent_memory.cpp — a recurrent model's per-sequence states: buffer, positions, the
// all-or-nothing removal and copy of a sequence, the current and spare column of each, rollback.
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
    : pos_min_(n_seq_max, -1), pos_max_(n_seq_max, -1), current_(n_seq_max, 0) {
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
            l.conv = ctx_->new_tensor(dtype::f32, {hp.n_embd_r, 2 * int64_t(n_seq_max)});
            l.conv->format_name("cache_conv_l%lld", static_cast<long long>(il));
            tensors.push_back(l.conv);
        }
        if (hp.n_embd_s > 0) {
            l.ssm = ctx_->new_tensor(dtype::f32, {hp.n_embd_s, 2 * int64_t(n_seq_max)});
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

uint8_t *recurrent_memory::state_at(const tensor &t, int64_t col) const {
    return static_cast<uint8_t *>(t.data) + size_t(col) * t.nb[1];
}

uint8_t *recurrent_memory::conv_row(size_t il, seq_id s) const {
    return state_at(*layers_.at(il).conv, column(s));
}

uint8_t *recurrent_memory::ssm_row(size_t il, seq_id s) const {
    return state_at(*layers_.at(il).ssm, column(s));
}

void recurrent_memory::ubatch_columns(std::span<const seq_id> seqs, std::vector<int32_t> &read,
                                      std::vector<int32_t> &written, std::vector<int32_t> &pairs) const {
    for (seq_id s : seqs) {
        const auto cur = int32_t(column(s)), spare = int32_t(s) * 2 + (1 - current_.at(size_t(s)));
        read.push_back(cur);
        written.push_back(spare);
        pairs.push_back(cur);
        pairs.push_back(spare);
    }
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
    std::fill(current_.begin(), current_.end(), uint8_t(0));
    if (buffer_) buffer_->clear(0);
}

void recurrent_memory::begin() {
    journal_.pos_min = pos_min_;
    journal_.pos_max = pos_max_;
    journal_.current = current_;
    journal_.advanced.assign(current_.size(), 0);
    journal_.kept_seqs.clear();
    journal_.kept.clear();
}

// advanced: 0 untouched by the decode, 1 advanced (its spare holds its state from before), 2 kept
void recurrent_memory::prepare(std::span<const seq_id> seqs) {
    if (journal_.advanced.size() != current_.size()) begin();
    for (seq_id s : seqs) {
        if (journal_.advanced[size_t(s)] != 1) continue;
        const int64_t spare = int64_t(s) * 2 + (1 - current_[size_t(s)]);
        for (size_t il = 0; il < layers_.size(); ++il) {
            if (layers_[il].conv) {
                const uint8_t *p = state_at(*layers_[il].conv, spare);
                journal_.kept.insert(journal_.kept.end(), p, p + conv_row_bytes(il));
            }
            if (layers_[il].ssm) {
                const uint8_t *p = state_at(*layers_[il].ssm, spare);
                journal_.kept.insert(journal_.kept.end(), p, p + ssm_row_bytes(il));
            }
        }
        journal_.kept_seqs.push_back(s);
        journal_.advanced[size_t(s)] = 2;
    }
}

void recurrent_memory::commit(std::span<const seq_id> seqs) {
    if (journal_.advanced.size() != current_.size()) begin();
    for (seq_id s : seqs) {
        current_[size_t(s)] ^= 1;
        if (journal_.advanced[size_t(s)] == 0) journal_.advanced[size_t(s)] = 1;
    }
}

void recurrent_memory::restore() {
    if (journal_.advanced.size() != current_.size()) return;  // no decode began
    pos_min_ = journal_.pos_min;
    pos_max_ = journal_.pos_max;
    current_ = journal_.current;
    const uint8_t *p = journal_.kept.data();
    for (seq_id s : journal_.kept_seqs)
        for (size_t il = 0; il < layers_.size(); ++il) {
            if (layers_[il].conv) std::memcpy(conv_row(il, s), p, conv_row_bytes(il));
            p += conv_row_bytes(il);
            if (layers_[il].ssm) std::memcpy(ssm_row(il, s), p, ssm_row_bytes(il));
            p += ssm_row_bytes(il);
        }
    journal_.kept_seqs.clear();
    journal_.kept.clear();
}

}  // namespace weft
