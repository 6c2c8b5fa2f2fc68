// weft/runtime/kv_cache.h — the KV cache: per-layer K and V tensors, cells with position and sequences.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "weft/core/context.h"
#include "weft/core/device.h"
#include "weft/core/type.h"
#include "weft/model/model.h"
#include "weft/runtime/batch.h"

namespace weft {

class backend_buffer;

// Sequences a cell can belong to (a bit set of this width).
constexpr int32_t max_sequences = 64;

struct kv_cell {
    llm_pos pos = -1;       // -1: empty
    uint64_t seq_mask = 0;  // bit s: the cell belongs to sequence s
    // How far pos moved (seq_add, seq_div) since the cached key was last rotated to match it; the
    // context re-rotates the keys of such cells before its next decode.
    llm_pos delta = 0;

    bool empty() const { return seq_mask == 0; }
    bool has_seq(seq_id s) const { return (seq_mask >> s) & 1u; }
};

// A KV cache type by the name users know (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1; any case);
// another name throws weft::error listing them (attention_kv_type_names in core/ops.h).
dtype kv_cache_type_from_name(std::string_view name);

class kv_cache {
  public:
    // kv_size cells for every layer of m, K of type_k and V of type_v: one of attention_kv_types
    // (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1), a block type only where the model's K (V)
    // head size is a multiple of its block size (else weft::error). Memory comes from one buffer
    // of the device (null: the first device, the CPU), zeroed; the layers the model offloads
    // (model::layer_offloaded) keep theirs in a buffer of its offload device unless `offload` is
    // false (a device that cannot write or attend over these types: the host keeps every row).
    kv_cache(const model &m, uint32_t kv_size, dtype type_k, dtype type_v, uint32_t n_seq_max,
             device *dev = nullptr, bool offload = true);
    // One type for K and V.
    kv_cache(const model &m, uint32_t kv_size, dtype type, uint32_t n_seq_max)
        : kv_cache(m, kv_size, type, type, n_seq_max) {}
    ~kv_cache();
    kv_cache(const kv_cache &) = delete;
    kv_cache &operator=(const kv_cache &) = delete;

    uint32_t size() const { return uint32_t(cells_.size()); }
    dtype type_k() const { return type_k_; }
    dtype type_v() const { return type_v_; }
    uint32_t n_seq_max() const { return n_seq_max_; }
    size_t total_bytes() const;
    const std::vector<kv_layer> &layers() const { return layers_; }
    const std::vector<kv_cell> &cells() const { return cells_; }
    uint32_t used_cells() const;

    // --- slots. find_slots picks free cells for n tokens without changing anything (empty result:
    // they do not fit); assign marks the chosen cells with their tokens' positions and sequences.
    std::vector<uint32_t> find_slots(uint32_t n_tokens) const;
    // The same for tokens of known sequences (seqs[i]: token i's), keeping each sequence's cells in
    // position order: a token takes the first free cell after every cell of its sequences, so
    // attention, which visits cells in index order, sums a sequence's cells in the same order
    // whatever else the cache holds (holes that other sequences left are not filled out of order).
    // Only when no cell is free after them does a token take a free cell before them, and only when
    // out_of_order is true (false: the batch does not fit; defrag() makes it fit in order).
    std::vector<uint32_t> find_slots(std::span<const std::vector<seq_id>> seqs,
                                     bool out_of_order = true) const;
    void assign(uint32_t cell, llm_pos pos, std::span<const seq_id> seqs);
    // Cells [0, n) that a graph must attend over to see every used cell: one past the highest used
    // cell, rounded up to `pad` (capped at size()), so consecutive decode steps share a shape.
    uint32_t n_kv_for_graph(uint32_t pad = 256) const;

    // --- sequences (p0 < 0: from 0; p1 < 0: to the end; s < 0 in seq_rm: every sequence)
    bool seq_rm(seq_id s, llm_pos p0, llm_pos p1);
    void seq_cp(seq_id src, seq_id dst, llm_pos p0, llm_pos p1);
    void seq_keep(seq_id s);
    llm_pos seq_pos_max(seq_id s) const;  // -1 when the sequence is empty
    llm_pos seq_pos_min(seq_id s) const;  // -1 when the sequence is empty
    // seq_pos_max of every sequence [0, n_seq_max) in one pass over the cells
    std::vector<llm_pos> seq_pos_max_all() const;
    void clear();

    // --- moving positions. seq_add adds delta to the positions of s's cells in [p0, p1) (s < 0:
    // every sequence's), dropping a cell whose position falls below 0; seq_div divides them by d
    // (>= 1, rounding down). A cell that other sequences share moves for them too: a cell has one
    // position. Each moved cell records its move in kv_cell::delta until clear_shift().
    void seq_add(seq_id s, llm_pos p0, llm_pos p1, llm_pos delta);
    void seq_div(seq_id s, llm_pos p0, llm_pos p1, int d);
    // The used cells whose position moved since the last clear_shift, in cell order.
    std::vector<uint32_t> shifted_cells() const;
    void clear_shift();

    // Moves the used cells to the front, in their order, with their K and V rows, so the free cells
    // form one run at the end. Returns how many cells moved.
    uint32_t defrag();

    // Saved and restored around a state load that fails part way (the cells, not the data).
    std::vector<kv_cell> snapshot() const { return cells_; }
    void restore(std::vector<kv_cell> cells) {
        cells_ = std::move(cells);
        summary_valid_ = false;
    }
    // Empties cells that assign filled (a decode call that fails part way takes back its tokens).
    void unassign(std::span<const uint32_t> cells);

    // Cell c's K (V) row of layer il, in the cache's type (state save and load): copied out of /
    // into the cache's memory, wherever the layer keeps it (host or an offload device).
    void read_k_row(size_t il, uint32_t c, void *dst) const { read_row(*layers_.at(il).k, c, dst); }
    void read_v_row(size_t il, uint32_t c, void *dst) const { read_row(*layers_.at(il).v, c, dst); }
    void write_k_row(size_t il, uint32_t c, const void *src) { write_row(*layers_.at(il).k, c, src); }
    void write_v_row(size_t il, uint32_t c, const void *src) { write_row(*layers_.at(il).v, c, src); }

    // Fills mask f32 [n_kv, n_tokens] (row t for token t): 0 where cell c is visible to the token
    // (shares one of its sequences and holds a position <= its position), -INF elsewhere. A window
    // w > 0 also hides the cells w or more positions before the token (sliding-window attention), or
    // with kind chunked the cells before the token's chunk of w positions (llama4's chunked
    // attention: position p sees [p / w * w, p]); causal false shows the later positions too (an
    // encoder's attention). What a cell shows depends on its position alone, not on its index, so a
    // cell reused for a later chunk's position is seen as that position.
    void fill_mask(float *mask, uint32_t n_kv, std::span<const llm_pos> pos,
                   std::span<const std::vector<seq_id>> seqs, int64_t window = 0, bool causal = true,
                   model_hparams::swa_kind kind = model_hparams::swa_kind::window) const;

  private:
    static void read_row(const tensor &t, uint32_t c, void *dst);
    static void write_row(tensor &t, uint32_t c, const void *src);

    // What the cells hold, summed up: a decode step asks for it several times (positions, free
    // cells, the graph's width, pending shifts), and a scan of every cell each time was a good part of
    // a small model's step with a large context (32k cells: ~80 us). Kept up to date by assign;
    // every other change marks it stale, and the next question scans once.
    struct summary {
        uint32_t used = 0;               // cells that are not empty
        uint32_t used_end = 0;           // one past the highest of them
        bool shifted = false;            // one of them has a delta
        std::vector<llm_pos> pos_max;    // per sequence: its highest position, -1 when empty
        std::vector<int64_t> last_cell;  // per sequence: its highest cell, -1 when empty
    };
    const summary &summed() const;
    void changed() { summary_valid_ = false; }
    mutable summary summary_;
    mutable bool summary_valid_ = false;

    dtype type_k_, type_v_;
    uint32_t n_seq_max_;
    std::vector<kv_cell> cells_;
    std::unique_ptr<context> ctx_;
    std::unique_ptr<backend_buffer> buffer_;          // the layers computed on the context's device
    std::unique_ptr<backend_buffer> offload_buffer_;  // the model's offloaded layers (model::offload_device)
    std::vector<kv_layer> layers_;
};

}  // namespace weft
