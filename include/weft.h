/* weft.h — the C interface of libweft: load a GGUF model, tokenize, format chats, generate (streamed),
 * read logits and embeddings, save and load state. C11 (and C++ through extern "C").
 *
 *   weft_model *model;
 *   weft_model_params mp;
 *   weft_model_params_init(&mp);
 *   if (weft_model_load("model.gguf", &mp, &model) != WEFT_OK) {
 *       fprintf(stderr, "%s\n", weft_last_error());
 *       return 1;
 *   }
 *   weft_session *session;
 *   weft_session_params sp;
 *   weft_session_params_init(&sp);
 *   weft_session_create(model, &sp, &session);
 *   ... weft_tokenize, then weft_generate with a callback that prints each piece ...
 *   weft_session_free(session);
 *   weft_model_free(model);
 *
 * Errors. Every function that can fail returns a weft_status; on anything but WEFT_OK it leaves its
 * outputs unset (except where noted) and weft_last_error() gives the message naming the problem.
 * No C++ exception ever leaves a function of this header; running out of memory is WEFT_ERR_NO_MEMORY.
 *
 * Ownership. Handles are opaque and freed by their own free function (NULL is accepted). A session
 * refers to its model: free every session of a model before the model. Strings and arrays passed in
 * are copied or read during the call only.
 *
 * Threads. A weft_model is immutable once loaded: any number of threads may tokenize, detokenize,
 * format chats and create sessions from it at once. A weft_session is used by one thread at a time
 * (calls on the same session from two threads at once are not allowed), with one exception:
 * weft_session_abort may be called from any thread at any time. weft_last_error() is per thread. The
 * callbacks run on the thread that called the function they were given to.
 *
 * Versions. WEFT_API_VERSION_MAJOR changes when this interface changes incompatibly (it is the
 * shared library's SONAME: libweft.so.MAJOR); MINOR when something is added. weft_version() tells
 * what the loaded library implements. Parameter structs are initialised by their _init function
 * before the fields the caller cares about are set, so a struct gains fields without breaking code.
 */
#ifndef WEFT_H
#define WEFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WEFT_API_VERSION_MAJOR 1
#define WEFT_API_VERSION_MINOR 0
#define WEFT_API_VERSION_PATCH 0
/* 10000 * major + 100 * minor + patch */
#define WEFT_API_VERSION \
    (WEFT_API_VERSION_MAJOR * 10000 + WEFT_API_VERSION_MINOR * 100 + WEFT_API_VERSION_PATCH)

#if defined(WEFT_BUILDING_LIBRARY)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum weft_status {
    WEFT_OK = 0,
    WEFT_ERR_INVALID_ARGUMENT = 1, /* a NULL handle, a parameter out of range, a bad grammar or schema */
    WEFT_ERR_IO = 2,               /* a file that cannot be opened, read or written */
    WEFT_ERR_BAD_FILE = 3,         /* a model, adapter or state file that is not what it must be */
    WEFT_ERR_CONTEXT_FULL = 4,     /* a prompt that does not fit the session's context */
    WEFT_ERR_BUFFER_TOO_SMALL = 5, /* the output did not fit; the size it needs is reported */
    WEFT_ERR_ABORTED = 6,          /* weft_session_abort stopped the call */
    WEFT_ERR_NO_MEMORY = 7,
    WEFT_ERR_UNSUPPORTED = 8, /* the model cannot do this (embeddings of a decoder, a shift of bert ...) */
    WEFT_ERR_INTERNAL = 9     /* a computation failed */
} weft_status;

typedef int32_t weft_token;

typedef struct weft_model weft_model;
typedef struct weft_session weft_session;

/* The version of the library that is loaded: WEFT_API_VERSION as it was built. */
WEFT_API int weft_version(void);
/* "weft 0.1.0 (C API 1.0.0)" */
WEFT_API const char *weft_version_string(void);
/* The message of the last call on this thread that failed ("" when none has); valid until the next
 * call on this thread. */
WEFT_API const char *weft_last_error(void);
/* "WEFT_ERR_CONTEXT_FULL" ... */
WEFT_API const char *weft_status_name(weft_status status);

/* ---- models ---------------------------------------------------------------------------------- */

typedef struct weft_lora {
    const char *path; /* a LoRA adapter (GGUF) for this model */
    float scale;      /* 1: as trained */
} weft_lora;

typedef struct weft_model_params {
    bool use_mmap;        /* map the file (default) instead of reading it into memory */
    const char *device;   /* NULL or "": the CPU unless n_gpu_layers > 0; else a name `weft devices` lists */
    int32_t n_gpu_layers; /* blocks offloaded to the GPU; -1 (default): all with a GPU device, none without */
    const weft_lora *loras; /* adapters applied at run time, n_loras of them */
    size_t n_loras;
    bool quiet; /* true (default): nothing on stderr; false: the load line and placement */
} weft_model_params;

WEFT_API void weft_model_params_init(weft_model_params *params);
/* Loads the GGUF file at path (and its adapters). A file that is not a model weft can run is
 * WEFT_ERR_BAD_FILE with the reason; a missing one WEFT_ERR_IO. */
WEFT_API weft_status weft_model_load(const char *path, const weft_model_params *params, weft_model **out);
WEFT_API void weft_model_free(weft_model *model);

WEFT_API int32_t weft_model_n_vocab(const weft_model *model);
WEFT_API int32_t weft_model_n_embd(const weft_model *model);
WEFT_API int32_t weft_model_n_ctx_train(const weft_model *model);
/* An encoder (bert): it gives embeddings, not text. */
WEFT_API bool weft_model_is_encoder(const weft_model *model);
/* "llama, 5 layers, n_embd 64 ..."; valid while the model lives. */
WEFT_API const char *weft_model_describe(const weft_model *model);
/* -1 when the vocabulary has none. */
WEFT_API weft_token weft_model_token_bos(const weft_model *model);
WEFT_API weft_token weft_model_token_eos(const weft_model *model);
WEFT_API bool weft_model_token_is_eog(const weft_model *model, weft_token token);

/* ---- text ---------------------------------------------------------------------------------------- */

/* Tokenizes text[0, length). add_special: the BOS (and what else the vocabulary adds); parse_special:
 * control tokens written in the text ("<|im_end|>") become those tokens. Writes the count to *n_tokens;
 * when it exceeds capacity, nothing is written to tokens and the status is WEFT_ERR_BUFFER_TOO_SMALL
 * (call again with *n_tokens of room). */
WEFT_API weft_status weft_tokenize(const weft_model *model, const char *text, size_t length, bool add_special,
                                   bool parse_special, weft_token *tokens, size_t capacity, size_t *n_tokens);
/* The text of tokens (special: control tokens written out). Writes *length bytes and a NUL when
 * *length < capacity; else WEFT_ERR_BUFFER_TOO_SMALL with *length the bytes needed (without the NUL). */
WEFT_API weft_status weft_detokenize(const weft_model *model, const weft_token *tokens, size_t n_tokens,
                                     bool special, char *buf, size_t capacity, size_t *length);

typedef struct weft_chat_message {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} weft_chat_message;

/* The conversation as prompt text in the model's chat template (tokenizer.chat_template, rendered by
 * weft's Jinja interpreter or matched to a family), or in `template_name` when not NULL (a family name:
 * chatml, llama2, llama3, mistral-v7, phi3, gemma ... or Jinja text). add_assistant: end with the
 * start of the assistant's turn. Output as for weft_detokenize. */
WEFT_API weft_status weft_chat_apply_template(const weft_model *model, const char *template_name,
                                              const weft_chat_message *messages, size_t n_messages,
                                              bool add_assistant, char *buf, size_t capacity, size_t *length);

/* ---- sessions ------------------------------------------------------------------------------------ */

typedef struct weft_session_params {
    uint32_t n_ctx;    /* cells of the KV cache; 0 (default): the model's training context, at most 4096 */
    uint32_t n_batch;  /* most prompt tokens a decode call takes (default 512) */
    int32_t n_threads; /* threads for generating; 0 (default): the hardware's, at most 4 */
    int32_t n_threads_batch; /* threads for prompts; 0 (default): n_threads */
    bool context_shift;      /* a full context drops the oldest half and goes on (default false: stop) */
} weft_session_params;

WEFT_API void weft_session_params_init(weft_session_params *params);
/* A session: one sequence of the KV cache and what generating in it needs. Its cache is kept between
 * generate calls, so a prompt that extends the previous one decodes only the new tokens. */
WEFT_API weft_status weft_session_create(weft_model *model, const weft_session_params *params,
                                         weft_session **out);
WEFT_API void weft_session_free(weft_session *session);
WEFT_API uint32_t weft_session_n_ctx(const weft_session *session);
/* Forgets the cached tokens (the next prompt is decoded whole). */
WEFT_API weft_status weft_session_reset(weft_session *session);
/* Stops the session's running call (generate, logits, embeddings) at its next step, which then returns
 * WEFT_ERR_ABORTED; when none runs, the next one that starts. Any thread, any time. */
WEFT_API void weft_session_abort(weft_session *session);

#define WEFT_SEED_RANDOM 0xFFFFFFFFu

typedef struct weft_logit_bias {
    weft_token token;
    float bias; /* added to the token's logit; -INFINITY bans it */
} weft_logit_bias;

/* Every sampler `weft run` has, with its defaults (weft_sampling_params_init). */
typedef struct weft_sampling_params {
    float temperature;          /* 0.8; <= 0: greedy */
    int32_t top_k;              /* 40; <= 0: off */
    float top_p;                /* 0.95; 1: off */
    float min_p;                /* 0.05; 0: off */
    float typical_p;            /* 1: off */
    float top_n_sigma;          /* -1: off */
    int32_t repeat_last_n;      /* 64; 0: off, -1: the context */
    float repeat_penalty;       /* 1: off */
    float frequency_penalty;    /* 0: off */
    float presence_penalty;     /* 0: off */
    float dynatemp_range;       /* 0: off */
    float dynatemp_exponent;    /* 1 */
    float xtc_probability;      /* 0: off */
    float xtc_threshold;        /* 0.1 */
    float dry_multiplier;       /* 0: off */
    float dry_base;             /* 1.75 */
    int32_t dry_allowed_length; /* 2 */
    int32_t dry_penalty_last_n; /* -1: the context */
    const char *const
        *dry_sequence_breakers; /* NULL: the defaults (newline, ':', '"', '*'); else n of them */
    size_t n_dry_sequence_breakers;
    int32_t mirostat;     /* 0 off, 1, 2 */
    float mirostat_tau;   /* 5 */
    float mirostat_eta;   /* 0.1 */
    uint32_t seed;        /* WEFT_SEED_RANDOM (default): a random one */
    size_t min_keep;      /* 1 */
    const char *samplers; /* NULL: the default order; else "penalties;top_k;temperature" as --samplers */
    const weft_logit_bias *logit_bias;
    size_t n_logit_bias;
    const char *grammar;     /* GBNF the output must follow (root rule "root"); NULL: none */
    const char *json_schema; /* or a JSON Schema (text) the output must be valid under; "{}": any JSON */
} weft_sampling_params;

WEFT_API void weft_sampling_params_init(weft_sampling_params *params);

typedef enum weft_finish_reason {
    WEFT_FINISH_STOP = 0,     /* an end-of-generation token or a stop string */
    WEFT_FINISH_LENGTH = 1,   /* max_tokens, or the context is full */
    WEFT_FINISH_CANCELLED = 2 /* the callback returned false */
} weft_finish_reason;

typedef struct weft_generate_params {
    int32_t max_tokens; /* 128; < 0: until the end of generation or a full context */
    weft_sampling_params sampling;
    const char *const *stop; /* stop strings (generation ends before the first one found), n_stop of them */
    size_t n_stop;
    bool ignore_eos; /* end-of-generation tokens are sampled like any other */
} weft_generate_params;

WEFT_API void weft_generate_params_init(weft_generate_params *params);

/* Called with each piece of final text (valid UTF-8, never part of a stop string) and the tokens
 * sampled since the previous call; return false to stop (WEFT_FINISH_CANCELLED). */
typedef bool (*weft_stream_callback)(const char *text, size_t length, const weft_token *tokens,
                                     size_t n_tokens, void *user_data);

typedef struct weft_generate_result {
    weft_finish_reason finish;
    int32_t n_prompt_tokens;
    int32_t n_cached_tokens;    /* of the prompt, not decoded again (the session's cache) */
    int32_t n_generated_tokens; /* an end-of-generation token excluded */
    double prompt_ms;
    double generate_ms;
} weft_generate_result;

/* Decodes the prompt (after what the session's cache already holds of it) and samples up to
 * max_tokens, through the engine `weft run`, `chat` and `serve` generate with. A prompt that does not
 * fit the context is WEFT_ERR_CONTEXT_FULL, bad sampling parameters or grammar WEFT_ERR_INVALID_ARGUMENT.
 * callback may be NULL; result may be NULL. */
WEFT_API weft_status weft_generate(weft_session *session, const weft_token *prompt, size_t n_prompt,
                                   const weft_generate_params *params, weft_stream_callback callback,
                                   void *user_data, weft_generate_result *result);

/* The logits after each token of tokens, decoded as one sequence from position 0 in a context of its
 * own (the session's cache is left alone): n_tokens rows of weft_model_n_vocab floats into logits
 * (capacity floats; WEFT_ERR_BUFFER_TOO_SMALL when fewer than n_tokens * n_vocab). */
WEFT_API weft_status weft_session_logits(weft_session *session, const weft_token *tokens, size_t n_tokens,
                                         float *logits, size_t capacity);

typedef enum weft_pooling {
    WEFT_POOLING_MODEL = -1, /* the model's own (pooling_type) */
    WEFT_POOLING_NONE = 0,   /* the last token's row */
    WEFT_POOLING_MEAN = 1,
    WEFT_POOLING_CLS = 2,
    WEFT_POOLING_LAST = 3,
    WEFT_POOLING_RANK = 4 /* a reranker's scores (its classification head on the first token) */
} weft_pooling;

/* An encoder model's (bert) embedding of tokens: weft_model_n_embd floats into embedding (capacity
 * floats), pooled, scaled to unit length when normalize. A decoder model: WEFT_ERR_UNSUPPORTED.
 * A reranker (a bert with pooling rank) takes WEFT_POOLING_RANK (or WEFT_POOLING_MODEL) only: its
 * scores of tokens (a query and a document as one sequence), never normalized; embedding[0] is the
 * relevance score (capacity: at least the head's outputs, 1 for the usual reranker). */
WEFT_API weft_status weft_session_embed(weft_session *session, const weft_token *tokens, size_t n_tokens,
                                        weft_pooling pooling, bool normalize, float *embedding,
                                        size_t capacity);

/* The session's cache (its cells and the tokens they hold) as bytes: *size is set to the bytes
 * needed; they are written when they fit capacity (else WEFT_ERR_BUFFER_TOO_SMALL). */
WEFT_API weft_status weft_session_state_save(weft_session *session, uint8_t *buf, size_t capacity,
                                             size_t *size);
/* Replaces the session's cache with saved bytes; another model's state, a truncated or altered one:
 * WEFT_ERR_BAD_FILE, nothing changed. A prompt that starts with the saved tokens then decodes only the rest.
 */
WEFT_API weft_status weft_session_state_load(weft_session *session, const uint8_t *buf, size_t size);
/* The same through a file. */
WEFT_API weft_status weft_session_state_save_file(weft_session *session, const char *path);
WEFT_API weft_status weft_session_state_load_file(weft_session *session, const char *path);
/* The tokens the session's cache holds: as weft_tokenize's output. */
WEFT_API weft_status weft_session_cached_tokens(weft_session *session, weft_token *tokens, size_t capacity,
                                                size_t *n_tokens);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_H */
