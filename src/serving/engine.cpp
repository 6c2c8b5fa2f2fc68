// src/serving/engine.cpp — the engine layer: queue, slots, continuous batching, events.
#include "weft/serving/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <utility>

#include "serving/drafter.h"
#include "weft/grammar/grammar.h"
#include "weft/model/lora.h"
#include "weft/runtime/batch.h"
#include "weft/runtime/kv_cache.h"
#include "weft/runtime/memory.h"
#include "weft/serving/text.h"

namespace weft::serving {

namespace {

using clock_type = std::chrono::steady_clock;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// log-softmax of one row of logits: the log-probability of `chosen` and, when n_top > 0, the n_top
// most likely tokens (ties: lower id first).
generated_token token_probabilities(const float *logits, int32_t n_vocab, token chosen, int32_t n_top) {
    float max_logit = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - double(max_logit));
    const double log_sum = double(max_logit) + std::log(sum);
    auto logprob = [&](token t) { return float(double(logits[t]) - log_sum); };
    generated_token g;
    g.id = chosen;
    g.logprob = logprob(chosen);
    if (n_top > 0) {
        std::vector<token> ids(static_cast<size_t>(n_vocab));
        for (int32_t i = 0; i < n_vocab; ++i) ids[size_t(i)] = i;
        const size_t k = std::min<size_t>(size_t(n_top), ids.size());
        std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(k), ids.end(), [&](token a, token b) {
            return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
        });
        for (size_t i = 0; i < k; ++i) g.top.push_back({ids[i], logprob(ids[i])});
    }
    return g;
}

// Throws weft::error unless `scales` has one value per adapter (or none, when allowed), each within
// check_lora_scale's bounds.
void check_lora_scales(const std::vector<float> &scales, size_t n_adapters, bool empty_ok) {
    if (scales.empty() && empty_ok) return;
    if (scales.size() != n_adapters)
        throw error(std::to_string(scales.size()) + " LoRA scales for " + std::to_string(n_adapters) +
                    " adapters");
    for (size_t i = 0; i < scales.size(); ++i)
        check_lora_scale(scales[i], "LoRA adapter " + std::to_string(i));
}

// Throws weft::error unless the request's embedding chunks lie in order inside the prompt, each over
// token_null placeholders with n_tokens rows of n_embd floats, and every other token is in the vocabulary.
void check_prompt_media(const request &r, int64_t n_embd, int32_t n_vocab) {
    std::vector<bool> placeholder(r.prompt.size(), false);
    size_t end = 0;
    for (size_t i = 0; i < r.media.size(); ++i) {
        const embd_chunk &c = r.media[i];
        const std::string what = "embedding chunk " + std::to_string(i);
        if (c.n_tokens <= 0 || c.at < end || c.at + size_t(c.n_tokens) > r.prompt.size())
            throw error(what + " (prompt positions " + std::to_string(c.at) + " + " +
                        std::to_string(c.n_tokens) + ") is empty, out of order or past the prompt's " +
                        std::to_string(r.prompt.size()) + " tokens");
        if (c.embd.size() != size_t(c.n_tokens) * size_t(n_embd))
            throw error(what + " holds " + std::to_string(c.embd.size()) + " floats, expected " +
                        std::to_string(c.n_tokens) + " x n_embd " + std::to_string(n_embd));
        for (size_t k = c.at; k < c.at + size_t(c.n_tokens); ++k) placeholder[k] = true;
        end = c.at + size_t(c.n_tokens);
    }
    for (size_t k = 0; k < r.prompt.size(); ++k) {
        const token t = r.prompt[k];
        if (placeholder[k] ? t != token_null : (t < 0 || t >= n_vocab))
            throw error("prompt token " + std::to_string(t) + " at " + std::to_string(k) +
                        (placeholder[k] ? " stands for an embedding row and must be token_null"
                                        : " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")"));
    }
}

// The prompt without the placeholders of its embedding rows (what penalties and DRY see).
std::vector<token> prompt_tokens_only(const request &r) {
    if (r.media.empty()) return r.prompt;
    std::vector<token> out;
    for (token t : r.prompt)
        if (t != token_null) out.push_back(t);
    return out;
}

}  // namespace

const char *finish_reason_name(finish_reason r) {
    switch (r) {
        case finish_reason::stop:
            return "stop";
        case finish_reason::length:
            return "length";
        case finish_reason::cancelled:
            return "cancelled";
        case finish_reason::error:
            return "error";
        case finish_reason::none:
            break;
    }
    return "none";
}

// --- job

bool job::wait_event(event &out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    ++event_waiters_;
    cv_.wait_for(lock, timeout, [&] { return !events_.empty() || finished_; });
    --event_waiters_;
    if (events_.empty()) return false;
    out = std::move(events_.front());
    events_.pop_front();
    return true;
}

bool job::wait_ready(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    ++event_waiters_;
    const bool ready = cv_.wait_for(lock, timeout, [&] { return !events_.empty() || finished_; });
    --event_waiters_;
    return ready;
}

bool job::wait_finished(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return finished_; });
}

void job::ignore_events() {
    std::lock_guard<std::mutex> lock(mutex_);
    ignore_events_ = true;
    events_.clear();
}

bool job::poll_event(event &out) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (events_.empty()) return false;
    out = std::move(events_.front());
    events_.pop_front();
    return true;
}

void job::cancel() {
    std::lock_guard<std::mutex> lock(mutex_);
    cancel_ = true;
}

bool job::cancelled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancel_;
}

bool job::finished() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return finished_;
}

completion job::result() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return result_;
}

void job::push(event e) {
    bool wake = false;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (ignore_events_) return;
        events_.push_back(std::move(e));
        wake = event_waiters_ > 0;
    }
    if (wake) cv_.notify_all();
}

void job::finish(completion c, event last) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        result_ = std::move(c);
        finished_ = true;
        last.final = true;
        if (!ignore_events_) events_.push_back(std::move(last));
    }
    cv_.notify_all();
}

// --- slots

struct engine::slot {
    int32_t id = 0;
    std::vector<token> cached;  // tokens whose cells sequence `id` holds, positions [0, size)
    uint64_t last_used = 0;     // for choosing among idle slots

    // the running request (job null: idle)
    std::shared_ptr<job> running;
    request req;
    std::unique_ptr<sampler_chain> chain;
    completion out;
    token pending = token_null;           // sampled, decoded at the next step
    std::string raw;                      // generated bytes as the tokens spell them
    size_t emitted = 0;                   // bytes of raw already delivered
    size_t max_stop = 0;                  // longest stop string
    std::vector<generated_token> unsent;  // tokens sampled since the last event
    std::vector<token> draft;             // speculative decoding: proposed after `pending`, this step
    std::vector<float> lora;              // the running request's LoRA scales
    std::vector<float> cached_lora;       // the LoRA scales `cached` was decoded with
    clock_type::time_point submitted, assigned, first_token;

    bool busy() const { return running != nullptr; }
    bool processing_prompt() const { return busy() && pending == token_null; }
    size_t n_past() const { return cached.size(); }
};

engine::engine(const weft::model &m, const engine_params &params) : model_(m), params_(params) {
    if (params_.n_slots < 1 || params_.n_slots > max_sequences)
        throw error("engine: n_slots is " + std::to_string(params_.n_slots) + ", must be in [1, " +
                    std::to_string(max_sequences) + "]");
    params_.context.n_seq_max = uint32_t(params_.n_slots);
    const speculative_params &sp = params_.speculative;
    check_speculative_params(sp);
    if (sp.draft) check_draft_vocab(m.vocab(), sp.draft->vocab(), sp.draft->path());
    ctx_ = std::make_unique<inference_context>(m, params_.context);
    // a rejected draft token must leave the target's cache, which a recurrent state cannot do
    if (sp.enabled() && ctx_->is_recurrent())
        throw error("engine: speculative decoding (a draft model or prompt lookup) is not supported with " +
                    m.arch_name() + ", a " + memory_kind_name(ctx_->memory().kind()) +
                    " model: its recurrent states cannot drop rejected draft tokens");
    if (sp.draft && sp.n_max > 0) {
        inference_params dp = params_.context;
        dp.n_ctx = ctx_->n_ctx();  // the cells the target has (n_ctx 0 asked for its training context)
        drafter_ = std::make_unique<drafter>(*sp.draft, dp, params_.n_slots, sp.n_max);
    }
    if (ctx_->n_ctx() < uint32_t(params_.n_slots) * 2)
        throw error("engine: a context of " + std::to_string(ctx_->n_ctx()) + " cells is too small for " +
                    std::to_string(params_.n_slots) + " slots");
    for (int32_t i = 0; i < params_.n_slots; ++i) {
        slots_.push_back(std::make_unique<slot>());
        slots_.back()->id = i;
    }
    lora_defaults_ = ctx_->lora_scales();
    epoch_ = clock_type::now();
    stats_.n_slots = params_.n_slots;
    stats_.kv_cells = ctx_->n_ctx();
    for (const auto &s : slots_) stats_.slots.push_back({s->id, false, 0, 0, 0, 0});
}

engine::~engine() {
    stop();
}

std::vector<float> engine::lora_scales() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lora_defaults_;
}

void engine::set_lora_scales(std::vector<float> scales) {
    check_lora_scales(scales, ctx_->lora_scales().size(), false);
    std::lock_guard<std::mutex> lock(mutex_);
    lora_defaults_ = std::move(scales);
}

uint32_t engine::n_ctx() const {
    return ctx_->n_ctx();
}

uint32_t engine::n_ctx_slot() const {
    return ctx_->n_ctx() / uint32_t(slots_.size());
}

std::shared_ptr<job> engine::submit(request r) {
    if (r.prompt.empty()) throw error("the prompt has no tokens");
    if (r.prompt.size() >= n_ctx_slot())
        throw error("the prompt has " + std::to_string(r.prompt.size()) + " tokens, the context holds " +
                    std::to_string(n_ctx_slot()) +
                    (n_slots() > 1 ? " per slot (" + std::to_string(n_slots()) + " slots share " +
                                         std::to_string(n_ctx()) + ")"
                                   : std::string()));
    const int32_t n_vocab = ctx_->n_vocab();
    check_prompt_media(r, model_.hparams().n_embd, n_vocab);
    if (r.slot < -1 || r.slot >= n_slots())
        throw error("slot " + std::to_string(r.slot) + " does not exist (" + std::to_string(n_slots()) +
                    " slots)");
    if (r.n_probs < 0 || r.n_probs > n_vocab)
        throw error("n_probs is " + std::to_string(r.n_probs) + ", must be in [0, " +
                    std::to_string(n_vocab) + "]");
    check_lora_scales(r.lora_scales, ctx_->lora_scales().size(), true);
    if (r.draft_max > 256 || r.draft_min > 256 || !(r.draft_p_min <= 1.0f))
        throw error("draft_max and draft_min must be at most 256, draft_p_min at most 1");
    check_sampling_params(r.sampling);  // throws on bad sampling parameters, before anything is queued
    if (!r.sampling.grammar.empty()) grammar::parse(r.sampling.grammar);  // and on a bad grammar
    std::erase(r.stop, std::string());

    std::shared_ptr<job> j;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) throw error("the engine is stopping");
        if (params_.max_queue > 0 && pending_requests_.size() >= params_.max_queue)
            throw queue_full("the request queue is full (" + std::to_string(pending_requests_.size()) +
                             " waiting)");
        j = std::make_shared<job>(next_job_id_++);
        pending_requests_.push_back({j, std::move(r), clock_type::now()});
        ++stats_.requests_submitted;
        stats_.queued = pending_requests_.size();
    }
    wake_.notify_all();
    return j;
}

// Which slot a request goes to and how much of its prompt that slot already holds: the idle slot
// sharing the longest prefix with the prompt when that prefix is at least half the prompt (a
// conversation's next turn, a repeated prompt); otherwise the least recently used idle slot, so a
// prompt that shares only its first tokens does not wipe another conversation's cache.
bool engine::pick_slot(const request &r, int32_t &chosen, size_t &keep) const {
    const std::vector<float> &lora = r.lora_scales.empty() ? lora_defaults_ : r.lora_scales;
    auto shared = [&](const slot &s) -> size_t {
        if (s.cached_lora != lora) return 0;  // cells decoded with other adapter scales are no use
        const auto diverge =
            std::mismatch(s.cached.begin(), s.cached.end(), r.prompt.begin(), r.prompt.end());
        // at least the last prompt token is decoded again: generation starts from its logits; nothing
        // from the first embedding chunk on is reused (placeholders of different images look alike)
        const size_t first_media = r.media.empty() ? r.prompt.size() : r.media.front().at;
        return std::min({size_t(diverge.first - s.cached.begin()), r.prompt.size() - 1, first_media});
    };
    const slot *best = nullptr, *oldest = nullptr;
    size_t best_shared = 0;
    for (const auto &sp : slots_) {
        const slot &s = *sp;
        if (s.busy() || (r.slot >= 0 && r.slot != s.id)) continue;
        const size_t n = shared(s);
        if (!best || n > best_shared) {
            best = &s;
            best_shared = n;
        }
        if (!oldest || s.last_used < oldest->last_used) oldest = &s;
    }
    if (!best) return false;
    const slot &pick = best_shared > 0 && 2 * best_shared >= r.prompt.size() ? *best : *oldest;
    chosen = pick.id;
    keep = shared(pick);
    return true;
}

void engine::assign_queued() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = pending_requests_.begin(); it != pending_requests_.end();) {
        int32_t chosen;
        size_t keep;
        if (it->j->cancelled()) {  // never started: ends here
            completion c;
            c.finish = finish_reason::cancelled;
            c.n_prompt = int32_t(it->r.prompt.size());
            c.queued_ms = ms_between(it->submitted, clock_type::now());
            it->j->finish(std::move(c), {});
            ++stats_.requests_finished;
        } else if (pick_slot(it->r, chosen, keep)) {
            slot &s = *slots_[size_t(chosen)];
            s.req = std::move(it->r);
            s.submitted = it->submitted;
            start_job(s, it->j, keep);
        } else {
            ++it;
            continue;
        }
        it = pending_requests_.erase(it);
    }
    stats_.queued = pending_requests_.size();
}

// Called with mutex_ held.
void engine::start_job(slot &s, std::shared_ptr<job> j, size_t keep) {
    if (keep < s.cached.size()) {
        if (!ctx_->kv_seq_rm(s.id, llm_pos(keep), -1)) {
            ctx_->kv_seq_rm(s.id, -1, -1);
            keep = 0;
        }
        s.cached.resize(keep);
    }
    s.running = std::move(j);
    // the vocabulary's trie for grammars, built once (on the first request with one) for every slot
    if (!s.req.sampling.grammar.empty() && !grammar_index_)
        grammar_index_ = make_grammar_vocab_index(model_.vocab());
    s.chain = make_sampler_chain(s.req.sampling, model_.vocab(), prompt_tokens_only(s.req),  // penalties and
                                 grammar_index_);  // DRY see the prompt
    s.out = {};
    s.out.slot = s.id;
    s.out.n_prompt = int32_t(s.req.prompt.size());
    s.out.n_cached = int32_t(keep);
    s.pending = token_null;
    s.raw.clear();
    s.emitted = 0;
    s.max_stop = 0;
    for (const auto &w : s.req.stop) s.max_stop = std::max(s.max_stop, w.size());
    s.unsent.clear();
    s.draft.clear();
    s.lora = s.req.lora_scales.empty() ? lora_defaults_ : s.req.lora_scales;
    s.cached_lora = s.lora;
    s.assigned = clock_type::now();
    s.out.queued_ms = ms_between(s.submitted, s.assigned);
    s.last_used = ++use_counter_;
    auto &info = stats_.slots[size_t(s.id)];
    info.busy = true;
    info.job_id = s.running->id();
    info.n_prompt = s.out.n_prompt;
    info.n_generated = 0;
    info.n_cached = int32_t(s.cached.size());
    ++stats_.busy_slots;
}

void engine::publish_slot(const slot &s) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto &info = stats_.slots[size_t(s.id)];
    info.n_cached = int32_t(s.cached.size());
    info.n_generated = int32_t(s.out.tokens.size());
}

void engine::finish(slot &s, finish_reason why, const std::string &error_text) {
    s.out.finish = why;
    s.out.error = error_text;
    const auto now = clock_type::now();
    if (!s.out.tokens.empty()) s.out.generate_ms = ms_between(s.first_token, now);
    event last;
    last.final = true;
    last.tokens = std::move(s.unsent);
    // what was held back (a possible stop string, an unfinished character) goes out now, so the
    // events always add up to the completion's text
    if (why != finish_reason::error && s.emitted < s.raw.size())
        last.text = utf8_sanitize(std::string_view(s.raw).substr(s.emitted));
    s.out.text = utf8_sanitize(s.raw);
    s.running->finish(std::move(s.out), std::move(last));
    s.running.reset();
    s.chain.reset();
    s.pending = token_null;
    s.unsent.clear();
    s.draft.clear();
    s.out = {};
    std::lock_guard<std::mutex> lock(mutex_);
    auto &info = stats_.slots[size_t(s.id)];
    info.busy = false;
    info.job_id = 0;
    info.n_cached = int32_t(s.cached.size());
    --stats_.busy_slots;
    ++stats_.requests_finished;
}

// Samples the slot's next token from row `batch_index` of the last decode and decides what follows.
void engine::after_decode(slot &s, int32_t batch_index) {
    if (s.req.max_tokens == 0) {  // the prompt is in the cache; nothing to generate
        s.out.prompt_ms = ms_between(s.assigned, clock_type::now());
        finish(s, finish_reason::length);
        return;
    }
    const vocab &v = model_.vocab();
    const int32_t n_vocab = ctx_->n_vocab();
    const float *logits = ctx_->get_logits_ith(batch_index);
    const token t = s.chain->sample(logits, n_vocab);
    const auto now = clock_type::now();
    if (s.out.tokens.empty()) {
        s.first_token = now;
        s.out.prompt_ms = ms_between(s.assigned, now);
        s.out.first_token_ms = ms_between(s.submitted, now);
    }
    if (!s.req.ignore_eos && v.is_eog(t)) {
        finish(s, finish_reason::stop);
        return;
    }
    generated_token g = (s.req.logprobs || s.req.n_probs > 0)
                            ? token_probabilities(logits, n_vocab, t, s.req.n_probs)
                            : generated_token{t, 0.0f, {}};
    s.out.tokens.push_back(g);
    s.unsent.push_back(std::move(g));
    {
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.generated_tokens;
    }

    const size_t before = s.raw.size();
    s.raw += v.token_to_piece(t, false);
    const size_t from = before >= s.max_stop ? before - s.max_stop + 1 : 0;
    if (const size_t at = find_stop(s.raw, s.req.stop, from); at != std::string::npos) {
        for (const auto &w : s.req.stop)
            if (!w.empty() && s.raw.compare(at, w.size(), w) == 0) {
                s.out.stop_word = w;
                break;
            }
        s.raw.resize(at);
        finish(s, finish_reason::stop);
        return;
    }
    const size_t ready = utf8_complete_prefix(
        std::string_view(s.raw).substr(0, s.raw.size() - stop_prefix_overlap(s.raw, s.req.stop)));
    if (ready > s.emitted) {
        event e;
        e.text = utf8_sanitize(std::string_view(s.raw).substr(s.emitted, ready - s.emitted));
        e.tokens = std::move(s.unsent);
        s.unsent.clear();
        s.emitted = ready;
        s.running->push(std::move(e));
    }
    const bool max_reached = s.req.max_tokens >= 0 && int64_t(s.out.tokens.size()) >= s.req.max_tokens;
    if (!max_reached && s.n_past() >= n_ctx_slot() && params_.context_shift && s.req.max_tokens >= 0 &&
        ctx_->can_shift()) {
        // the context is full: keep the start, drop the oldest half of the rest, go on
        const size_t keep = size_t(shift_keep(s.req.n_keep));
        s.out.n_discarded += int32_t(drop_cached(s, keep, (s.n_past() - keep) / 2));
        ++s.out.n_shifts;
    }
    if (max_reached || s.n_past() >= n_ctx_slot()) {
        finish(s, finish_reason::length);
        return;
    }
    s.pending = t;
}

// Speculative decoding: proposes each generating slot's next tokens after its pending one (a draft
// model for all of them at once, or prompt lookup), at most what its request and context can still
// use: the verification samples one token more than the draft, and no verified position may reach
// the end of the slot's context (where a context shift would move the cells under the draft).
void engine::draft_for(const std::vector<slot *> &generating) {
    const speculative_params &sp = params_.speculative;
    std::vector<drafter::ask> asks;
    std::vector<std::vector<token>> histories(generating.size());
    for (size_t k = 0; k < generating.size(); ++k) {
        slot &s = *generating[k];
        s.draft.clear();
        if (!s.req.media.empty()) continue;  // a history with embedding rows has no tokens to draft from
        int64_t room = int64_t(n_ctx_slot()) - int64_t(s.n_past()) - 2;
        if (s.req.max_tokens >= 0)
            room = std::min<int64_t>(room, s.req.max_tokens - int64_t(s.out.tokens.size()) - 1);
        const int32_t want = s.req.draft_max >= 0 ? std::min(s.req.draft_max, sp.n_max) : sp.n_max;
        const int32_t n_max = int32_t(std::clamp<int64_t>(room, 0, want));
        if (n_max <= 0) continue;
        histories[k] = s.cached;
        histories[k].push_back(s.pending);
        if (drafter_) {
            asks.push_back(
                {s.id, &histories[k], n_max, s.req.draft_p_min >= 0.0f ? s.req.draft_p_min : sp.p_min, {}});
        } else {
            s.draft = lookup_draft(histories[k], sp.lookup_ngram, n_max);
        }
    }
    if (drafter_ && !asks.empty()) {
        drafter_->propose(asks);
        for (drafter::ask &a : asks) slots_[size_t(a.seq)]->draft = std::move(a.out);
    }
    for (slot *s : generating)
        if (int32_t(s->draft.size()) < std::max(1, s->req.draft_min >= 0 ? s->req.draft_min : sp.n_min))
            s->draft.clear();
}

// Samples the rows of a slot's pending token and its draft in order with the slot's own chain, as
// plain decoding would: each draft token equal to the token sampled before it is kept (its cells
// were written by this decode); the first that differs ends the step, the sampled token pending.
void engine::verify(slot &s, int32_t first_row) {
    const std::vector<token> draft = s.draft;
    s.out.n_drafted += int32_t(draft.size());
    int32_t accepted = 0;
    for (size_t j = 0;; ++j) {
        after_decode(s, first_row + int32_t(j));
        if (!s.busy() || j == draft.size() || s.pending != draft[j]) break;
        s.cached.push_back(draft[j]);  // decoded at its position in this batch
        s.pending = token_null;
        ++s.out.n_draft_accepted;
        ++accepted;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.draft_tokens += draft.size();
    stats_.draft_accepted += uint64_t(accepted);
}

int32_t engine::shift_keep(int32_t n_keep) const {
    return std::clamp<int32_t>(n_keep, 0, int32_t(n_ctx_slot() / 2));
}

// Removes the slot's cached tokens [keep, keep + n_discard) and moves the later ones down.
size_t engine::drop_cached(slot &s, size_t keep, size_t n_discard) {
    if (keep >= s.n_past()) return 0;
    n_discard = std::min(n_discard, s.n_past() - keep);
    if (n_discard == 0) return 0;
    ctx_->kv_seq_rm(s.id, llm_pos(keep), llm_pos(keep + n_discard));
    ctx_->kv_seq_add(s.id, llm_pos(keep + n_discard), -1, -llm_pos(n_discard));
    s.cached.erase(s.cached.begin() + std::ptrdiff_t(keep),
                   s.cached.begin() + std::ptrdiff_t(keep + n_discard));
    return n_discard;
}

engine::slot &engine::idle_slot(int32_t slot_id, const char *what) {
    if (slot_id < 0 || slot_id >= n_slots())
        throw error(std::string(what) + ": slot " + std::to_string(slot_id) + " does not exist (" +
                    std::to_string(n_slots()) + " slots)");
    return *slots_[size_t(slot_id)];
}

void engine::save_slot(int32_t slot_id, const std::string &path, std::string_view user_data) {
    slot &s = idle_slot(slot_id, "save_slot");
    if (s.busy()) throw error("save_slot: slot " + std::to_string(slot_id) + " is busy");
    ctx_->seq_state_save_file(path, s.id, s.cached, user_data);
}

std::vector<uint8_t> engine::save_slot_state(int32_t slot_id, std::string_view user_data) {
    slot &s = idle_slot(slot_id, "save_slot_state");
    if (s.busy()) throw error("save_slot_state: slot " + std::to_string(slot_id) + " is busy");
    return ctx_->seq_state_save(s.id, s.cached, user_data);
}

std::string engine::load_slot(int32_t slot_id, const std::string &path) {
    slot &s = idle_slot(slot_id, "load_slot");
    if (s.busy()) throw error("load_slot: slot " + std::to_string(slot_id) + " is busy");
    return adopt_loaded_state(s, ctx_->seq_state_load_file(path, s.id), "state file " + path);
}

std::string engine::load_slot_state(int32_t slot_id, std::span<const uint8_t> bytes) {
    slot &s = idle_slot(slot_id, "load_slot_state");
    if (s.busy()) throw error("load_slot_state: slot " + std::to_string(slot_id) + " is busy");
    return adopt_loaded_state(s, ctx_->seq_state_load(bytes, s.id), "saved state");
}

void engine::clear_slot(int32_t slot_id) {
    slot &s = idle_slot(slot_id, "clear_slot");
    if (s.busy()) throw error("clear_slot: slot " + std::to_string(slot_id) + " is busy");
    ctx_->kv_seq_rm(s.id, -1, -1);
    s.cached.clear();
    publish_slot(s);
}

std::vector<token> engine::slot_tokens(int32_t slot_id) {
    return idle_slot(slot_id, "slot_tokens").cached;
}

std::string engine::adopt_loaded_state(slot &s, inference_context::saved_state st,
                                       const std::string &origin) {
    // the slot's tokens stand for positions [0, n): anything else cannot be continued
    const llm_pos n = llm_pos(st.tokens.size());
    if (size_t(n) >= n_ctx_slot() || ctx_->kv_seq_pos_min(s.id) != (n > 0 ? 0 : -1) ||
        ctx_->kv_seq_pos_max(s.id) != n - 1) {
        ctx_->kv_seq_rm(s.id, -1, -1);
        s.cached.clear();
        publish_slot(s);
        throw error(origin + ": holds " + std::to_string(n) + " tokens" +
                    (size_t(n) >= n_ctx_slot() ? ", a slot's context is " + std::to_string(n_ctx_slot())
                                               : std::string(" that do not match its cells")));
    }
    s.cached = std::move(st.tokens);
    s.cached_lora = lora_defaults_;  // a state file does not say: taken as decoded with the defaults
    publish_slot(s);
    return std::move(st.user_data);
}

int32_t engine::shift_slot(int32_t slot_id, int32_t n_keep, int32_t n_discard) {
    slot &s = idle_slot(slot_id, "shift_slot");
    if (s.busy() || n_discard <= 0) return 0;
    if (!ctx_->can_shift())
        throw error(model_.arch_name() + " cannot move cached tokens to other positions (no context shift)");
    const size_t dropped = drop_cached(s, size_t(shift_keep(n_keep)), size_t(n_discard));
    publish_slot(s);
    return int32_t(dropped);
}

void engine::fail_batch(const std::vector<slot *> &in_batch, const std::string &why) {
    for (slot *s : in_batch) {
        // what the slot's cache holds is no longer known to match `cached`: start it over
        ctx_->kv_seq_rm(s->id, -1, -1);
        s->cached.clear();
        if (s->busy()) finish(*s, finish_reason::error, why);
    }
}

// The embedding chunk a slot's prompt continues with, or null when it continues with tokens.
const embd_chunk *engine::next_media(const slot &s) const {
    for (const embd_chunk &c : s.req.media)
        if (c.at == s.n_past()) return &c;
    return nullptr;
}

// Decodes the embedding chunk each slot's prompt has reached, as embedding batches of their own (a
// batch holds tokens or embeddings, not both), at most n_batch rows each. A chunk that ends the
// prompt asks for its last row's logits and samples the first token from them. True when any was.
bool engine::decode_media() {
    bool worked = false;
    for (auto &sp : slots_) {
        slot &s = *sp;
        const embd_chunk *c = s.processing_prompt() ? next_media(s) : nullptr;
        if (!c) continue;
        worked = true;
        const size_t n_embd = size_t(model_.hparams().n_embd), n_batch = std::max<size_t>(1, ctx_->n_batch());
        const bool ends_prompt = c->at + size_t(c->n_tokens) == s.req.prompt.size();
        ctx_->set_lora_scales(s.lora);
        const auto t0 = clock_type::now();
        int32_t last_row = -1;
        for (size_t begin = 0; begin < size_t(c->n_tokens); begin += n_batch) {
            const size_t n = std::min(n_batch, size_t(c->n_tokens) - begin);
            batch b;
            b.embd.assign(c->embd.begin() + std::ptrdiff_t(begin * n_embd),
                          c->embd.begin() + std::ptrdiff_t((begin + n) * n_embd));
            b.n_embd_tokens = int32_t(n);
            for (size_t i = 0; i < n; ++i) {
                b.pos.push_back(llm_pos(s.n_past() + i));
                b.seq_ids.push_back({seq_id(s.id)});
                b.output.push_back(ends_prompt && begin + i + 1 == size_t(c->n_tokens) ? 1 : 0);
            }
            if (const int rc = ctx_->decode(b); rc != decode_ok) {
                fail_batch({&s}, "decoding " + std::to_string(n) + " embedding rows failed (code " +
                                     std::to_string(rc) + "): " + ctx_->last_error());
                break;
            }
            s.cached.insert(s.cached.end(), n, token_null);
            last_row = int32_t(n) - 1;
        }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            ++stats_.steps;
            stats_.decode_ms += ms_between(t0, clock_type::now());
            stats_.prompt_tokens += uint64_t(s.busy() ? c->n_tokens : 0);
            stats_.kv_cells_used = ctx_->kv_used_cells();
        }
        if (s.busy() && ends_prompt && last_row >= 0) {
            try {
                after_decode(s, last_row);
            } catch (const std::exception &e) {
                if (s.busy()) finish(s, finish_reason::error, e.what());
            }
        }
        publish_slot(s);
    }
    return worked;
}

bool engine::step() {
    assign_queued();
    for (auto &sp : slots_)
        if (sp->busy() && sp->running->cancelled()) finish(*sp, finish_reason::cancelled);
    const bool decoded_media = decode_media();

    // One batch: the pending token of every generating slot first (they wait on one token each),
    // then prompt chunks, slots in turn, up to n_batch tokens.
    batch b;
    std::vector<slot *> in_batch;
    std::vector<int32_t> output_of(slots_.size(), -1);  // slot -> batch index of its output row
    std::vector<size_t> added(slots_.size(), 0);
    size_t prompt_left = 0;
    for (auto &sp : slots_)
        if (sp->processing_prompt()) prompt_left += sp->req.prompt.size() - sp->n_past();
    const bool prompts_only =
        prompt_left > 0 && prompt_left <= size_t(std::max(0, params_.prompt_first_tokens));
    // At most n_batch tokens: when fewer than the generating slots, they take turns (the first slot
    // asked moves on every step).
    const size_t n_batch = std::max<size_t>(1, ctx_->n_batch());
    const size_t first = size_t(stats_.steps % slots_.size());  // written only by this thread
    // One set of LoRA scales per step: the first busy slot's in turn; slots with others wait.
    const std::vector<float> *lora = nullptr;
    for (size_t k = 0; k < slots_.size() && !lora; ++k) {
        const slot &s = *slots_[(first + k) % slots_.size()];
        if (s.busy() && (s.pending != token_null ? !prompts_only : true)) lora = &s.lora;
    }
    auto same_lora = [&](const slot &s) { return !lora || s.lora == *lora; };
    if (!prompts_only && params_.speculative.enabled()) {
        std::vector<slot *> generating;
        for (auto &sp : slots_)
            if (sp->busy() && sp->pending != token_null && same_lora(*sp)) generating.push_back(sp.get());
        draft_for(generating);
    }
    for (size_t k = 0; k < slots_.size() && size_t(b.n_tokens()) < n_batch; ++k) {
        slot &s = *slots_[(first + k) % slots_.size()];
        if (prompts_only || !s.busy() || s.pending == token_null || !same_lora(s)) continue;
        output_of[size_t(s.id)] = b.n_tokens();
        b.add(s.pending, llm_pos(s.n_past()), {seq_id(s.id)}, true);
        // its draft, as far as the batch has room (every row an output: each is verified)
        s.draft.resize(std::min(s.draft.size(), n_batch - size_t(b.n_tokens())));
        for (size_t i = 0; i < s.draft.size(); ++i)
            b.add(s.draft[i], llm_pos(s.n_past() + 1 + i), {seq_id(s.id)}, true);
        added[size_t(s.id)] = 1 + s.draft.size();
        in_batch.push_back(&s);
    }
    for (auto &sp : slots_) {
        slot &s = *sp;
        if (!s.processing_prompt() || size_t(b.n_tokens()) >= n_batch || !same_lora(s) || next_media(s))
            continue;
        const size_t done = s.n_past(), total = s.req.prompt.size();
        size_t n = std::min(total - done, n_batch - size_t(b.n_tokens()));
        for (const embd_chunk &c : s.req.media)  // tokens up to the next embedding chunk
            if (c.at > done) n = std::min(n, c.at - done);
        for (size_t i = 0; i < n; ++i) {
            const bool last = done + i + 1 == total;
            if (last) output_of[size_t(s.id)] = b.n_tokens();
            b.add(s.req.prompt[done + i], llm_pos(done + i), {seq_id(s.id)}, last);
        }
        added[size_t(s.id)] = n;
        in_batch.push_back(&s);
    }
    // a draft is verified only in the step that proposed it (a slot the batch had no room for, or a
    // failed decode, drops it)
    for (auto &sp : slots_)
        if (std::find(in_batch.begin(), in_batch.end(), sp.get()) == in_batch.end()) sp->draft.clear();
    if (b.n_tokens() == 0) return decoded_media;

    if (lora) ctx_->set_lora_scales(*lora);
    const auto t0 = clock_type::now();
    const int rc = ctx_->decode(b);
    const double ms = ms_between(t0, clock_type::now());
    if (rc != decode_ok) {
        fail_batch(in_batch, "decoding a batch of " + std::to_string(b.n_tokens()) + " tokens failed (code " +
                                 std::to_string(rc) + "): " + ctx_->last_error());
        return true;
    }
    size_t n_prompt_tokens = 0;
    for (slot *s : in_batch) {
        const size_t n = added[size_t(s->id)];
        if (s->pending != token_null) {
            s->cached.push_back(s->pending);
            s->pending = token_null;
        } else {
            s->cached.insert(s->cached.end(), s->req.prompt.begin() + std::ptrdiff_t(s->n_past()),
                             s->req.prompt.begin() + std::ptrdiff_t(s->n_past() + n));
            n_prompt_tokens += n;
        }
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.steps;
        stats_.decode_ms += ms;
        stats_.prompt_tokens += n_prompt_tokens;
        stats_.kv_cells_used = ctx_->kv_used_cells();
        stats_.graph_builds = uint64_t(ctx_->perf().n_graph_builds);
        stats_.graph_build_ms = ctx_->perf().t_graph_build_ms;
    }
    const auto decoded = clock_type::now();
    for (slot *s : in_batch) {
        const int32_t row = output_of[size_t(s->id)];
        if (row >= 0) {
            try {
                if (s->draft.empty())
                    after_decode(*s, row);
                else
                    verify(*s, row);
            } catch (const std::exception &e) {
                if (s->busy()) finish(*s, finish_reason::error, e.what());
            }
        }
        if (!s->draft.empty()) {  // what was not kept leaves the cache
            ctx_->kv_seq_rm(s->id, llm_pos(s->n_past()), -1);
            s->draft.clear();
        }
        publish_slot(*s);
    }
    const double sample_ms = ms_between(decoded, clock_type::now());
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.sample_ms += sample_ms;
    return true;
}

completion engine::generate(request r, const std::function<bool(const event &)> &on_event) {
    const std::shared_ptr<job> j = submit(std::move(r));
    event e;
    for (;;) {
        const bool worked = step();
        while (j->poll_event(e))
            if (!on_event(e)) j->cancel();
        if (j->finished() && !j->poll_event(e)) break;
        if (!worked && !j->finished()) {
            // nothing to do yet the job is not done: only possible if its slot is held elsewhere
            j->cancel();
        }
    }
    return j->result();
}

void engine::loop() {
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            if (stopping_) break;
        }
        bool worked = false;
        try {
            worked = step();
        } catch (const std::exception &e) {
            std::vector<slot *> all;
            for (auto &sp : slots_) all.push_back(sp.get());
            fail_batch(all, std::string("engine step failed: ") + e.what());
            worked = true;
        }
        if (!worked) {
            std::unique_lock<std::mutex> lock(mutex_);
            // an idle loop has no busy slot (a busy slot always has a token to decode): only a new
            // request or stop() wakes it
            wake_.wait(lock, [&] { return stopping_ || !pending_requests_.empty(); });
        }
    }
}

void engine::start() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (loop_thread_.joinable()) return;
    stopping_ = false;
    loop_thread_ = std::thread([this] { loop(); });
}

void engine::stop() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (loop_thread_.joinable()) loop_thread_.join();
    // whatever is left ends as cancelled
    for (auto &sp : slots_)
        if (sp->busy()) finish(*sp, finish_reason::cancelled);
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto &p : pending_requests_) {
        completion c;
        c.finish = finish_reason::cancelled;
        c.n_prompt = int32_t(p.r.prompt.size());
        p.j->finish(std::move(c), {});
        ++stats_.requests_finished;
    }
    pending_requests_.clear();
    stats_.queued = 0;
}

engine_stats engine::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

}  // namespace weft::serving
