// weft/serving/engine.h — the engine layer: a request queue, slots (one sequence of the KV cache
// each) and one loop that decodes every active slot in ONE batch per step (continuous batching).
// `weft run`, `weft chat` and `weft serve` all generate through it: the project's one generate loop.
//
// Usage, on the caller's thread (no background loop):
//   weft::serving::engine eng(*model, {.n_slots = 1});
//   weft::serving::request r;
//   r.prompt = model->vocab().tokenize("Once upon a time", true, true);
//   auto done = eng.generate(std::move(r), [](const weft::serving::event &e) {
//       std::fputs(e.text.c_str(), stdout);
//       return true;  // false cancels
//   });
//
// Usage, many clients (a server): eng.start() runs the loop on a thread of its own; each client
// calls submit() and reads its job's events with job::wait_event until job::finished().
//
// Every step gathers the pending token of each generating slot and then chunks of the prompts
// being processed, up to n_batch tokens, and decodes them together. The KV cache is shared: slot
// i is sequence i and owns n_ctx / n_slots positions. A slot keeps its cache cells after a request,
// and a new request goes to the idle slot whose cached tokens share the longest prefix with its
// prompt when that is at least half the prompt (else to the least recently used idle slot), so
// only the rest of the prompt is decoded (prompt caching). Because every kernel reduces
// in one fixed order, a request's tokens do not depend on what else is in the batch.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/sampling/sampling.h"
#include "weft/serving/speculative.h"

namespace weft {
class grammar_vocab_index;  // weft/grammar/grammar.h
}  // namespace weft

namespace weft::serving {

enum class finish_reason {
    none,       // still running
    stop,       // end of generation token or a stop string
    length,     // max_tokens reached, or the slot's context is full
    cancelled,  // job::cancel, or the engine stopped
    error,      // decoding failed; completion::error says why
};
const char *finish_reason_name(finish_reason r);  // "stop", "length", "cancelled", "error", "none"

// Embedding rows that stand in the prompt in place of tokens (an image's, from weft/vision): the
// prompt's positions [at, at + n_tokens) hold token_null placeholders, and embd holds n_tokens rows
// of the model's n_embd floats, decoded at those positions as an embedding batch of their own.
struct embd_chunk {
    size_t at = 0;
    int32_t n_tokens = 0;
    std::vector<float> embd;
};

struct request {
    std::vector<token> prompt;      // at least one token, fewer than the slot's context
    std::vector<embd_chunk> media;  // in prompt order, not overlapping; a slot reuses no cache past the first
    int32_t max_tokens = 128;       // < 0: until end of generation or a full slot context
    sampling_params sampling;
    std::vector<std::string> stop;  // stop strings: generation ends before the first one found
    bool ignore_eos = false;        // end-of-generation tokens are generated like any other
    int32_t n_probs = 0;            // per generated token, report this many most likely alternatives
    bool logprobs = false;          // per generated token, report its log-probability
    int32_t slot = -1;              // run in this slot (a conversation pinned to its cache); -1: any
    // With engine_params::context_shift: the tokens at the start that a context shift keeps (at
    // most half the slot's context is kept).
    int32_t n_keep = 0;
    // The scale of each LoRA adapter of the engine's context (engine_params::context.loras, in that
    // order) for this request; empty: the engine's (set_lora_scales). Requests with other scales
    // are decoded in other steps.
    std::vector<float> lora_scales;
    // Speculative decoding for this request (engine_params::speculative is on): -1 takes the
    // engine's --draft-max / --draft-min / --draft-p-min; draft_max at most the engine's.
    int32_t draft_max = -1;
    int32_t draft_min = -1;
    float draft_p_min = -1.0f;
};

struct token_logprob {
    token id = token_null;
    float logprob = 0.0f;  // natural log of the softmax of the model's logits (before sampling)
};

// One sampled token, with its log-probabilities when the request asked for them.
struct generated_token {
    token id = token_null;
    float logprob = 0.0f;
    std::vector<token_logprob> top;  // the n_probs most likely, most likely first
};

// What a job hands its reader: text that is final (valid UTF-8, never the start of a possible stop
// string) and the tokens sampled since the previous event. The last event has `final` set.
struct event {
    std::string text;
    std::vector<generated_token> tokens;
    bool final = false;
};

struct completion {
    std::string text;                     // everything generated, stop string excluded, valid UTF-8
    std::vector<generated_token> tokens;  // every sampled token (an end-of-generation token excluded)
    finish_reason finish = finish_reason::none;
    std::string error;      // finish == error: why
    std::string stop_word;  // finish == stop by a stop string: which one
    int32_t slot = -1;      // where it ran
    int32_t n_prompt = 0;   // prompt tokens
    int32_t n_cached = 0;   // prompt tokens whose cache cells were reused
    // Tokens context shifts dropped: with n_keep the request's kept start (capped as the shift caps
    // it), the tokens [n_keep, n_keep + n_discarded) of prompt + generated are gone from the slot.
    int32_t n_discarded = 0;
    int32_t n_shifts = 0;          // context shifts
    double queued_ms = 0.0;        // from submit to a slot
    double first_token_ms = 0.0;   // from submit to the first sampled token
    double prompt_ms = 0.0;        // from a slot to the first sampled token
    double generate_ms = 0.0;      // from the first to the last sampled token
    int32_t n_drafted = 0;         // speculative decoding: draft tokens verified
    int32_t n_draft_accepted = 0;  // of those, kept (each one a token without a decode step of its own)
};

// A submitted request, shared between the engine and its reader. Thread-safe.
class job {
  public:
    explicit job(uint64_t id) : id_(id) {}
    uint64_t id() const { return id_; }
    // Waits up to `timeout` for the next event; false when none came (or all were read and the job
    // is finished).
    bool wait_event(event &out, std::chrono::milliseconds timeout);
    // Waits up to `timeout` until an event can be read or the job is finished; reads nothing.
    bool wait_ready(std::chrono::milliseconds timeout);
    // Takes the next event if there is one, without waiting.
    bool poll_event(event &out);
    // Waits up to `timeout` until the job is finished; true if it is. Events do not wake this
    // waiter: a reader that wants only the outcome (a response that is not streamed) is not woken
    // once per token (on a small machine that preempted the decode threads every step).
    bool wait_finished(std::chrono::milliseconds timeout);
    // From now on events are dropped instead of queued (and those queued are dropped): for a
    // reader that takes only result().
    void ignore_events();
    // Asks the engine to stop this job at its next step; the final event follows.
    void cancel();
    bool cancelled() const;
    bool finished() const;
    // The outcome; complete once finished() (the final event has been queued).
    completion result() const;

  private:
    friend class engine;
    void push(event e);
    // Sets the outcome and queues the final event together, so a reader of that event sees it.
    void finish(completion c, event last);

    const uint64_t id_;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<event> events_;
    completion result_;
    bool finished_ = false;
    bool cancel_ = false;
    bool ignore_events_ = false;
    int event_waiters_ = 0;  // readers in wait_event / wait_ready: push() wakes only those
};

struct engine_params {
    int32_t n_slots = 1;       // parallel sequences (1..64)
    inference_params context;  // n_ctx: cells for all slots together (each gets n_ctx / n_slots)
    size_t max_queue = 0;      // requests waiting for a slot at most (0: no limit)
    // When a slot's context fills up during generation, keep the request's first n_keep tokens, drop
    // the oldest half of the rest and go on (the cached keys are re-rotated to their new positions)
    // instead of finishing with `length`. Applies to requests with max_tokens >= 0 on a model that
    // can move positions (not bert).
    bool context_shift = false;
    // Short prompts first: when the prompt tokens still to decode, all slots together, are at most
    // this many, a step decodes only them and the generating slots wait one step, so a new request's
    // first token does not wait behind everyone's next one (time to first token). Longer prompts
    // are decoded in chunks beside the generating slots, which never wait longer than one short
    // prompt. 0: always mix.
    int32_t prompt_first_tokens = 128;
    // Speculative decoding for every slot (weft/serving/speculative.h): a draft model or prompt
    // lookup proposes tokens that one batch verifies. The draft model must outlive the engine.
    speculative_params speculative;
};

struct slot_state {
    int32_t id = 0;
    bool busy = false;
    uint64_t job_id = 0;      // when busy
    int32_t n_cached = 0;     // tokens whose cells the slot holds
    int32_t n_prompt = 0;     // of the running request
    int32_t n_generated = 0;  // of the running request
};

struct engine_stats {
    int32_t n_slots = 0;
    int32_t busy_slots = 0;
    size_t queued = 0;
    uint64_t requests_submitted = 0;
    uint64_t requests_finished = 0;
    uint64_t prompt_tokens = 0;     // decoded (cached prompt tokens not counted)
    uint64_t generated_tokens = 0;  // sampled
    uint64_t steps = 0;             // decode calls
    double decode_ms = 0.0;         // time inside decode calls
    double sample_ms = 0.0;         // time after them: sampling, stop strings, events to the jobs
    uint64_t graph_builds = 0;      // of those, steps whose batch shape needed a new graph
    double graph_build_ms = 0.0;    // time building them (the rest reused the previous graph)
    uint64_t draft_tokens = 0;      // speculative decoding: draft tokens verified
    uint64_t draft_accepted = 0;    // of those, kept
    uint32_t kv_cells_used = 0;
    uint32_t kv_cells = 0;
    std::vector<slot_state> slots;
};

// Thrown by submit when max_queue requests are already waiting.
class queue_full : public error {
  public:
    using error::error;
};

class drafter;  // the draft model's context (speculative decoding)

class engine {
  public:
    // Creates the inference context (n_seq_max = n_slots). Throws weft::error on bad parameters.
    engine(const model &m, const engine_params &params);
    ~engine();  // stops the loop; unfinished jobs end as cancelled
    engine(const engine &) = delete;
    engine &operator=(const engine &) = delete;

    const weft::model &model() const { return model_; }
    int32_t n_slots() const { return int32_t(slots_.size()); }
    uint32_t n_ctx() const;       // cells of the whole cache
    uint32_t n_ctx_slot() const;  // positions one slot may use
    const inference_context &context() const { return *ctx_; }
    // The LoRA adapters' default scales (those of requests without lora_scales). Thread-safe.
    std::vector<float> lora_scales() const;
    // Sets them for the requests that start from now on; throws weft::error on a count other than
    // the adapters' or a scale that is not finite.
    void set_lora_scales(std::vector<float> scales);

    // Queues a request. Throws weft::error when it cannot ever run (empty prompt, prompt not
    // shorter than a slot's context, bad sampling parameters, slot out of range) and queue_full
    // when the queue is full.
    std::shared_ptr<job> submit(request r);

    // One step of the loop on the calling thread: assigns queued requests to free slots, decodes
    // one batch, samples, delivers events. False when there was nothing to do. Not to be called
    // while the background loop runs.
    bool step();

    // Drops the cached tokens [n_keep, n_keep + n_discard) of an idle slot and moves the later ones
    // down into their place, as a context shift does (a conversation about to outgrow the context
    // makes room before its next turn). n_keep is capped at half the slot's context, as in a shift
    // during generation. Returns the tokens dropped (0 when the slot is busy or holds no more than
    // n_keep). Throws weft::error when the model cannot move positions. Not while the loop runs.
    int32_t shift_slot(int32_t slot, int32_t n_keep, int32_t n_discard);
    // n_keep as context shifts use it: at most half of a slot's context.
    int32_t shift_keep(int32_t n_keep) const;

    // Saves an idle slot's cache (its cells and the tokens they hold) and the caller's bytes to a
    // state file (inference_context::seq_state_save_file). Neither this nor load_slot while the
    // loop runs.
    void save_slot(int32_t slot, const std::string &path, std::string_view user_data = {});
    // Loads such a file into an idle slot, replacing what it held, so a request whose prompt starts
    // with the saved tokens decodes only the rest; returns the caller's bytes. Throws weft::error
    // (another model, a truncated file, more tokens than a slot's context, a busy slot).
    std::string load_slot(int32_t slot, const std::string &path);
    // The same as bytes instead of a file (the C API's weft_session_state_save / _load).
    std::vector<uint8_t> save_slot_state(int32_t slot, std::string_view user_data = {});
    std::string load_slot_state(int32_t slot, std::span<const uint8_t> bytes);
    // Drops an idle slot's cached tokens (its next request decodes its whole prompt).
    void clear_slot(int32_t slot);
    // The tokens an idle slot's cache holds, positions [0, size).
    std::vector<token> slot_tokens(int32_t slot);

    // Submits `r` and steps until it finishes, handing each event to on_event on this thread (it
    // returns false to cancel). Not to be called while the background loop runs.
    completion generate(request r, const std::function<bool(const event &)> &on_event);

    // The loop on a thread of its own, sleeping while there is nothing to do.
    void start();
    // Ends the loop thread (if any); running and queued jobs end as cancelled.
    void stop();

    engine_stats stats() const;

  private:
    struct slot;
    void assign_queued();
    const embd_chunk *next_media(const slot &s) const;
    bool decode_media();
    bool pick_slot(const request &r, int32_t &chosen, size_t &keep) const;
    void start_job(slot &s, std::shared_ptr<job> j, size_t keep);
    void after_decode(slot &s, int32_t batch_index);
    void draft_for(const std::vector<slot *> &generating);
    void verify(slot &s, int32_t first_row);
    size_t drop_cached(slot &s, size_t keep, size_t n_discard);
    slot &idle_slot(int32_t slot_id, const char *what);
    std::string adopt_loaded_state(slot &s, inference_context::saved_state st, const std::string &origin);
    void finish(slot &s, finish_reason why, const std::string &error_text = {});
    void fail_batch(const std::vector<slot *> &in_batch, const std::string &why);
    void publish_slot(const slot &s);
    void loop();

    const weft::model &model_;
    engine_params params_;
    std::unique_ptr<inference_context> ctx_;
    std::unique_ptr<drafter> drafter_;  // speculative decoding with a draft model
    std::vector<std::unique_ptr<slot>> slots_;
    std::chrono::steady_clock::time_point epoch_;

    mutable std::mutex mutex_;  // the queue, the stats and the loop's flags
    std::condition_variable wake_;
    struct queued {
        std::shared_ptr<job> j;
        request r;
        std::chrono::steady_clock::time_point submitted;
    };
    std::deque<queued> pending_requests_;                       // first in, first out
    std::vector<float> lora_defaults_;                          // scales of requests that give none
    std::shared_ptr<const grammar_vocab_index> grammar_index_;  // shared by the grammar samplers
    engine_stats stats_;
    uint64_t next_job_id_ = 1;
    uint64_t use_counter_ = 0;
    bool stopping_ = false;
    std::thread loop_thread_;
};

}  // namespace weft::serving
