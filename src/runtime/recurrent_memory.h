// src/runtime/recurrent_memory.h — the memory of a recurrent (state-space) model: per sequence and layer
// one fixed-size state (the convolution's last inputs, the scan's state), in f32, and the positions
// each sequence's state has absorbed.
//
// Unlike a KV cache a state cannot forget part of its past: removing positions from a sequence is
// only possible for all of them (or for none), copying a sequence copies its whole state, and
// positions cannot move. The semantics are the reference engine's recurrent memory's.
//
// Each sequence owns two columns of every layer's states: its current state and a spare. A ubatch's
// graph reads the current column and writes the new state into the spare one in place (no gather,
// no scatter: ops.h's in-place ssm ops); once the ubatch has computed, commit() makes the spare
// current. So a decode that fails part way leaves the states as they were without a copy of them;
// only a sequence that a second ubatch of the same decode advances (its spare then holds the state
// from before the decode) has that state kept first (prepare).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "weft/core/context.h"
#include "weft/core/device.h"
#include "weft/model/model.h"
#include "weft/runtime/batch.h"

namespace weft {

class backend_buffer;

class recurrent_memory {
  public:
    // Two state columns per sequence [0, n_seq_max) in every layer of m's stage, zeroed, in one buffer
    // of dev (null: the CPU).
    recurrent_memory(const model &m, uint32_t n_seq_max, device *dev = nullptr);
    ~recurrent_memory();
    recurrent_memory(const recurrent_memory &) = delete;
    recurrent_memory &operator=(const recurrent_memory &) = delete;

    uint32_t n_seq_max() const { return uint32_t(pos_min_.size()); }
    const std::vector<recurrent_layer> &layers() const { return layers_; }
    size_t total_bytes() const;

    // The first and last positions a sequence's state has absorbed (-1 when it is empty).
    llm_pos seq_pos_min(seq_id s) const { return pos_min_.at(size_t(s)); }
    llm_pos seq_pos_max(seq_id s) const { return pos_max_.at(size_t(s)); }
    std::vector<llm_pos> seq_pos_max_all() const { return pos_max_; }
    // Positions held over every sequence (the counterpart of a KV cache's used cells).
    uint32_t used_positions() const;
    // Records that s's state has absorbed the token at pos (after every earlier one).
    void advance(seq_id s, llm_pos pos);

    // p0 < 0: from 0; p1 < 0: to the end; s < 0: every sequence. True when the range covers all of
    // the sequence's positions (it is emptied and its state zeroed) or none of them; false, with
    // nothing changed, when it would cut the state's past in two.
    bool seq_rm(seq_id s, llm_pos p0, llm_pos p1);
    // dst takes src's whole state and positions when [p0, p1) covers all of src's positions (an empty
    // src empties dst); throws weft::error when the range covers only part of them.
    void seq_cp(seq_id src, seq_id dst, llm_pos p0, llm_pos p1);
    void seq_keep(seq_id s);
    void clear();

    // The columns of the layers' states a ubatch of seqs reads (each sequence's current one) and
    // writes (its spare), appended to `read`, `written` and, as pairs, `pairs`.
    void ubatch_columns(std::span<const seq_id> seqs, std::vector<int32_t> &read,
                        std::vector<int32_t> &written, std::vector<int32_t> &pairs) const;

    // The bytes of sequence s's current state in layer il (state save and load, rollback).
    size_t conv_row_bytes(size_t il) const { return layers_[il].conv ? layers_[il].conv->nb[1] : 0; }
    size_t ssm_row_bytes(size_t il) const { return layers_[il].ssm ? layers_[il].ssm->nb[1] : 0; }
    uint8_t *conv_row(size_t il, seq_id s) const;
    uint8_t *ssm_row(size_t il, seq_id s) const;
    // Sets s's positions (state load); -1, -1: empty.
    void set_positions(seq_id s, llm_pos pos_min, llm_pos pos_max);

    // A decode: begin() notes the positions and which columns are current; before each ubatch,
    // prepare() keeps the states from before the decode that the ubatch would overwrite (those of
    // sequences an earlier ubatch of it advanced); after each ubatch that computed, commit() makes
    // its sequences' new states current; restore() undoes the decode. No allocation per token once
    // the memory has grown.
    void begin();
    void prepare(std::span<const seq_id> seqs);
    void commit(std::span<const seq_id> seqs);
    void restore();

  private:
    int64_t column(seq_id s) const { return int64_t(s) * 2 + current_[size_t(s)]; }
    uint8_t *state_at(const tensor &t, int64_t col) const;
    void zero_state(seq_id s);
    void copy_state(seq_id src, seq_id dst);
    std::vector<llm_pos> pos_min_, pos_max_;
    std::vector<uint8_t> current_;  // per sequence: which of its two columns is its state
    // the decode under way: as it began, the sequences a ubatch advanced, the states prepare() kept
    struct decode_journal {
        std::vector<llm_pos> pos_min, pos_max;
        std::vector<uint8_t> current, advanced;
        std::vector<seq_id> kept_seqs;
        std::vector<uint8_t> kept;
    } journal_;
    std::unique_ptr<context> ctx_;
    std::unique_ptr<backend_buffer> buffer_;
    std::vector<recurrent_layer> layers_;
};

}  // namespace weft
