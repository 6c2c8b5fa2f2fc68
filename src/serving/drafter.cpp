// src/serving/drafter.cpp — greedy drafting with a draft model, one sequence per slot.
#include "serving/drafter.h"

#include <algorithm>
#include <cmath>

#include "weft/runtime/batch.h"

namespace weft::serving {

namespace {

// The most likely token of a row of logits (the lowest id among equals) and its probability.
token most_likely(const float *logits, int32_t n_vocab, float &prob) {
    token best = 0;
    for (token t = 1; t < n_vocab; ++t)
        if (logits[t] > logits[best]) best = t;
    double sum = 0.0;
    for (token t = 0; t < n_vocab; ++t) sum += std::exp(double(logits[t]) - double(logits[best]));
    prob = float(1.0 / sum);
    return best;
}

}  // namespace

drafter::drafter(const model &draft, const inference_params &target, int32_t n_slots, int32_t n_max) {
    inference_params ip = target;
    ip.n_seq_max = uint32_t(n_slots);
    ip.n_ctx = target.n_ctx + uint32_t(n_slots) * uint32_t(n_max + 1);
    ip.pipeline = nullptr;  // the draft model runs whole in this process, whatever the target's stages
    ip.cb_eval = {};
    ip.abort_callback = {};
    ip.loras.clear();  // the target's adapters name the target's weights
    ctx_ = std::make_unique<inference_context>(draft, ip);
    cached_.resize(size_t(n_slots));
}

// Decodes what each sequence lacks of its history; row_of[k]: the batch row of ask k's last token
// in the final decode, -1 when it needed nothing new (its last token was decoded earlier: its row
// is gone, so one token is decoded again).
bool drafter::sync(std::vector<ask> &asks, std::vector<int32_t> &row_of) {
    const size_t n_batch = std::max<uint32_t>(1, ctx_->n_batch());
    std::vector<size_t> done(asks.size());
    for (size_t k = 0; k < asks.size(); ++k) {
        std::vector<token> &have = cached_[size_t(asks[k].seq)];
        const std::vector<token> &want = *asks[k].history;
        size_t same =
            size_t(std::mismatch(have.begin(), have.end(), want.begin(), want.end()).first - have.begin());
        same = std::min(same, want.size() - 1);  // the last token is decoded again for its logits
        if (same < have.size()) {
            if (!ctx_->kv_seq_rm(asks[k].seq, llm_pos(same), -1)) {
                ctx_->kv_seq_rm(asks[k].seq, -1, -1);
                same = 0;
            }
            have.resize(same);
        }
        done[k] = same;
    }
    row_of.assign(asks.size(), -1);
    for (;;) {
        batch b;
        std::vector<size_t> added(asks.size(), 0);
        for (size_t k = 0; k < asks.size() && size_t(b.n_tokens()) < n_batch; ++k) {
            const std::vector<token> &want = *asks[k].history;
            const size_t n = std::min(want.size() - done[k], n_batch - size_t(b.n_tokens()));
            for (size_t i = 0; i < n; ++i) {
                const bool last = done[k] + i + 1 == want.size();
                if (last) row_of[k] = b.n_tokens();
                b.add(want[done[k] + i], llm_pos(done[k] + i), {seq_id(asks[k].seq)}, last);
            }
            added[k] = n;
        }
        if (b.n_tokens() == 0) return true;
        if (ctx_->decode(b) != decode_ok) {
            for (const ask &a : asks) {
                ctx_->kv_seq_rm(a.seq, -1, -1);
                cached_[size_t(a.seq)].clear();
            }
            return false;
        }
        for (size_t k = 0; k < asks.size(); ++k) {
            const std::vector<token> &want = *asks[k].history;
            std::vector<token> &have = cached_[size_t(asks[k].seq)];
            have.insert(have.end(), want.begin() + std::ptrdiff_t(done[k]),
                        want.begin() + std::ptrdiff_t(done[k] + added[k]));
            done[k] += added[k];
        }
        // rows of an earlier chunk are gone once a later chunk decodes: only the last chunk's count
        bool more = false;
        for (size_t k = 0; k < asks.size(); ++k) more = more || done[k] < asks[k].history->size();
        if (!more) return true;
        std::fill(row_of.begin(), row_of.end(), -1);
    }
}

void drafter::propose(std::vector<ask> &asks) {
    for (ask &a : asks) a.out.clear();
    std::erase_if(asks, [](const ask &a) { return a.n_max <= 0 || a.history->empty(); });
    if (asks.empty()) return;
    std::vector<int32_t> row_of;
    if (!sync(asks, row_of)) return;
    const int32_t n_vocab = ctx_->n_vocab();
    std::vector<bool> active(asks.size(), true);
    for (;;) {
        batch b;
        std::vector<int32_t> next_row(asks.size(), -1);
        for (size_t k = 0; k < asks.size(); ++k) {
            if (!active[k]) continue;
            ask &a = asks[k];
            if (row_of[k] < 0) {  // not in the last decode: nothing to read
                active[k] = false;
                continue;
            }
            float prob = 0.0f;
            const token t = most_likely(ctx_->get_logits_ith(row_of[k]), n_vocab, prob);
            if (prob < a.p_min) {
                active[k] = false;
                continue;
            }
            a.out.push_back(t);
            if (int32_t(a.out.size()) >= a.n_max) {
                active[k] = false;
                continue;
            }
            // decode it for the next position's logits
            std::vector<token> &have = cached_[size_t(a.seq)];
            next_row[k] = b.n_tokens();
            b.add(t, llm_pos(have.size()), {seq_id(a.seq)}, true);
        }
        if (b.n_tokens() == 0) return;
        if (ctx_->decode(b) != decode_ok) {
            for (const ask &a : asks) {
                ctx_->kv_seq_rm(a.seq, -1, -1);
                cached_[size_t(a.seq)].clear();
            }
            return;
        }
        for (size_t k = 0; k < asks.size(); ++k)
            if (next_row[k] >= 0) cached_[size_t(asks[k].seq)].push_back(asks[k].out.back());
        row_of = next_row;
    }
}

}  // namespace weft::serving
