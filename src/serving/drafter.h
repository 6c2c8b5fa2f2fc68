// src/serving/drafter.h — the draft model's side of speculative decoding: its own context with one
// sequence per slot, kept in step with each slot's tokens, and greedy drafting for all slots at once
// (one decode per drafted position, every slot's next token in the same batch).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "weft/runtime/context.h"
#include "weft/serving/speculative.h"

namespace weft::serving {

class drafter {
  public:
    // A context on the draft model like the target's (batch, threads), one sequence per slot, with
    // room for each slot's n_max drafted tokens beyond the target's cells.
    drafter(const model &draft, const inference_params &target, int32_t n_slots, int32_t n_max);

    struct ask {
        int32_t seq = 0;                              // the slot
        const std::vector<token> *history = nullptr;  // the slot's tokens, the pending one last
        int32_t n_max = 0;                            // draft at most this many
        float p_min = 0.0f;                           // stop at a token less likely than this
        std::vector<token> out;                       // the draft
    };
    // Brings each asked sequence up to its history (decoding what the draft has not seen, dropping
    // what it saw that is no longer there), then drafts greedily: a token less likely than its p_min
    // ends that slot's draft. A failed decode leaves the drafts as they are (possibly empty).
    void propose(std::vector<ask> &asks);

  private:
    bool sync(std::vector<ask> &asks, std::vector<int32_t> &row_of);

    std::unique_ptr<inference_context> ctx_;
    std::vector<std::vector<token>> cached_;  // per sequence: the tokens its cells hold
};

}  // namespace weft::serving
