// src/api/session.cpp — the C API's sessions (weft.h): generate through the serving engine (the one
// generate loop `weft run`, `chat` and `serve` use), logits, embeddings and saved state.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "api/handles.h"
#include "weft/grammar/grammar.h"
#include "weft/grammar/json_schema.h"
#include "weft/runtime/batch.h"
#include "weft/runtime/embeddings.h"
#include "weft/sampling/sampling.h"

namespace weft::api {
namespace {

weft::serving::engine &engine_of(weft_session *s) {
    if (!s->engine)
        throw api_error(WEFT_ERR_UNSUPPORTED, s->owner->model->path() + ": architecture '" +
                                                  s->owner->model->arch_name() +
                                                  "' is an encoder: it gives embeddings, not text");
    return *s->engine;
}

// The engine's sampling parameters from the C struct, checked (a grammar that does not parse and a
// schema weft cannot convert are named with their line:column or JSON pointer).
sampling_params to_sampling(const weft_sampling_params &c) {
    sampling_params s;
    s.temp = c.temperature;
    s.top_k = c.top_k;
    s.top_p = c.top_p;
    s.min_p = c.min_p;
    s.typical_p = c.typical_p;
    s.top_n_sigma = c.top_n_sigma;
    s.penalty_last_n = c.repeat_last_n;
    s.penalty_repeat = c.repeat_penalty;
    s.penalty_freq = c.frequency_penalty;
    s.penalty_present = c.presence_penalty;
    s.dynatemp_range = c.dynatemp_range;
    s.dynatemp_exponent = c.dynatemp_exponent;
    s.xtc_probability = c.xtc_probability;
    s.xtc_threshold = c.xtc_threshold;
    s.dry_multiplier = c.dry_multiplier;
    s.dry_base = c.dry_base;
    s.dry_allowed_length = c.dry_allowed_length;
    s.dry_penalty_last_n = c.dry_penalty_last_n;
    if (c.dry_sequence_breakers) {
        s.dry_sequence_breakers.clear();
        for (size_t i = 0; i < c.n_dry_sequence_breakers; ++i) {
            require(c.dry_sequence_breakers[i], "dry_sequence_breakers[i]");
            s.dry_sequence_breakers.emplace_back(c.dry_sequence_breakers[i]);
        }
    }
    s.mirostat = c.mirostat;
    s.mirostat_tau = c.mirostat_tau;
    s.mirostat_eta = c.mirostat_eta;
    s.seed = c.seed;
    s.min_keep = c.min_keep;
    if (c.samplers && *c.samplers) s.samplers = sampler_types_from_list(c.samplers);
    if (c.n_logit_bias > 0) require(c.logit_bias, "logit_bias");
    for (size_t i = 0; i < c.n_logit_bias; ++i)
        s.logit_bias.emplace_back(c.logit_bias[i].token, c.logit_bias[i].bias);
    if (c.grammar && *c.grammar && c.json_schema && *c.json_schema)
        throw api_error(WEFT_ERR_INVALID_ARGUMENT,
                        "grammar and json_schema both constrain the output: give one");
    if (c.grammar && *c.grammar) {
        s.grammar = c.grammar;
        grammar::parse(s.grammar, "grammar");
    } else if (c.json_schema && *c.json_schema) {
        try {
            s.grammar = json_schema_to_grammar(c.json_schema);
        } catch (const error &e) {
            throw api_error(WEFT_ERR_INVALID_ARGUMENT, std::string("json_schema: ") + e.what());
        }
        grammar::parse(s.grammar, "the grammar of the JSON schema");
    }
    check_sampling_params(s);
    return s;
}

void check_fits(size_t n_tokens, uint32_t n_ctx, const char *what) {
    if (n_tokens == 0) throw api_error(WEFT_ERR_INVALID_ARGUMENT, std::string(what) + ": no tokens");
    if (n_tokens >= n_ctx)
        throw api_error(WEFT_ERR_CONTEXT_FULL, std::string(what) + " has " + std::to_string(n_tokens) +
                                                   " tokens; the session's context holds " +
                                                   std::to_string(n_ctx) + " (n_ctx)");
}

void check_tokens(const weft_session *s, const weft_token *tokens, size_t n) {
    require(tokens, "tokens");
    const int32_t n_vocab = s->owner->model->vocab().n_tokens();
    for (size_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            throw api_error(WEFT_ERR_INVALID_ARGUMENT, "token " + std::to_string(tokens[i]) + " at " +
                                                           std::to_string(i) + " is not in the vocabulary (" +
                                                           std::to_string(n_vocab) + " tokens)");
}

// The scratch context (logits, embeddings): the session's size, one ubatch for all of it.
inference_context &scratch_of(weft_session *s) {
    if (!s->scratch) {
        inference_params ip = s->params;
        ip.n_batch = ip.n_ubatch = ip.n_ctx;
        s->scratch = std::make_unique<inference_context>(*s->owner->model, ip);
    }
    return *s->scratch;
}

// Clears the abort flag when a call ends, so an abort reaches one call.
struct abort_scope {
    weft_session *s;
    ~abort_scope() { s->abort_requested.store(false); }
};

}  // namespace
}  // namespace weft::api

using weft::api::api_error;
using weft::api::guarded;
using weft::api::require;

extern "C" {

WEFT_API void weft_session_params_init(weft_session_params *params) {
    if (!params) return;
    *params = weft_session_params{};
    params->n_batch = 2048;
}

WEFT_API weft_status weft_session_create(weft_model *model, const weft_session_params *params,
                                         weft_session **out) {
    return guarded(WEFT_ERR_INVALID_ARGUMENT, [&] {
        require(model, "model");
        require(out, "out");
        *out = nullptr;
        weft_session_params p;
        weft_session_params_init(&p);
        if (params) p = *params;
        const weft::model &m = *model->model;
        const bool encoder = m.hparams().encoder;
        // a decoder as `weft run` sizes it; an encoder its whole training context (as `weft embed`)
        weft::inference_params ip =
            weft::serving::conversation_params(m, p.n_ctx, std::max(p.n_batch, 1u), p.n_threads);
        if (encoder && p.n_ctx == 0) ip.n_ctx = uint32_t(std::max<int64_t>(m.hparams().n_ctx_train, 8));
        if (p.n_threads_batch > 0) ip.n_threads_batch = p.n_threads_batch;
        ip.device = model->host_device;
        ip.loras = model->loras;
        auto s = std::make_unique<weft_session>();
        s->owner = model;
        std::atomic<bool> *abort_flag = &s->abort_requested;
        ip.abort_callback = [abort_flag] { return abort_flag->load(std::memory_order_relaxed); };
        s->params = ip;
        s->context_shift = p.context_shift;
        if (!encoder) {
            weft::serving::engine_params ep;
            ep.n_slots = 1;
            ep.context = ip;
            ep.context_shift = p.context_shift;
            s->engine = std::make_unique<weft::serving::engine>(m, ep);
        }
        *out = s.release();
        return WEFT_OK;
    });
}

WEFT_API void weft_session_free(weft_session *session) {
    delete session;
}

WEFT_API uint32_t weft_session_n_ctx(const weft_session *session) {
    if (!session) return 0;
    return session->engine ? session->engine->n_ctx() : session->params.n_ctx;
}

WEFT_API weft_status weft_session_reset(weft_session *session) {
    return guarded(WEFT_ERR_INVALID_ARGUMENT, [&] {
        require(session, "session");
        if (session->engine) session->engine->clear_slot(0);
        return WEFT_OK;
    });
}

WEFT_API void weft_session_abort(weft_session *session) {
    if (session) session->abort_requested.store(true);
}

WEFT_API void weft_sampling_params_init(weft_sampling_params *params) {
    if (!params) return;
    const weft::sampling_params d;
    *params = weft_sampling_params{};
    params->temperature = d.temp;
    params->top_k = d.top_k;
    params->top_p = d.top_p;
    params->min_p = d.min_p;
    params->typical_p = d.typical_p;
    params->top_n_sigma = d.top_n_sigma;
    params->repeat_last_n = d.penalty_last_n;
    params->repeat_penalty = d.penalty_repeat;
    params->frequency_penalty = d.penalty_freq;
    params->presence_penalty = d.penalty_present;
    params->dynatemp_range = d.dynatemp_range;
    params->dynatemp_exponent = d.dynatemp_exponent;
    params->xtc_probability = d.xtc_probability;
    params->xtc_threshold = d.xtc_threshold;
    params->dry_multiplier = d.dry_multiplier;
    params->dry_base = d.dry_base;
    params->dry_allowed_length = d.dry_allowed_length;
    params->dry_penalty_last_n = d.dry_penalty_last_n;
    params->mirostat = d.mirostat;
    params->mirostat_tau = d.mirostat_tau;
    params->mirostat_eta = d.mirostat_eta;
    params->seed = d.seed;
    params->min_keep = d.min_keep;
}

WEFT_API void weft_generate_params_init(weft_generate_params *params) {
    if (!params) return;
    *params = weft_generate_params{};
    params->max_tokens = 128;
    weft_sampling_params_init(&params->sampling);
}

WEFT_API weft_status weft_generate(weft_session *session, const weft_token *prompt, size_t n_prompt,
                                   const weft_generate_params *params, weft_stream_callback callback,
                                   void *user_data, weft_generate_result *result) {
    return guarded(WEFT_ERR_INVALID_ARGUMENT, [&] {
        require(session, "session");
        weft::api::abort_scope scope{session};
        weft::serving::engine &eng = weft::api::engine_of(session);
        weft_generate_params p;
        weft_generate_params_init(&p);
        if (params) p = *params;
        weft::api::check_fits(n_prompt, eng.n_ctx_slot(), "the prompt");
        weft::api::check_tokens(session, prompt, n_prompt);
        weft::serving::request req;
        req.prompt.assign(prompt, prompt + n_prompt);
        req.max_tokens = p.max_tokens;
        req.sampling = weft::api::to_sampling(p.sampling);
        if (p.n_stop > 0) require(p.stop, "stop");
        for (size_t i = 0; i < p.n_stop; ++i) {
            require(p.stop[i], "stop[i]");
            if (*p.stop[i]) req.stop.emplace_back(p.stop[i]);
        }
        req.ignore_eos = p.ignore_eos;
        const weft::vocab &v = session->owner->model->vocab();
        req.n_keep = v.bos() != weft::token_null && req.prompt.front() == v.bos() ? 1 : 0;
        std::vector<weft_token> ids;
        const weft::serving::completion done =
            eng.generate(std::move(req), [&](const weft::serving::event &e) {
                if (session->abort_requested.load()) return false;
                if (!callback || (e.text.empty() && e.tokens.empty())) return true;
                ids.clear();
                for (const weft::serving::generated_token &t : e.tokens) ids.push_back(t.id);
                return callback(e.text.data(), e.text.size(), ids.data(), ids.size(), user_data);
            });
        const bool aborted = session->abort_requested.load();
        if (result) {
            *result = weft_generate_result{};
            result->finish = done.finish == weft::serving::finish_reason::stop     ? WEFT_FINISH_STOP
                             : done.finish == weft::serving::finish_reason::length ? WEFT_FINISH_LENGTH
                                                                                   : WEFT_FINISH_CANCELLED;
            result->n_prompt_tokens = done.n_prompt;
            result->n_cached_tokens = done.n_cached;
            result->n_generated_tokens = int32_t(done.tokens.size());
            result->prompt_ms = done.prompt_ms;
            result->generate_ms = done.generate_ms;
        }
        if (aborted) throw api_error(WEFT_ERR_ABORTED, "generation aborted (weft_session_abort)");
        if (done.finish == weft::serving::finish_reason::error)
            throw api_error(WEFT_ERR_INTERNAL, "generation failed: " + done.error);
        return WEFT_OK;
    });
}

WEFT_API weft_status weft_session_logits(weft_session *session, const weft_token *tokens, size_t n_tokens,
                                         float *logits, size_t capacity) {
    return guarded(WEFT_ERR_INVALID_ARGUMENT, [&] {
        require(session, "session");
        weft::api::abort_scope scope{session};
        if (session->owner->model->hparams().encoder)
            throw api_error(WEFT_ERR_UNSUPPORTED,
                            "an encoder gives embeddings, not logits (weft_session_embed)");
        weft::api::check_fits(n_tokens, session->params.n_ctx, "the tokens");
        weft::api::check_tokens(session, tokens, n_tokens);
        const size_t n_vocab = size_t(session->owner->model->vocab().n_tokens());
        if (capacity < n_tokens * n_vocab)
            throw api_error(WEFT_ERR_BUFFER_TOO_SMALL, "logits: " + std::to_string(n_tokens * n_vocab) +
                                                           " floats needed, room for " +
                                                           std::to_string(capacity));
        require(logits, "logits");
        weft::inference_context &ctx = weft::api::scratch_of(session);
        ctx.kv_seq_rm(-1, -1, -1);
        weft::batch b;
        for (size_t i = 0; i < n_tokens; ++i) b.add(tokens[i], weft::llm_pos(i), {0}, true);
        const int rc = ctx.decode(b);
        if (rc == weft::decode_aborted)
            throw api_error(WEFT_ERR_ABORTED, "logits aborted (weft_session_abort)");
        if (rc != weft::decode_ok)
            throw api_error(WEFT_ERR_INTERNAL, "decoding " + std::to_string(n_tokens) +
                                                   " tokens failed (code " + std::to_string(rc) +
                                                   "): " + ctx.last_error());
        std::memcpy(logits, ctx.get_logits(), n_tokens * n_vocab * sizeof(float));
        return WEFT_OK;
    });
}

WEFT_API weft_status weft_session_embed(weft_session *session, const weft_token *tokens, size_t n_tokens,
                                        weft_pooling pooling, bool normalize, float *embedding,
                                        size_t capacity) {
    return guarded(WEFT_ERR_INVALID_ARGUMENT, [&] {
        require(session, "session");
        weft::api::abort_scope scope{session};
        const weft::model &m = *session->owner->model;
        if (!m.hparams().encoder)
            throw api_error(WEFT_ERR_UNSUPPORTED,
                            m.path() + ": architecture '" + m.arch_name() +
                                "' is not an embedding model (an encoder such as bert)");
        if (pooling < WEFT_POOLING_MODEL || pooling > WEFT_POOLING_RANK)
            throw api_error(WEFT_ERR_INVALID_ARGUMENT,
                            "pooling " + std::to_string(int(pooling)) + " is not a weft_pooling");
        weft::api::check_fits(n_tokens, session->params.n_ctx + 1, "the text");
        weft::api::check_tokens(session, tokens, n_tokens);
        const weft::pooling_kind kind = pooling == WEFT_POOLING_MODEL
                                            ? weft::pooling_kind(m.hparams().pooling_type)
                                            : weft::pooling_kind(pooling);
        // a reranker's output is its head's scores (n_output), an embedding n_embd values
        const size_t n_out =
            size_t(kind == weft::pooling_kind::rank ? m.hparams().n_output() : m.hparams().n_embd);
        if (capacity < n_out)
            throw api_error(WEFT_ERR_BUFFER_TOO_SMALL, "embedding: " + std::to_string(n_out) +
                                                           " floats needed, room for " +
                                                           std::to_string(capacity));
        require(embedding, "embedding");
        weft::embedding_result r;
        try {
            r = weft::compute_embeddings(weft::api::scratch_of(session), {tokens, n_tokens}, kind, normalize);
        } catch (const weft::error &) {
            if (session->abort_requested.load())
                throw api_error(WEFT_ERR_ABORTED, "embedding aborted (weft_session_abort)");
            throw;
        }
        const std::vector<float> &v = kind == weft::pooling_kind::none ? r.token_embeddings.back() : r.pooled;
        std::copy(v.begin(), v.end(), embedding);
        return WEFT_OK;
    });
}

WEFT_API weft_status weft_session_state_save(weft_session *session, uint8_t *buf, size_t capacity,
                                             size_t *size) {
    return guarded(WEFT_ERR_INVALID_ARGUMENT, [&] {
        require(session, "session");
        const std::vector<uint8_t> bytes = weft::api::engine_of(session).save_slot_state(0);
        return weft::api::write_out(bytes.data(), bytes.size(), buf, capacity, size, "state");
    });
}

WEFT_API weft_status weft_session_state_load(weft_session *session, const uint8_t *buf, size_t size) {
    return guarded(WEFT_ERR_BAD_FILE, [&] {
        require(session, "session");
        require(buf, "buf");
        weft::api::engine_of(session).load_slot_state(0, {buf, size});
        return WEFT_OK;
    });
}

WEFT_API weft_status weft_session_state_save_file(weft_session *session, const char *path) {
    return guarded(WEFT_ERR_IO, [&] {
        require(session, "session");
        require(path, "path");
        weft::api::engine_of(session).save_slot(0, path);
        return WEFT_OK;
    });
}

WEFT_API weft_status weft_session_state_load_file(weft_session *session, const char *path) {
    return guarded(WEFT_ERR_BAD_FILE, [&] {
        require(session, "session");
        require(path, "path");
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec))
            throw api_error(WEFT_ERR_IO, std::string(path) + ": no such file");
        weft::api::engine_of(session).load_slot(0, path);
        return WEFT_OK;
    });
}

WEFT_API weft_status weft_session_cached_tokens(weft_session *session, weft_token *tokens, size_t capacity,
                                                size_t *n_tokens) {
    return guarded(WEFT_ERR_INVALID_ARGUMENT, [&] {
        require(session, "session");
        const std::vector<weft::token> cached =
            session->engine ? session->engine->slot_tokens(0) : std::vector<weft::token>{};
        return weft::api::write_out(cached.data(), cached.size(), tokens, capacity, n_tokens, "tokens");
    });
}

}  // extern "C"
