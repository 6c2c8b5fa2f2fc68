// src/server/native_api.cpp — see native_api.h.
#include "server/native_api.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <utility>

#include "server/http_gate.h"
#include "weft/sampling/sampling.h"
#include "weft/serving/text.h"

namespace weft::server {
namespace {

using steady = std::chrono::steady_clock;

std::vector<token> tokenize_or_refuse(const vocab &v, const std::string &text, bool add_special,
                                      bool parse_special, const char *what) {
    try {
        return v.tokenize(text, add_special, parse_special);
    } catch (const error &e) {
        throw request_error(std::string("'") + what + "' cannot be tokenized: " + e.what());
    }
}

// The reference's "mixed" prompt: a string, or an array of strings and token ids joined in order
// (only the first piece gets the vocabulary's BOS when add_special).
std::vector<token> tokenize_mixed(const vocab &v, const json &input, bool add_special, bool parse_special,
                                  const char *what) {
    if (input.is_string())
        return tokenize_or_refuse(v, input.get<std::string>(), add_special, parse_special, what);
    if (!input.is_array())
        throw request_error(std::string("'") + what +
                            "' must be a string, an array of token ids or a mixed array of strings and token "
                            "ids, got " +
                            json_kind(input));
    std::vector<token> out;
    bool first = true;
    for (const json &piece : input) {
        if (piece.is_string()) {
            const std::vector<token> t =
                tokenize_or_refuse(v, piece.get<std::string>(), first && add_special, parse_special, what);
            out.insert(out.end(), t.begin(), t.end());
        } else if (piece.is_number_integer()) {
            out.push_back(token_value(piece, std::string("'") + what + "' token ids", v.n_tokens()));
        } else {
            throw request_error(std::string("'") + what + "' arrays hold strings and token ids, got " +
                                json_kind(piece));
        }
        first = false;
    }
    return out;
}

// The reference's prompts of /completion: one prompt (a string, token ids, or strings and ids
// mixed), or an array of such prompts.
std::vector<std::vector<token>> read_native_prompts(const vocab &v, const json &body) {
    const auto prompt = body.find("prompt");
    if (prompt == body.end() || prompt->is_null())
        throw request_error("'prompt' is required: a string, token ids, or an array of prompts");
    const auto is_single = [](const json &p) {
        return p.is_string() ||
               (p.is_array() && !p.empty() &&
                std::any_of(p.begin(), p.end(), [](const json &e) { return e.is_number_integer(); }));
    };
    if (prompt->is_array() && prompt->empty()) throw request_error("'prompt' must not be empty");
    if (is_single(*prompt)) return {tokenize_mixed(v, *prompt, true, true, "prompt")};
    if (!prompt->is_array())
        throw request_error(
            "'prompt' must be a string, a list of tokens, a list of mixed strings and tokens, or an array of "
            "those, got " +
            json_kind(*prompt));
    if (prompt->size() > max_choices_per_request)
        throw request_error("'prompt' holds " + std::to_string(prompt->size()) + " prompts; at most " +
                            std::to_string(max_choices_per_request) + " are taken in one request");
    std::vector<std::vector<token>> out;
    for (const json &p : *prompt) {
        if (!is_single(p))
            throw request_error(
                "'prompt' elements must be strings, lists of tokens or lists of mixed strings and tokens, "
                "got " +
                json_kind(p));
        out.push_back(tokenize_mixed(v, p, true, true, "prompt"));
    }
    return out;
}

// What the native request asks for beyond an OpenAI completion request.
struct native_request {
    std::shared_ptr<parsed_request> parsed;
    bool return_tokens = false;
    int32_t n_probs = 0;
};

// Reads a native body whose prompts are already tokens: the OpenAI reader takes its sampling
// fields (temperature, top_k, ..., samplers, grammar, json_schema, stop, seed, logit_bias, n_keep,
// lora, stream); n_predict, n_probs, ignore_eos, id_slot and return_tokens are the native ones.
// cache_prompt, post_sampling_probs, t_max_predict_ms, n_indent, n_discard, min_keep,
// timings_per_token and response_fields are taken and ignored (weft always reuses a slot's cache).
native_request read_native(native_host &host, const json &body, std::vector<std::vector<token>> prompts) {
    json oai = body;
    for (const char *own : {"logprobs", "top_logprobs", "echo", "suffix", "n", "prompt", "stream_options"})
        oai.erase(own);
    if (auto n = integer_field(body, "n_predict")) {
        if (*n < -1 || *n > (1 << 20))
            throw request_error("'n_predict' must be in [-1, 1048576] (-1: the server's --n-predict), got " +
                                std::to_string(*n));
        oai.erase("max_completion_tokens");
        if (*n >= 0)
            oai["max_tokens"] = *n;
        else
            oai.erase("max_tokens");
    }
    json arrays = json::array();
    for (const auto &p : prompts) arrays.push_back(p);
    oai["prompt"] = std::move(arrays);
    native_request r;
    r.parsed = std::make_shared<parsed_request>(host.read_openai(oai, false));
    parsed_request &p = *r.parsed;
    if (auto n = integer_field(body, "n_probs")) {
        if (*n < 0 || *n > 100)
            throw request_error("'n_probs' must be in [0, 100], got " + std::to_string(*n));
        r.n_probs = int32_t(*n);
    }
    p.logprobs = p.base.logprobs = r.n_probs > 0;
    p.top_logprobs = p.base.n_probs = r.n_probs;
    if (auto v = bool_field(body, "ignore_eos")) p.base.ignore_eos = *v;
    if (auto v = bool_field(body, "return_tokens")) r.return_tokens = *v;
    bool_field(body, "cache_prompt");  // checked, not used
    if (auto slot = integer_field(body, "id_slot")) {
        const int32_t n_slots = host.served_engine().n_slots();
        if (*slot < -1 || *slot >= n_slots)
            throw request_error("'id_slot' must be -1 (any) or a slot in [0, " + std::to_string(n_slots) +
                                "), got " + std::to_string(*slot));
        p.base.slot = int32_t(*slot);
    }
    return r;
}

json bytes_of(const std::string &s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
}

}  // namespace

json token_probabilities_json(const vocab &v, const std::vector<serving::generated_token> &tokens) {
    json out = json::array();
    for (const auto &g : tokens) {
        const std::string piece = v.token_to_piece(g.id, false);
        json top = json::array();
        for (const auto &t : g.top) {
            const std::string tp = v.token_to_piece(t.id, false);
            top.push_back({{"id", t.id},
                           {"token", serving::utf8_sanitize(tp)},
                           {"bytes", bytes_of(tp)},
                           {"logprob", t.logprob}});
        }
        out.push_back({{"id", g.id},
                       {"token", serving::utf8_sanitize(piece)},
                       {"bytes", bytes_of(piece)},
                       {"logprob", g.logprob},
                       {"top_logprobs", std::move(top)}});
    }
    return out;
}

namespace {

json token_ids(const std::vector<serving::generated_token> &tokens) {
    json ids = json::array();
    for (const auto &g : tokens) ids.push_back(g.id);
    return ids;
}

// The sampling settings a request ran with, in the reference's names.
json generation_settings(const parsed_request &p, int32_t n_probs, bool stream) {
    const serving::request &r = p.base;
    const sampling_params &s = r.sampling;
    json samplers = json::array();
    for (sampler_type t : s.samplers) samplers.push_back(sampler_type_name(t));
    json bias = json::array();
    for (const auto &[id, b] : s.logit_bias) bias.push_back({{"token", id}, {"bias", b}});
    return {{"seed", s.seed},
            {"temperature", s.temp},
            {"dynatemp_range", s.dynatemp_range},
            {"dynatemp_exponent", s.dynatemp_exponent},
            {"top_k", s.top_k},
            {"top_p", s.top_p},
            {"min_p", s.min_p},
            {"top_n_sigma", s.top_n_sigma},
            {"xtc_probability", s.xtc_probability},
            {"xtc_threshold", s.xtc_threshold},
            {"typical_p", s.typical_p},
            {"repeat_last_n", s.penalty_last_n},
            {"repeat_penalty", s.penalty_repeat},
            {"presence_penalty", s.penalty_present},
            {"frequency_penalty", s.penalty_freq},
            {"dry_multiplier", s.dry_multiplier},
            {"dry_base", s.dry_base},
            {"dry_allowed_length", s.dry_allowed_length},
            {"dry_penalty_last_n", s.dry_penalty_last_n},
            {"dry_sequence_breakers", s.dry_sequence_breakers},
            {"mirostat", s.mirostat},
            {"mirostat_tau", s.mirostat_tau},
            {"mirostat_eta", s.mirostat_eta},
            {"stop", r.stop},
            {"max_tokens", r.max_tokens},
            {"n_predict", r.max_tokens},
            {"n_keep", r.n_keep},
            {"ignore_eos", r.ignore_eos},
            {"stream", stream},
            {"logit_bias", std::move(bias)},
            {"n_probs", n_probs},
            {"min_keep", s.min_keep},
            {"grammar", s.grammar},
            {"samplers", std::move(samplers)}};
}

const char *stop_type_of(const serving::completion &c) {
    if (c.finish == serving::finish_reason::length) return "limit";
    if (c.finish != serving::finish_reason::stop) return "none";
    return c.stop_word.empty() ? "eos" : "word";
}

json timings_of(const serving::completion &c) {
    const int64_t prompt_n = c.n_prompt - c.n_cached;
    const int64_t predicted_n = int64_t(c.tokens.size());
    auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / double(n) : 0.0; };
    auto per_second = [](double ms, int64_t n) { return ms > 0 ? 1000.0 * double(n) / ms : 0.0; };
    return {{"cache_n", c.n_cached},
            {"prompt_n", prompt_n},
            {"prompt_ms", c.prompt_ms},
            {"prompt_per_token_ms", per_token(c.prompt_ms, prompt_n)},
            {"prompt_per_second", per_second(c.prompt_ms, prompt_n)},
            {"predicted_n", predicted_n},
            {"predicted_ms", c.generate_ms},
            {"predicted_per_token_ms", per_token(c.generate_ms, predicted_n)},
            {"predicted_per_second", per_second(c.generate_ms, predicted_n)}};
}

// The whole answer of one prompt (also the last chunk of a stream, whose content is "").
json final_json(native_host &host, const native_request &r, size_t k, const serving::completion &c,
                const std::string &content) {
    const parsed_request &p = *r.parsed;
    const vocab &v = host.served_model().vocab();
    const std::vector<token> &prompt = p.prompts[k];
    json out = {{"index", k},
                {"content", content},
                {"tokens", r.return_tokens ? token_ids(c.tokens) : json::array()},
                {"id_slot", c.slot},
                {"stop", true},
                {"model", host.served_model_id()},
                {"tokens_predicted", c.tokens.size()},
                {"tokens_evaluated", c.n_prompt},
                {"generation_settings", generation_settings(p, r.n_probs, p.stream)},
                {"prompt", serving::utf8_sanitize(v.detokenize(prompt, true))},
                {"has_new_line", c.text.find('\n') != std::string::npos},
                {"truncated", c.n_shifts > 0},
                {"stop_type", stop_type_of(c)},
                {"stopping_word", c.stop_word},
                {"tokens_cached", c.n_prompt + int64_t(c.tokens.size()) - (c.tokens.empty() ? 0 : 1)},
                {"timings", timings_of(c)}};
    if (r.n_probs > 0 && !p.stream) out["completion_probabilities"] = token_probabilities_json(v, c.tokens);
    return out;
}

void answer_whole(native_host &host, const native_request &r,
                  std::vector<std::shared_ptr<serving::job>> &jobs, httplib::Response &res) {
    json out = json::array();
    try {
        for (size_t k = 0; k < jobs.size(); ++k) {
            const serving::completion c = wait_whole(*jobs[k]);
            out.push_back(final_json(host, r, k, c, c.text));
        }
    } catch (const request_error &) {
        for (auto &j : jobs) j->cancel();
        throw;
    }
    res.set_content((out.size() == 1 ? out[0] : out).dump(), "application/json");
}

// SSE chunks as the reference sends them: each piece of text of each prompt as {"index",
// "content", "tokens", "stop": false, ...}, then each prompt's final object (content ""), no
// [DONE]; a job that fails: {"error": ...}. A queued request writes only SSE comments.
void answer_stream(native_host &host, native_request r, std::vector<std::shared_ptr<serving::job>> jobs,
                   httplib::Response &res) {
    res.set_header("Cache-Control", "no-cache");
    auto shared_jobs = std::make_shared<std::vector<std::shared_ptr<serving::job>>>(std::move(jobs));
    res.set_chunked_content_provider(
        "text/event-stream", [&host, r, shared_jobs](size_t, httplib::DataSink &sink) {
            std::vector<std::shared_ptr<serving::job>> &jobs = *shared_jobs;
            auto write = [&sink](const std::string &s) {
                return sink.is_writable() && sink.write(s.data(), s.size());
            };
            auto send = [&](const json &event) { return write("data: " + event.dump() + "\n\n"); };
            auto cancel_all = [&] {
                for (auto &j : jobs) j->cancel();
                return false;
            };
            const vocab &v = host.served_model().vocab();
            std::vector<bool> done(jobs.size(), false);
            std::vector<size_t> predicted(jobs.size(), 0);
            std::vector<std::string> text(jobs.size());
            size_t n_done = 0;
            auto last_write = steady::now();
            while (n_done < jobs.size()) {
                bool any = false;
                for (size_t k = 0; k < jobs.size(); ++k) {
                    serving::event ev;
                    while (!done[k] && jobs[k]->poll_event(ev)) {
                        any = true;
                        predicted[k] += ev.tokens.size();
                        text[k] += ev.text;
                        if (!ev.text.empty() || !ev.tokens.empty()) {
                            json chunk = {{"index", k},
                                          {"content", ev.text},
                                          {"tokens", r.return_tokens ? token_ids(ev.tokens) : json::array()},
                                          {"stop", false},
                                          {"id_slot", -1},
                                          {"tokens_predicted", predicted[k]},
                                          {"tokens_evaluated", r.parsed->prompts[k].size()}};
                            if (r.n_probs > 0)
                                chunk["completion_probabilities"] = token_probabilities_json(v, ev.tokens);
                            if (!send(chunk)) return cancel_all();
                        }
                        if (!ev.final) continue;
                        const serving::completion c = jobs[k]->result();
                        if (c.finish == serving::finish_reason::error) {
                            send(error_body_for(api_kind::openai, c.error, 500));
                            cancel_all();
                            sink.done();
                            return true;
                        }
                        if (!send(final_json(host, r, k, c, ""))) return cancel_all();
                        done[k] = true;
                        ++n_done;
                    }
                }
                if (any) {
                    last_write = steady::now();
                    continue;
                }
                if (steady::now() - last_write >= std::chrono::seconds(2)) {
                    if (!write(": waiting\n\n")) return cancel_all();
                    last_write = steady::now();
                }
                for (size_t k = 0; k < jobs.size(); ++k)
                    if (!done[k]) {
                        jobs[k]->wait_ready(std::chrono::milliseconds(50));
                        break;
                    }
            }
            sink.done();
            return true;
        });
}

void run_native(native_host &host, native_request r, httplib::Response &res) {
    std::vector<std::shared_ptr<serving::job>> jobs = host.submit_jobs(*r.parsed);
    if (r.parsed->stream)
        answer_stream(host, std::move(r), std::move(jobs), res);
    else
        answer_whole(host, r, jobs, res);
}

void refuse_embedding_model(const native_host &host) {
    if (host.embeds())
        throw request_error("the model '" + host.served_model_id() + "' produces embeddings, not text");
}

}  // namespace

std::vector<token> infill_prompt(const vocab &v, infill_parts parts, const infill_limits &limits) {
    const fim_tokens &fim = v.fim();
    std::vector<token> extra;
    auto append = [](std::vector<token> &to, const std::vector<token> &from) {
        to.insert(to.end(), from.begin(), from.end());
    };
    if (fim.rep != token_null) {
        extra.push_back(fim.rep);
        append(extra, v.tokenize("myproject\n", false, false));
    }
    for (const auto &[filename, text] : parts.extra) {
        if (fim.sep != token_null) {
            extra.push_back(fim.sep);
            append(extra, v.tokenize(filename + "\n", false, false));
        } else {
            append(extra, v.tokenize("\n\n--- snippet ---\n\n", false, false));
        }
        append(extra, v.tokenize(text, false, false));
    }
    if (fim.sep != token_null) {
        extra.push_back(fim.sep);
        append(extra, v.tokenize("filename\n", false, false));
    }
    // prefix : suffix = 3 : 1 of a batch; the extra chunks fill what the context has beyond a batch
    // and twice the tokens to predict (their last tokens: the nearest files)
    const int64_t n_batch = limits.n_batch;
    const int64_t n_prefix = std::min<int64_t>(int64_t(parts.prefix.size()), 3 * (n_batch / 4));
    const int64_t n_suffix = std::min<int64_t>(
        int64_t(parts.suffix.size()), std::max<int64_t>(0, n_batch / 4 - (2 + int64_t(parts.prompt.size()))));
    const int64_t n_extra = std::min<int64_t>(
        std::max<int64_t>(0, int64_t(limits.n_ctx) - n_batch - 2 * int64_t(limits.n_predict)),
        int64_t(extra.size()));

    std::vector<token> prefix = {fim.pre};
    prefix.insert(prefix.end(), parts.prefix.end() - n_prefix, parts.prefix.end());
    append(prefix, parts.prompt);
    std::vector<token> suffix = {fim.suf};
    suffix.insert(suffix.end(), parts.suffix.begin(), parts.suffix.begin() + n_suffix);

    std::vector<token> out(extra.end() - n_extra, extra.end());
    if (v.add_bos() && v.bos() != token_null) out.push_back(v.bos());
    append(out, limits.spm_order ? suffix : prefix);
    append(out, limits.spm_order ? prefix : suffix);
    out.push_back(fim.mid);
    return out;
}

void native_completion(native_host &host, const httplib::Request &req, httplib::Response &res) {
    refuse_embedding_model(host);
    const json body = json_object_body(req.body);
    run_native(host, read_native(host, body, read_native_prompts(host.served_model().vocab(), body)), res);
}

void native_infill(native_host &host, const httplib::Request &req, httplib::Response &res) {
    refuse_embedding_model(host);
    const vocab &v = host.served_model().vocab();
    const fim_tokens &fim = v.fim();
    if (!fim.can_infill()) {
        std::string missing;
        if (fim.pre == token_null) missing += "prefix token is missing. ";
        if (fim.suf == token_null) missing += "suffix token is missing. ";
        if (fim.mid == token_null) missing += "middle token is missing. ";
        throw request_error("Infill is not supported by this model: " + missing, 501);
    }
    const json body = json_object_body(req.body);
    infill_parts parts;
    for (const char *name : {"input_prefix", "input_suffix"}) {
        const auto it = body.find(name);
        if (it == body.end() || it->is_null())
            throw request_error(std::string("'") + name + "' is required: a string");
        (std::string(name) == "input_prefix" ? parts.prefix : parts.suffix) =
            tokenize_mixed(v, *it, false, false, name);
    }
    if (const auto prompt = field(body, "prompt", json_is_string, "a string"))
        parts.prompt = tokenize_or_refuse(v, prompt->get<std::string>(), false, true, "prompt");
    if (const auto extra = field(body, "input_extra", json_is_array,
                                 "an array of {\"filename\": string, \"text\": string}")) {
        for (size_t i = 0; i < extra->size(); ++i) {
            const json &chunk = (*extra)[i];
            const std::string at = "input_extra[" + std::to_string(i) + "]";
            if (!chunk.is_object())
                throw request_error("'" + at + "' must be an object {\"filename\", \"text\"}");
            const auto text = chunk.find("text");
            if (text == chunk.end() || !text->is_string())
                throw request_error("'" + at + ".text' is required: a string");
            parts.extra.emplace_back(string_field_or(chunk, "filename", "tmp", at), text->get<std::string>());
        }
    }
    infill_limits limits;
    limits.n_batch = int32_t(host.served_engine().context().n_batch());
    limits.n_predict = host.default_n_predict();
    limits.n_ctx = int32_t(host.served_engine().n_ctx_slot());
    run_native(host, read_native(host, body, {infill_prompt(v, std::move(parts), limits)}), res);
}

void native_apply_template(native_host &host, const httplib::Request &req, httplib::Response &res) {
    refuse_embedding_model(host);
    res.set_content(json{{"prompt", host.chat_prompt_text(req.body)}}.dump(), "application/json");
}

}  // namespace weft::server
