// weft/runtime/memory.h — what an inference context remembers of each sequence, behind one interface.
//
// Three kinds (the reference engine's llama_memory_i and its implementations):
//   attention  the KV cache: a row of K and V per layer and cell, cells tagged with position and
//              sequences; any range of a sequence can be removed, copied or moved;
//   recurrent  one fixed-size state per sequence and layer (a state-space mixer, a gated delta net,
//              a short convolution): it holds all of a sequence's past at once, so only all of a
//              sequence (or none of it) can be removed or copied, and positions cannot move;
//   hybrid     both, each layer the kind it needs (model_hparams::recurrent_layers): an operation
//              succeeds only where both parts allow it, and the recurrent part is asked first, so a
//              refusal changes nothing.
//
// The context drives a decode call through it: begin (remember what a failure restores), find_room
// (cells for every token of the batch, nothing changed when they do not fit), apply (each token as
// its ubatch is computed), and rollback when the call fails or is aborted. The graph reads the
// parts themselves (attention(), recurrent()): the KV rows and the state rows of its layers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "weft/core/type.h"
#include "weft/runtime/batch.h"

namespace weft {

class model;
class device;
class kv_cache;
class recurrent_memory;

enum class memory_kind { attention, recurrent, hybrid };
const char *memory_kind_name(memory_kind k);  // "attention", "recurrent", "hybrid"

class sequence_memory {
  public:
    virtual ~sequence_memory();
    sequence_memory(const sequence_memory &) = delete;
    sequence_memory &operator=(const sequence_memory &) = delete;

    virtual memory_kind kind() const = 0;
    // The parts (null where this kind has none).
    virtual kv_cache *attention() const { return nullptr; }
    virtual recurrent_memory *recurrent() const { return nullptr; }

    // --- sequences (p0 < 0: from 0; p1 < 0: to the end; s < 0 in seq_rm: every sequence)
    // False, with nothing changed, where the memory cannot drop that range (part of a recurrent state).
    virtual bool seq_rm(seq_id s, llm_pos p0, llm_pos p1) = 0;
    // Throws weft::error where the memory cannot copy that range (part of a recurrent state).
    virtual void seq_cp(seq_id src, seq_id dst, llm_pos p0, llm_pos p1) = 0;
    virtual void seq_keep(seq_id s) = 0;
    // The positions every part holds of s: the highest position all of them hold and the lowest
    // one all of them hold (-1 when empty).
    virtual llm_pos seq_pos_min(seq_id s) const = 0;
    virtual llm_pos seq_pos_max(seq_id s) const = 0;
    virtual std::vector<llm_pos> seq_pos_max_all() const = 0;
    virtual void clear() = 0;
    // Positions held against the context size: the KV cells in use; a recurrent model's positions.
    virtual uint32_t used() const = 0;
    virtual size_t total_bytes() const = 0;

    // --- moving positions: an empty reason means they can move (a rotary KV cache alone).
    virtual std::string cannot_shift_reason() const = 0;
    virtual void seq_add(seq_id s, llm_pos p0, llm_pos p1, llm_pos delta) = 0;
    virtual void seq_div(seq_id s, llm_pos p0, llm_pos p1, int d) = 0;

    // --- a decode call
    // The call touches these sequences: what rollback restores of them is remembered now.
    virtual void begin(std::span<const seq_id> seqs) = 0;
    // Room for every token of a batch (seqs[i]: token i's sequences), nothing changed when there is
    // none (false, `why` says what is missing). `cells` gets the KV cell of each token (empty
    // without an attention part); `compacted` is set when the KV cache was compacted to make room.
    struct room {
        std::vector<uint32_t> cells;
        bool compacted = false;
    };
    virtual bool find_room(std::span<const std::vector<seq_id>> seqs, room &out, std::string &why) = 0;
    // Records token i of the batch find_room placed (its cell, position and sequences), before the
    // graph of its ubatch is computed.
    virtual void apply(const room &r, size_t i, llm_pos pos, std::span<const seq_id> seqs) = 0;
    // Undoes what apply recorded since begin and restores the states begin remembered.
    virtual void rollback() = 0;

  protected:
    sequence_memory() = default;
};

struct memory_params {
    uint32_t n_ctx = 0;         // KV cells; a recurrent model: the positions its states may hold together
    uint32_t n_seq_max = 1;     // sequence ids [0, n_seq_max)
    dtype type_k = dtype::f16;  // the KV cache's types
    dtype type_v = dtype::f16;
    device *dev = nullptr;   // the device holding the memory (null: the CPU)
    bool offload_kv = true;  // offloaded layers keep their KV rows on the model's offload device
};

// The memory m's layers need: attention for a model without recurrent layers, recurrent for one whose
// every layer is recurrent, hybrid for one with both.
std::unique_ptr<sequence_memory> make_sequence_memory(const model &m, const memory_params &p);

}  // namespace weft
