// weft/server/openai_server.h — the OpenAI-style HTTP layer over the serving engine: routes
// (completions, chat, embeddings, models, tokenize, health, metrics, props, slots, the chat page),
// request reading, the admission gate and SSE streams. `weft serve` is a thin command over it;
// tests drive it in process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "weft/model/model.h"
#include "weft/serving/conversation.h"
#include "weft/serving/engine.h"
#include "weft/template/reasoning.h"

namespace weft::vision {
class clip_model;
}  // namespace weft::vision

namespace weft::server {

struct server_options {
    std::string host = "127.0.0.1";
    int port = 8080;             // 0: any free port (listen() returns the one bound)
    int32_t n_predict = 256;     // max_tokens of a request that does not say
    int32_t max_tokens_cap = 0;  // most tokens one request may ask for (0: no limit)
    std::string api_key;         // non-empty: required as a Bearer token
    int timeout_s = 600;         // read and write timeout of a connection
    size_t max_body = size_t(8) << 20;
    size_t max_queue = 256;  // the engine's, reported by /props
    int http_threads = 0;    // threads running requests (0: 4 x n_slots + 16)
    int32_t n_slots = 4;     // the engine's slots (for the default thread count)
    int32_t n_threads = 0;   // threads of an embedding model's context (0: the hardware's)
    std::string cors;        // non-empty: answer CORS preflights and allow this origin
    // HTTPS: the certificate (PEM, a chain allowed) and its private key; both or neither. A file
    // that cannot be read or a key that is not the certificate's makes listen() throw, naming it.
    std::string ssl_cert_file, ssl_key_file;
    std::string model_id;  // the id /v1/models reports; empty: the model's name
    // The nice value of the HTTP threads (the gate and the request workers), 0..19; the decode
    // threads keep the process's. Above the process's, a streamed token's HTTP work waits for a free
    // core instead of preempting a decode step, and so does a new request's (throughput against time
    // to first token on a machine with few cores; Linux: nice is per thread; elsewhere ignored).
    int http_nice = 0;
    // The vision projector (`--mmproj`) that encodes the images of chat messages; it must outlive the
    // server. Null: a request with an image is a 400.
    const vision::clip_model *mmproj = nullptr;
    // What a chat reply's thoughts become (the reference's --reasoning-format): with auto, deepseek
    // and deepseek-legacy they go to reasoning_content (weft/template/reasoning.h).
    reasoning_format reasoning = reasoning_format::automatic;
    // `--reranking`: /v1/rerank answers (the model must be a reranker); without it, 501 as the reference
    bool reranking = false;
};

// One HTTP server. It listens before the model is loaded (/health says "loading model", every
// other route 503 with Retry-After) and serves once set_ready() hands it the engine.
class openai_server {
  public:
    explicit openai_server(server_options opt);
    ~openai_server();  // stops serving and joins its threads
    openai_server(const openai_server &) = delete;
    openai_server &operator=(const openai_server &) = delete;

    // Binds host:port (serving HTTPS with ssl_cert_file and ssl_key_file); returns the port bound.
    // Throws weft::error naming the address, or the certificate or key file, on failure.
    int listen();
    // Serves on background threads until stop().
    void start();
    // The model, engine and chat template the routes run on (they must outlive the server, or
    // stop() must come first).
    void set_ready(const model &m, serving::engine &eng, serving::template_choice tmpl,
                   std::string template_source);
    // Cancels every running request (their streams end at once).
    void cancel_all();
    // Stops accepting and ends the serving threads (safe from any thread; wait() returns).
    void stop();
    // Blocks until the server has stopped.
    void wait();

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace weft::server
