// src/runtime/memory.cpp — the three kinds of sequence memory: the KV cache, the recurrent states, and a
// hybrid of both that asks the recurrent part first.
#include "weft/runtime/memory.h"

#include <algorithm>
#include <string>

#include "runtime/recurrent_memory.h"
#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/kv_cache.h"

namespace weft {

const char *memory_kind_name(memory_kind k) {
    switch (k) {
        case memory_kind::attention:
            return "attention";
        case memory_kind::recurrent:
            return "recurrent";
        case memory_kind::hybrid:
            return "hybrid";
    }
    return "?";
}

sequence_memory::~sequence_memory() = default;

namespace {

// The KV cache alone.
class attention_memory final : public sequence_memory {
  public:
    attention_memory(const model &m, const memory_params &p)
        : model_(m),
          kv_(std::make_unique<kv_cache>(m, p.n_ctx, p.type_k, p.type_v, p.n_seq_max, p.dev, p.offload_kv)) {}

    memory_kind kind() const override { return memory_kind::attention; }
    kv_cache *attention() const override { return kv_.get(); }

    bool seq_rm(seq_id s, llm_pos p0, llm_pos p1) override { return kv_->seq_rm(s, p0, p1); }
    void seq_cp(seq_id src, seq_id dst, llm_pos p0, llm_pos p1) override { kv_->seq_cp(src, dst, p0, p1); }
    void seq_keep(seq_id s) override { kv_->seq_keep(s); }
    llm_pos seq_pos_min(seq_id s) const override { return kv_->seq_pos_min(s); }
    llm_pos seq_pos_max(seq_id s) const override { return kv_->seq_pos_max(s); }
    std::vector<llm_pos> seq_pos_max_all() const override { return kv_->seq_pos_max_all(); }
    void clear() override { kv_->clear(); }
    uint32_t used() const override { return kv_->used_cells(); }
    size_t total_bytes() const override { return kv_->total_bytes(); }

    std::string cannot_shift_reason() const override {
        if (model_.can_shift_kv()) return {};
        return model_.arch_name() +
               " cannot move cached tokens to other positions (its positions are not rotary)";
    }
    void seq_add(seq_id s, llm_pos p0, llm_pos p1, llm_pos delta) override { kv_->seq_add(s, p0, p1, delta); }
    void seq_div(seq_id s, llm_pos p0, llm_pos p1, int d) override { kv_->seq_div(s, p0, p1, d); }

    void begin(std::span<const seq_id>) override { assigned_.clear(); }
    // The tokens go after their sequences' cells (attention then sums a sequence in position order);
    // when holes are all that is left, compacting the cache makes room there.
    bool find_room(std::span<const std::vector<seq_id>> seqs, room &out, std::string &why) override {
        const uint32_t n = uint32_t(seqs.size());
        out.compacted = false;
        out.cells = kv_->find_slots(seqs, false);
        if (out.cells.empty() && kv_->size() - kv_->used_cells() >= n) {
            out.compacted = kv_->defrag() > 0;  // the rows moved: a rollback keeps them there
            out.cells = kv_->find_slots(seqs, true);
        }
        if (!out.cells.empty()) return true;
        why = "no KV cache space: the batch needs " + std::to_string(n) + " cells, " +
              std::to_string(kv_->size() - kv_->used_cells()) + " of " + std::to_string(kv_->size()) +
              " are free";
        return false;
    }
    void apply(const room &r, size_t i, llm_pos pos, std::span<const seq_id> seqs) override {
        kv_->assign(r.cells.at(i), pos, seqs);
        assigned_.push_back(r.cells[i]);
    }
    // the cells this call assigned are emptied again; a compaction it made stays
    void rollback() override {
        kv_->unassign(assigned_);
        assigned_.clear();
    }

  private:
    const model &model_;
    std::unique_ptr<kv_cache> kv_;
    std::vector<uint32_t> assigned_;  // the cells the current decode call assigned
};

// The recurrent states alone: n_ctx bounds the positions all sequences' states hold together.
class recurrent_state_memory final : public sequence_memory {
  public:
    recurrent_state_memory(const model &m, const memory_params &p)
        : model_(m), n_ctx_(p.n_ctx), rs_(std::make_unique<recurrent_memory>(m, p.n_seq_max, p.dev)) {
        if (n_ctx_ == 0) throw error("the context size must be positive");
    }

    memory_kind kind() const override { return memory_kind::recurrent; }
    recurrent_memory *recurrent() const override { return rs_.get(); }

    bool seq_rm(seq_id s, llm_pos p0, llm_pos p1) override { return rs_->seq_rm(s, p0, p1); }
    void seq_cp(seq_id src, seq_id dst, llm_pos p0, llm_pos p1) override { rs_->seq_cp(src, dst, p0, p1); }
    void seq_keep(seq_id s) override { rs_->seq_keep(s); }
    llm_pos seq_pos_min(seq_id s) const override { return rs_->seq_pos_min(s); }
    llm_pos seq_pos_max(seq_id s) const override { return rs_->seq_pos_max(s); }
    std::vector<llm_pos> seq_pos_max_all() const override { return rs_->seq_pos_max_all(); }
    void clear() override { rs_->clear(); }
    uint32_t used() const override { return rs_->used_positions(); }
    size_t total_bytes() const override { return rs_->total_bytes(); }

    std::string cannot_shift_reason() const override {
        return model_.arch_name() +
               " is a recurrent model: its state holds every past token at once, none can move to another "
               "position (no context shift)";
    }
    void seq_add(seq_id, llm_pos, llm_pos, llm_pos) override { throw error(cannot_shift_reason()); }
    void seq_div(seq_id, llm_pos, llm_pos, int) override { throw error(cannot_shift_reason()); }

    // the graphs write the new states into spare columns, made current as each ubatch completes
    void begin(std::span<const seq_id>) override { rs_->begin(); }
    bool find_room(std::span<const std::vector<seq_id>> seqs, room &out, std::string &why) override {
        out.cells.clear();
        out.compacted = false;
        const uint32_t used_now = rs_->used_positions(), n = uint32_t(seqs.size());
        if (used_now + n <= n_ctx_) return true;
        why = "the context is full: the batch adds " + std::to_string(n) + " positions to the " +
              std::to_string(used_now) + " the sequences' states hold, n_ctx is " + std::to_string(n_ctx_);
        return false;
    }
    void apply(const room &, size_t, llm_pos pos, std::span<const seq_id> seqs) override {
        rs_->advance(seqs.front(), pos);
    }
    void rollback() override { rs_->restore(); }

  private:
    const model &model_;
    uint32_t n_ctx_;
    std::unique_ptr<recurrent_memory> rs_;
};

// Both: the KV cache holds the attention layers' rows, the states the recurrent layers'. The recurrent
// part is asked first wherever it may refuse, so a refusal leaves both parts as they were; positions
// count against the context as KV cells.
class hybrid_memory final : public sequence_memory {
  public:
    hybrid_memory(const model &m, const memory_params &p) : model_(m), attn_(m, p), recr_(m, p) {}

    memory_kind kind() const override { return memory_kind::hybrid; }
    kv_cache *attention() const override { return attn_.attention(); }
    recurrent_memory *recurrent() const override { return recr_.recurrent(); }

    bool seq_rm(seq_id s, llm_pos p0, llm_pos p1) override {
        if (!recr_.seq_rm(s, p0, p1)) return false;
        return attn_.seq_rm(s, p0, p1);
    }
    void seq_cp(seq_id src, seq_id dst, llm_pos p0, llm_pos p1) override {
        recr_.seq_cp(src, dst, p0, p1);
        attn_.seq_cp(src, dst, p0, p1);
    }
    void seq_keep(seq_id s) override {
        recr_.seq_keep(s);
        attn_.seq_keep(s);
    }
    llm_pos seq_pos_min(seq_id s) const override {
        return std::max(recr_.seq_pos_min(s), attn_.seq_pos_min(s));
    }
    llm_pos seq_pos_max(seq_id s) const override {
        return std::min(recr_.seq_pos_max(s), attn_.seq_pos_max(s));
    }
    std::vector<llm_pos> seq_pos_max_all() const override {
        std::vector<llm_pos> out = attn_.seq_pos_max_all();
        const std::vector<llm_pos> r = recr_.seq_pos_max_all();
        for (size_t s = 0; s < out.size() && s < r.size(); ++s) out[s] = std::min(out[s], r[s]);
        return out;
    }
    void clear() override {
        recr_.clear();
        attn_.clear();
    }
    uint32_t used() const override { return attn_.used(); }
    size_t total_bytes() const override { return attn_.total_bytes() + recr_.total_bytes(); }

    std::string cannot_shift_reason() const override {
        return model_.arch_name() +
               " is a hybrid model: the states of its recurrent layers hold every past token at once, none "
               "can move to another position (no context shift)";
    }
    void seq_add(seq_id, llm_pos, llm_pos, llm_pos) override { throw error(cannot_shift_reason()); }
    void seq_div(seq_id, llm_pos, llm_pos, int) override { throw error(cannot_shift_reason()); }

    void begin(std::span<const seq_id> seqs) override {
        recr_.begin(seqs);
        attn_.begin(seqs);
    }
    bool find_room(std::span<const std::vector<seq_id>> seqs, room &out, std::string &why) override {
        return attn_.find_room(seqs, out, why);  // a state per sequence is always there
    }
    void apply(const room &r, size_t i, llm_pos pos, std::span<const seq_id> seqs) override {
        attn_.apply(r, i, pos, seqs);
        recr_.apply(r, i, pos, seqs);
    }
    void rollback() override {
        recr_.rollback();
        attn_.rollback();
    }

  private:
    const model &model_;
    attention_memory attn_;
    recurrent_state_memory recr_;
};

}  // namespace

std::unique_ptr<sequence_memory> make_sequence_memory(const model &m, const memory_params &p) {
    const model_hparams &hp = m.hparams();
    if (hp.hybrid()) return std::make_unique<hybrid_memory>(m, p);
    if (hp.recurrent()) return std::make_unique<recurrent_state_memory>(m, p);
    return std::make_unique<attention_memory>(m, p);
}

}  // namespace weft
