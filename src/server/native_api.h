// src/server/native_api.h — the reference server's own routes beside the OpenAI ones: POST
// /completion (its native completion shape: content, tokens, stop_type, timings, ... and SSE chunks
// without [DONE]), POST /infill (fill-in-the-middle with the model's FIM tokens) and POST
// /apply-template (a chat body's prompt text). Requests are read as /v1/completions and
// /v1/chat/completions read theirs (openai_request.h) and run on the same engine.
#pragma once

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/api_common.h"
#include "weft/vocab/vocab.h"

namespace weft::server {

// What the native routes need of the server beyond what the other APIs borrow.
class native_host : public generation_host {
  public:
    // A chat body's prompt text (openai_request_reader::render_prompt); throws request_error.
    virtual std::string chat_prompt_text(const std::string &body_text) const = 0;
    // The jobs of every prompt of the request, queued in order (a full queue: request_error 503,
    // none queued).
    virtual std::vector<std::shared_ptr<serving::job>> submit_jobs(const parsed_request &p) = 0;
    // --n-predict: the tokens a request that does not say may generate.
    virtual int32_t default_n_predict() const = 0;
};

// Generated tokens with their log-probabilities and most likely alternatives, as the reference's
// completion_probabilities and OpenAI's chat logprobs.content list them: {"id", "token", "bytes",
// "logprob", "top_logprobs": [{"id", "token", "bytes", "logprob"}]}.
json token_probabilities_json(const vocab &v, const std::vector<serving::generated_token> &tokens);

void native_completion(native_host &host, const httplib::Request &req, httplib::Response &res);
void native_infill(native_host &host, const httplib::Request &req, httplib::Response &res);
void native_apply_template(native_host &host, const httplib::Request &req, httplib::Response &res);

// The pieces of an /infill request, tokenized: input_prefix and input_suffix (no special tokens
// added, none parsed), the prompt that follows the prefix (control tokens parsed), and the
// input_extra chunks as (filename, text).
struct infill_parts {
    std::vector<token> prefix, suffix, prompt;
    std::vector<std::pair<std::string, std::string>> extra;
};

// How much of each piece the prompt takes, as the reference takes it: the prefix's last
// 3/4 n_batch tokens, the suffix's first n_batch/4 - 2 - prompt tokens, and of the extra chunks'
// tokens the last n_ctx - n_batch - 2 n_predict (n_predict: the server's default, -1 counts as
// -1 there too).
struct infill_limits {
    int32_t n_batch = 2048;
    int32_t n_predict = -1;
    int32_t n_ctx = 4096;    // a slot's
    bool spm_order = false;  // suffix before prefix (the reference's --spm-infill)
};

// The FIM prompt of the reference's repo-level pattern:
//   [rep]myproject\n [sep]file\n text ... [sep]filename\n [BOS] [pre]prefix prompt [suf]suffix [mid]
// (without rep/sep tokens the extra chunks are joined by "\n\n--- snippet ---\n\n"; BOS when the
// vocabulary adds one). The vocabulary must have pre, suf and mid (fim_tokens::can_infill).
std::vector<token> infill_prompt(const vocab &v, infill_parts parts, const infill_limits &limits);

}  // namespace weft::server
