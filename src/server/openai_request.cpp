// src/server/openai_request.cpp — OpenAI request bodies read and checked (see openai_request.h).
#include "server/openai_request.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <span>
#include <utility>

#include "server/image_parts.h"
#include "server/tool_calls.h"
#include "weft/grammar/grammar.h"
#include "weft/grammar/json_schema.h"
#include "weft/model/lora.h"
#include "weft/sampling/sampling.h"
#include "weft/template/chat_request.h"
#include "weft/template/jinja.h"
#include "weft/vision/clip.h"
#include "weft/vision/image.h"
#include "weft/vision/media_prompt.h"

namespace weft::server {

std::string json_kind(const json &v) {
    if (v.is_number() || v.is_boolean()) return v.dump();
    return v.type_name();
}

std::optional<double> number_field(const json &body, const char *name) {
    const auto v = field(
        body, name, [](const json &j) { return j.is_number(); }, "a number");
    return v ? std::optional<double>(v->get<double>()) : std::nullopt;
}

int64_t integer_value(const json &j, const std::string &what) {
    if (!j.is_number_integer()) throw request_error(what + " must be an integer, got " + json_kind(j));
    if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX))
        throw request_error(what + " is out of range: " + j.dump());
    return j.get<int64_t>();
}

std::optional<int64_t> integer_field(const json &body, const char *name) {
    const auto v = field(
        body, name, [](const json &j) { return j.is_number_integer(); }, "an integer");
    return v ? std::optional<int64_t>(integer_value(*v, std::string("'") + name + "'")) : std::nullopt;
}

token token_value(const json &j, const std::string &what, int32_t n_vocab) {
    const int64_t id = integer_value(j, what);
    if (id < 0 || id >= n_vocab)
        throw request_error(what + ": token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(n_vocab) + ")");
    return token(id);
}

std::optional<bool> bool_field(const json &body, const char *name) {
    const auto v = field(
        body, name, [](const json &j) { return j.is_boolean(); }, "true or false");
    return v ? std::optional<bool>(v->get<bool>()) : std::nullopt;
}

std::string message_content(const json &content, size_t index, std::vector<std::string> *images) {
    const std::string where = "'messages[" + std::to_string(index) + "].content'";
    if (content.is_null()) return {};
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array())
        throw request_error(where + " must be a string or an array of parts, got " + json_kind(content));
    std::string text;
    for (const json &part : content) {
        const auto type = part.is_object() ? part.find("type") : part.end();
        const auto part_text = part.is_object() ? part.find("text") : part.end();
        if (type != part.end() && *type == "image_url") {
            if (!images)
                throw request_error(where +
                                    ": an image_url part, but this server has no vision projector (start it "
                                    "with --mmproj FILE)");
            const auto url = part.find("image_url");
            if (url == part.end())
                throw request_error(where + ": an image_url part needs 'image_url': {\"url\": ...}");
            images->push_back(image_url_bytes(*url, where));
            text += vision::image_marker;
            continue;
        }
        if (type == part.end() || *type != "text" || part_text == part.end() || !part_text->is_string())
            throw request_error(
                where +
                ": only parts of the form {\"type\": \"text\", \"text\": \"...\"} and "
                "{\"type\": \"image_url\", \"image_url\": {\"url\": \"data:...\"}} are supported");
        text += part_text->get<std::string>();
    }
    return text;
}

std::vector<chat_message> read_messages(const json &body, std::vector<std::string> *images) {
    const auto messages = field(
        body, "messages", [](const json &j) { return j.is_array(); }, "an array");
    if (!messages) throw request_error("'messages' is required: an array of {\"role\", \"content\"} objects");
    if (messages->empty()) throw request_error("'messages' is empty");
    std::vector<chat_message> out;
    for (size_t i = 0; i < messages->size(); ++i) {
        const json &m = (*messages)[i];
        const std::string where = "'messages[" + std::to_string(i) + "]'";
        if (!m.is_object()) throw request_error(where + " must be an object, got " + json_kind(m));
        const auto role = m.find("role");
        if (role == m.end() || !role->is_string()) throw request_error(where + " needs a string 'role'");
        const auto content = m.find("content");
        if (content == m.end()) throw request_error(where + " needs a 'content'");
        out.push_back({role->get<std::string>(), message_content(*content, i, images)});
    }
    return out;
}

struct openai_request_reader::impl {
    struct limits {
        int32_t n_predict;
        int32_t max_tokens_cap;
        size_t n_lora;
        const vision::clip_model *mmproj;
        int n_threads;
        int64_t n_ctx_slot;  // 0: not checked here
    };
    impl(const model &m, const template_choice &tmpl, limits l) : model_(&m), template_(tmpl), limits_(l) {}

    // An empty prompt starts from BOS; its length and token ids are checked by the engine's submit.
    std::vector<token> prompt_or_bos(std::vector<token> tokens) const {
        if (tokens.empty()) {
            if (model_->vocab().bos() == token_null)
                throw request_error("the prompt is empty and the model has no BOS token to start from");
            tokens.push_back(model_->vocab().bos());
        }
        return tokens;
    }

    std::vector<token> tokenize_text(const std::string &text, std::span<const text_span> literal = {}) const {
        try {
            return model_->vocab().tokenize(text, true, true, literal);
        } catch (const error &e) {
            throw request_error(std::string("the prompt cannot be tokenized: ") + e.what());
        }
    }

    // The chat prompt with each image's rows where its part left a marker: the text tokenized around
    // the images' places first, so that a prompt the context cannot hold is refused before any image
    // is decoded; then each image decoded within the projector's limits (a bad one is a 400 naming it)
    // and encoded, at most max_images_at_once in the whole server at a time (each costs up to ~115 MB
    // while it decodes; more requests with images wait their turn).
    std::vector<token> encode_images(const std::string &prompt, std::span<const text_span> contents,
                                     const std::vector<std::string> &images,
                                     std::vector<serving::embd_chunk> &media) const {
        if (images.size() > max_images_per_request)
            throw request_error("'messages' hold " + std::to_string(images.size()) + " images; at most " +
                                std::to_string(max_images_per_request) + " are taken in one request");
        const int32_t n_image_tokens = int32_t(limits_.mmproj->n_image_tokens());
        const std::vector<int32_t> n_tokens(images.size(), n_image_tokens);
        vision::marked_prompt marked;
        try {
            marked = vision::tokenize_with_markers(model_->vocab(), prompt, n_tokens, true, contents);
        } catch (const error &e) {
            throw request_error(std::string("'messages': ") + e.what());
        }
        if (limits_.n_ctx_slot > 0 && int64_t(marked.tokens.size()) > limits_.n_ctx_slot)
            throw request_error("the prompt is " + std::to_string(marked.tokens.size()) +
                                " tokens with its " + std::to_string(images.size()) + " images (" +
                                std::to_string(n_image_tokens) + " tokens each); a slot's context holds " +
                                std::to_string(limits_.n_ctx_slot));
        const vision::image_limits image_limits =
            vision::image_limits_for_encoder(limits_.mmproj->hparams().image_size);
        for (size_t i = 0; i < images.size(); ++i) {
            const std::string name = "image " + std::to_string(i + 1) + " of the request";
            serving::embd_chunk c;
            image_turn turn(*this);
            try {
                const vision::rgb_image img = vision::image_decode(
                    std::span<const uint8_t>(reinterpret_cast<const uint8_t *>(images[i].data()),
                                             images[i].size()),
                    name, image_limits);
                c.embd = limits_.mmproj->encode_image(img, limits_.n_threads);
            } catch (const vision::image_error &e) {
                throw request_error(e.what());
            }
            c.n_tokens = n_image_tokens;
            c.at = marked.image_at[i];
            media.push_back(std::move(c));
        }
        return marked.tokens;
    }

    // One image's decoding and encoding: waits while max_images_at_once others are under way.
    class image_turn {
      public:
        explicit image_turn(const impl &owner) : owner_(owner) {
            std::unique_lock lock(owner_.images_mutex_);
            owner_.image_turn_free_.wait(lock, [&] { return owner_.images_under_way_ < max_images_at_once; });
            ++owner_.images_under_way_;
        }
        ~image_turn() {
            {
                std::lock_guard lock(owner_.images_mutex_);
                --owner_.images_under_way_;
            }
            owner_.image_turn_free_.notify_one();
        }
        image_turn(const image_turn &) = delete;
        image_turn &operator=(const image_turn &) = delete;

      private:
        const impl &owner_;
    };

    static void check_choices(size_t n_prompts, int32_t n) {
        if (n_prompts * size_t(n) > max_choices_per_request)
            throw request_error("the request asks for " + std::to_string(n_prompts) + " prompts x 'n' " +
                                std::to_string(n) + " = " + std::to_string(n_prompts * size_t(n)) +
                                " choices; at most " + std::to_string(max_choices_per_request) +
                                " are taken in one request");
    }

    // OpenAI's prompt: a string, an array of strings, an array of token ids, or an array of such arrays.
    // text_bytes: each prompt's length as text (the string given, or the ids' text).
    std::vector<std::vector<token>> read_prompts(const json &body, std::vector<size_t> &text_bytes) const {
        const auto prompt = field(
            body, "prompt", [](const json &j) { return j.is_string() || j.is_array(); },
            "a string, an array of strings, an array of token ids or an array of such arrays");
        if (!prompt) throw request_error("'prompt' is required: a string (or an array of prompts)");
        std::vector<std::vector<token>> out;
        const int32_t n_vocab = model_->vocab().n_tokens();
        auto token_list = [&](const json &arr) {
            std::vector<token> t;
            for (const json &v : arr) t.push_back(token_value(v, "'prompt' token ids", n_vocab));
            return t;
        };
        if (prompt->is_string()) {
            out.push_back(tokenize_text(prompt->get<std::string>()));
            text_bytes.push_back(prompt->get_ref<const std::string &>().size());
        } else if (!prompt->empty() && (*prompt)[0].is_number_integer()) {
            out.push_back(token_list(*prompt));
            text_bytes.push_back(model_->vocab().detokenize(out.back()).size());
        } else {
            if (prompt->empty()) throw request_error("'prompt' is an empty array");
            for (const json &p : *prompt) {
                if (p.is_string()) {
                    out.push_back(tokenize_text(p.get<std::string>()));
                    text_bytes.push_back(p.get_ref<const std::string &>().size());
                } else if (p.is_array()) {
                    out.push_back(token_list(p));
                    text_bytes.push_back(model_->vocab().detokenize(out.back()).size());
                } else
                    throw request_error(
                        "'prompt' array elements must be strings or arrays of token ids, got " +
                        json_kind(p));
            }
        }
        for (auto &t : out) t = prompt_or_bos(std::move(t));
        return out;
    }

    // OpenAI's object {"token id": bias} or the array form [[id, bias], ...] (llama-server's, where
    // false bans a token). A key is a token id written canonically (decimal digits, no sign, no
    // leading zero: "+10" or "010" is refused rather than guessed at); a bias is a finite number
    // (booleans, strings and values beyond a float are refused).
    std::vector<std::pair<token, float>> read_logit_bias(const json &body) const {
        std::vector<std::pair<token, float>> out;
        const auto lb = field(
            body, "logit_bias", [](const json &j) { return j.is_object() || j.is_array(); },
            "an object {\"token id\": bias} or an array of [id, bias] pairs");
        if (!lb) return out;
        const int32_t n_vocab = model_->vocab().n_tokens();
        auto add = [&](int64_t id, const json &bias, bool false_bans) {
            if (id < 0 || id >= n_vocab)
                throw request_error("'logit_bias': token id " + std::to_string(id) +
                                    " is outside the vocabulary");
            if (false_bans && bias.is_boolean() && !bias.get<bool>()) {
                out.push_back({token(id), -std::numeric_limits<float>::infinity()});
                return;
            }
            if (!bias.is_number())
                throw request_error("'logit_bias' values must be numbers" +
                                    std::string(false_bans ? " (or false)" : "") + ", got " +
                                    json_kind(bias));
            const double value = bias.get<double>();
            if (!std::isfinite(float(value)))
                throw request_error("'logit_bias': the bias of token " + std::to_string(id) +
                                    " is not a finite float: " + bias.dump());
            out.push_back({token(id), float(value)});
        };
        if (lb->is_object()) {
            for (const auto &[key, bias] : lb->items()) {
                const bool canonical =
                    !key.empty() && key.size() <= 10 &&
                    std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                    (key == "0" || key[0] != '0');
                if (!canonical)
                    throw request_error(
                        "'logit_bias' keys must be token ids in decimal digits (no sign, "
                        "space or leading zero), got " +
                        quoted(key, 40));
                add(std::stoll(key), bias, false);
            }
        } else {
            for (const json &pair : *lb) {
                if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer())
                    throw request_error("'logit_bias' array entries must be [token id, bias]");
                add(integer_value(pair[0], "'logit_bias' token id"), pair[1], true);
            }
        }
        return out;
    }

    // The established server's fields for the samplers beyond OpenAI's; ranges are checked with the
    // rest of the sampling parameters.
    static void read_sampler_fields(const json &body, sampling_params &s) {
        static const std::pair<const char *, float sampling_params::*> numbers[] = {
            {"typical_p", &sampling_params::typical_p},
            {"dynatemp_range", &sampling_params::dynatemp_range},
            {"dynatemp_exponent", &sampling_params::dynatemp_exponent},
            {"top_n_sigma", &sampling_params::top_n_sigma},
            {"xtc_probability", &sampling_params::xtc_probability},
            {"xtc_threshold", &sampling_params::xtc_threshold},
            {"dry_multiplier", &sampling_params::dry_multiplier},
            {"dry_base", &sampling_params::dry_base},
            {"mirostat_tau", &sampling_params::mirostat_tau},
            {"mirostat_eta", &sampling_params::mirostat_eta},
        };
        for (const auto &[name, member] : numbers)
            if (auto v = number_field(body, name)) s.*member = float(*v);
        static const std::pair<const char *, int32_t sampling_params::*> integers[] = {
            {"repeat_last_n", &sampling_params::penalty_last_n},
            {"dry_allowed_length", &sampling_params::dry_allowed_length},
            {"dry_penalty_last_n", &sampling_params::dry_penalty_last_n},
            {"mirostat", &sampling_params::mirostat},
        };
        for (const auto &[name, member] : integers)
            if (auto v = integer_field(body, name)) {
                if (*v < -1 || *v > INT32_MAX)
                    throw request_error(std::string("'") + name + "' must be in [-1, 2147483647], got " +
                                        std::to_string(*v));
                s.*member = int32_t(*v);
            }
        if (auto breakers = field(
                body, "dry_sequence_breakers", [](const json &j) { return j.is_array() && !j.empty(); },
                "a non-empty array of strings")) {
            s.dry_sequence_breakers.clear();
            for (const json &b : *breakers) {
                if (!b.is_string() || b.get<std::string>().empty())
                    throw request_error("'dry_sequence_breakers' must hold non-empty strings, got " +
                                        json_kind(b));
                s.dry_sequence_breakers.push_back(b.get<std::string>());
            }
        }
        // an array of names, or a string of the one-letter forms
        if (auto samplers = field(
                body, "samplers", [](const json &j) { return j.is_array() || j.is_string(); },
                "an array of sampler names or a string of sampler letters")) {
            try {
                if (samplers->is_string()) {
                    s.samplers = sampler_types_from_letters(samplers->get<std::string>());
                } else {
                    std::vector<std::string> names;
                    for (const json &n : *samplers) {
                        if (!n.is_string())
                            throw request_error("'samplers' must hold sampler names, got " + json_kind(n));
                        names.push_back(n.get<std::string>());
                    }
                    s.samplers = sampler_types_from_names(names);
                }
            } catch (const request_error &) {
                throw;
            } catch (const error &e) {
                throw request_error(std::string("'samplers': ") + e.what());
            }
        }
    }

    parsed_request parse_request(const json &body, bool chat) const {
        parsed_request p;
        p.chat = chat;
        serving::request &g = p.base;
        g.max_tokens = limits_.n_predict;
        std::optional<int64_t> max_tokens = integer_field(body, "max_completion_tokens");
        const char *max_name = "max_completion_tokens";
        if (!max_tokens) {
            max_tokens = integer_field(body, "max_tokens");
            max_name = "max_tokens";
        }
        if (max_tokens) {
            if (*max_tokens < 0 || *max_tokens > (1 << 20))
                throw request_error(std::string("'") + max_name + "' must be in [0, 1048576], got " +
                                    std::to_string(*max_tokens));
            g.max_tokens = int32_t(*max_tokens);
        }
        if (limits_.max_tokens_cap > 0 && g.max_tokens > limits_.max_tokens_cap)
            g.max_tokens = limits_.max_tokens_cap;
        sampling_params &s = g.sampling;
        if (auto t = number_field(body, "temperature")) {
            if (*t < 0) throw request_error("'temperature' must be >= 0, got " + std::to_string(*t));
            s.temp = float(*t);
        }
        if (auto v = number_field(body, "top_p")) s.top_p = float(*v);
        if (auto v = number_field(body, "min_p")) s.min_p = float(*v);
        if (auto v = integer_field(body, "top_k")) {
            if (*v < 0 || *v > INT32_MAX)
                throw request_error("'top_k' must be >= 0, got " + std::to_string(*v));
            s.top_k = int32_t(*v);
        }
        if (auto v = number_field(body, "presence_penalty")) {
            if (*v < -2 || *v > 2) throw request_error("'presence_penalty' must be in [-2, 2]");
            s.penalty_present = float(*v);
        }
        if (auto v = number_field(body, "frequency_penalty")) {
            if (*v < -2 || *v > 2) throw request_error("'frequency_penalty' must be in [-2, 2]");
            s.penalty_freq = float(*v);
        }
        if (auto v = number_field(body, "repeat_penalty")) s.penalty_repeat = float(*v);
        if (auto seed = integer_field(body, "seed")) {
            if (*seed < -1 || *seed >= int64_t(sampler_seed_random))
                throw request_error("'seed' must be in [0, 4294967294] or -1 (random), got " +
                                    std::to_string(*seed));
            if (*seed >= 0) s.seed = uint32_t(*seed);
        }
        s.logit_bias = read_logit_bias(body);
        read_sampler_fields(body, s);
        // llama-server's per-request speculative settings (used when the server has a drafter)
        if (auto n = integer_field(body, "speculative.n_max")) {
            if (*n < 0 || *n > 256) throw request_error("'speculative.n_max' must be in [0, 256]");
            g.draft_max = int32_t(*n);
        }
        if (auto n = integer_field(body, "speculative.n_min")) {
            if (*n < 0 || *n > 256) throw request_error("'speculative.n_min' must be in [0, 256]");
            g.draft_min = int32_t(*n);
        }
        if (auto v = number_field(body, "speculative.p_min")) {
            if (!(*v >= 0.0 && *v <= 1.0)) throw request_error("'speculative.p_min' must be in [0, 1]");
            g.draft_p_min = float(*v);
        }
        if (auto list = field(
                body, "lora", [](const json &j) { return j.is_array(); }, "an array"))
            g.lora_scales = read_lora_scales(*list, limits_.n_lora, "lora");
        if (auto keep = integer_field(body, "n_keep")) {  // llama.cpp's field: -1 keeps the whole prompt
            if (*keep < -1 || *keep > INT32_MAX)
                throw request_error("'n_keep' must be >= -1, got " + std::to_string(*keep));
            g.n_keep = int32_t(*keep);
        }
        if (auto n = integer_field(body, "n")) {
            if (*n < 1 || *n > 16) throw request_error("'n' must be in [1, 16], got " + std::to_string(*n));
            p.n = int32_t(*n);
        }
        if (auto stream = bool_field(body, "stream")) p.stream = *stream;
        if (auto so = field(
                body, "stream_options", [](const json &j) { return j.is_object(); }, "an object")) {
            if (auto u = bool_field(*so, "include_usage")) p.include_usage = *u;
        }
        if (auto stop = field(
                body, "stop", [](const json &j) { return j.is_string() || j.is_array(); },
                "a string or an array of strings")) {
            if (stop->is_string()) {
                g.stop.push_back(stop->get<std::string>());
            } else {
                for (const json &s_item : *stop) {
                    if (!s_item.is_string())
                        throw request_error(std::string("'stop' must hold strings, got ") +
                                            json_kind(s_item));
                    g.stop.push_back(s_item.get<std::string>());
                }
            }
            std::erase(g.stop, std::string());
        }
        if (chat) {
            if (auto lp = bool_field(body, "logprobs")) p.logprobs = *lp;
            if (auto top = integer_field(body, "top_logprobs")) {
                if (*top < 0 || *top > 20) throw request_error("'top_logprobs' must be in [0, 20]");
                if (!p.logprobs) throw request_error("'top_logprobs' needs 'logprobs': true");
                p.top_logprobs = int32_t(*top);
            }
        } else {
            if (auto lp = integer_field(body, "logprobs")) {
                if (*lp < 0 || *lp > 5) throw request_error("'logprobs' must be in [0, 5] for completions");
                p.logprobs = true;
                p.top_logprobs = int32_t(*lp);
            }
            if (auto echo = bool_field(body, "echo")) p.echo = *echo;
            if (field(
                    body, "suffix", [](const json &j) { return j.is_string(); }, "a string"))
                throw request_error("'suffix' (insertion) is not supported by this server");
        }
        s.grammar = read_grammar(body);
        if (chat) {
            const std::string forced = tool_choice_grammar(body);
            if (!forced.empty() && !s.grammar.empty())
                throw request_error(
                    "'tool_choice' and a grammar, JSON schema or response_format both "
                    "constrain the output; send one");
            if (!forced.empty()) s.grammar = forced;
        }
        g.logprobs = p.logprobs;
        g.n_probs = p.top_logprobs;
        try {
            check_sampling_params(s);
            if (!s.grammar.empty()) make_sampler_chain(s, model_->vocab());  // a bad grammar: 400
        } catch (const error &e) {
            throw request_error(e.what());
        }
        if (chat) {
            std::vector<std::string> images;
            const std::vector<chat_message> messages =
                read_messages(body, limits_.mmproj ? &images : nullptr);
            std::string prompt;
            std::vector<text_span> contents;  // the messages' text: never control tokens
            const bool structured = uses_tools(body, p.tools);
            // chat_template_kwargs (enable_thinking ...) reach a Jinja template through the
            // structured rendering too (a chat with images keeps the plain one, without them)
            const bool kwargs =
                field(
                    body, "chat_template_kwargs", [](const json &j) { return j.is_object(); }, "an object")
                    .has_value() &&
                !template_.jinja.empty() && images.empty();
            if (structured || kwargs) {
                if (!images.empty())
                    throw request_error(
                        "'messages': image_url parts are not taken in a chat with tools or tool "
                        "calls");
                prompt = render_with_tools(body, p.tools);
            } else {
                try {
                    prompt = template_.format(messages, true, contents);
                } catch (const error &e) {
                    throw request_error(std::string("'messages': ") + e.what());
                }
            }
            if (images.empty())
                p.prompts.push_back(prompt_or_bos(tokenize_text(prompt, contents)));
            else
                p.prompts.push_back(encode_images(prompt, contents, images, p.media));
        } else {
            if (const auto prompt = body.find("prompt"); prompt != body.end() && prompt->is_array() &&
                                                         !prompt->empty() &&
                                                         !prompt->front().is_number_integer())
                check_choices(prompt->size(), p.n);  // before tokenizing thousands of prompts
            p.prompts = read_prompts(body, p.prompt_text_bytes);
        }
        check_choices(p.prompts.size(), p.n);
        return p;
    }

    // The grammar a request's output must follow ("" when none): 'grammar' (GBNF) or 'json_schema'
    // (both as llama-server takes them), or OpenAI's response_format json_object (any object; a
    // 'schema' beside the type narrows it) or json_schema ({"json_schema": {"schema": ...}}). At
    // most one of the three; a grammar that does not parse or a schema weft cannot convert is a 400.
    static std::string read_grammar(const json &body) {
        auto is_object = [](const json &j) { return j.is_object(); };
        std::vector<std::string> asked;
        std::string gbnf;
        auto convert = [](const json &schema, const std::string &where) {
            try {
                return json_schema_to_grammar(schema.dump());
            } catch (const error &e) {
                throw request_error("'" + where + "': " + e.what());
            }
        };
        if (auto g = field(
                body, "grammar", [](const json &j) { return j.is_string(); }, "a string")) {
            gbnf = g->get<std::string>();
            if (!gbnf.empty()) asked.push_back("grammar");
        }
        if (auto schema = field(body, "json_schema", is_object, "an object")) {
            gbnf = convert(*schema, "json_schema");
            asked.push_back("json_schema");
        }
        if (auto rf = field(body, "response_format", is_object, "an object")) {
            const auto type = field(
                *rf, "type", [](const json &j) { return j.is_string(); }, "a string");
            const std::string kind = type ? type->get<std::string>() : "";
            if (kind == "json_object") {
                const auto schema = field(*rf, "schema", is_object, "an object");
                gbnf = schema ? convert(*schema, "response_format.schema") : json_any_grammar(true);
                asked.push_back("response_format");
            } else if (kind == "json_schema") {
                const auto wrapper = field(*rf, "json_schema", is_object, "an object");
                const auto schema =
                    wrapper ? field(*wrapper, "schema", is_object, "an object") : std::nullopt;
                if (!schema)
                    throw request_error(
                        "'response_format' of type 'json_schema' needs 'json_schema': {\"schema\": {...}}");
                gbnf = convert(*schema, "response_format.json_schema.schema");
                asked.push_back("response_format");
            } else if (kind != "text") {
                throw request_error("'response_format' type '" + kind +
                                    "' is not supported; 'text', 'json_object' and 'json_schema' are");
            }
        }
        if (asked.size() > 1)
            throw request_error("'" + asked[0] + "' and '" + asked[1] +
                                "' both constrain the output; send one");
        if (!gbnf.empty()) {
            try {
                grammar::parse(gbnf, asked[0]);
            } catch (const error &e) {
                throw request_error(e.what());
            }
        }
        return gbnf;
    }

    // tool_choice: "auto" (the default) and "none" (no tools offered: see uses_tools) leave the
    // output free; "required" makes it one call of one of the tools, {"type": "function",
    // "function": {"name"}} one call of that tool: the grammar ("" when free) of such a call, its
    // arguments following the tool's parameters schema, in the form the model's template teaches
    // (<tool_call>...</tool_call>, [TOOL_CALLS] [...], else the bare JSON object), which the reply's
    // tool-call parsing reads back.
    std::string tool_choice_grammar(const json &body) const {
        const auto choice = body.find("tool_choice");
        if (choice == body.end() || choice->is_null()) return {};
        std::string name;
        if (choice->is_string()) {
            if (*choice == "auto" || *choice == "none") return {};
            if (*choice != "required")
                throw request_error(
                    "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                    "{\"type\": \"function\", \"function\": {\"name\"}}, got \"" +
                    choice->get<std::string>() + "\"");
        } else {
            const auto function = choice->is_object() ? choice->find("function") : choice->end();
            if (!choice->is_object() || choice->value("type", json()) != "function" ||
                function == choice->end() || !function->is_object() || !function->contains("name") ||
                !(*function)["name"].is_string())
                throw request_error(
                    "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                    "{\"type\": \"function\", \"function\": {\"name\"}}");
            name = (*function)["name"].get<std::string>();
        }
        const auto tools = body.find("tools");
        if (tools == body.end() || !tools->is_array() || tools->empty())
            throw request_error("'tool_choice' asks for a tool call but no 'tools' are offered");
        json calls = json::array();
        for (size_t i = 0; i < tools->size(); ++i) {
            const json &t = (*tools)[i];
            const std::string at = "tools[" + std::to_string(i) + "]";
            const auto fn = t.is_object() ? t.find("function") : t.end();
            if (fn == t.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
                throw request_error("'" + at + "' needs 'function': {\"name\", \"parameters\"}");
            if (!name.empty() && (*fn)["name"] != name) continue;
            const json params = fn->contains("parameters") && (*fn)["parameters"].is_object()
                                    ? (*fn)["parameters"]
                                    : json{{"type", "object"}};
            calls.push_back({{"type", "object"},
                             {"properties", {{"name", {{"const", (*fn)["name"]}}}, {"arguments", params}}},
                             {"required", {"name", "arguments"}},
                             {"additionalProperties", false}});
        }
        if (calls.empty())
            throw request_error("'tool_choice' names the tool '" + name +
                                "', which is not among the 'tools'");
        std::string call;
        try {
            call = json_schema_to_grammar(json{{"anyOf", calls}}.dump());
        } catch (const error &e) {
            throw request_error("'tool_choice': the tools' parameters: " + std::string(e.what()));
        }
        call = "tool-call" + call.substr(std::string("root").size());  // its root, renamed
        const std::string &tmpl = template_.jinja;
        if (tmpl.find("<tool_call>") != std::string::npos)
            return "root ::= \"<tool_call>\\n\" tool-call \"\\n</tool_call>\"\n" + call;
        if (tmpl.find("[TOOL_CALLS]") != std::string::npos)
            return "root ::= \"[TOOL_CALLS] [\" tool-call \"]\"\n" + call;
        return "root ::= tool-call\n" + call;
    }

    // Whether a chat request needs the structured rendering: tools offered (unless tool_choice is
    // "none"; with_tools says so), or messages that carry tool calls or tool results.
    static bool uses_tools(const json &body, bool &with_tools) {
        const auto tools = body.find("tools");
        with_tools = tools != body.end() && !tools->is_null();
        if (with_tools && !tools->is_array())
            throw request_error("'tools' must be an array, got " + json_kind(*tools));
        if (with_tools && tools->empty()) with_tools = false;
        const auto choice = body.find("tool_choice");
        if (choice != body.end() && choice->is_string() && *choice == "none") with_tools = false;
        bool structured = with_tools;
        for (const json &m : body["messages"])
            structured = structured || m.contains("tool_calls") || m.value("role", "") == "tool";
        return structured;
    }

    // The prompt of a chat with tools: the model's Jinja template rendered with the messages as
    // sent (contents joined from parts), the tools and the chat_template_kwargs.
    std::string render_with_tools(const json &body, bool with_tools) const {
        if (template_.jinja.empty())
            throw request_error("'tools': this model's chat template (" + template_.name() +
                                ") is not one weft renders with tools; start the server with a Jinja "
                                "--chat-template");
        chat_request request;
        request.messages = jinja_messages(body);
        if (with_tools) request.tools = jinja_from_json(body["tools"]);
        if (const auto kwargs = body.find("chat_template_kwargs");
            kwargs != body.end() && kwargs->is_object())
            request.kwargs = jinja_from_json(*kwargs);
        return render_jinja(request);
    }

    // The messages as the Jinja template takes them: as sent, contents joined from parts; prepared
    // by render_chat_request as the reference prepares them (weft/template/chat_request.h):
    // arguments as objects, null contents as "", reasoning_content also as gpt-oss's thinking.
    template <class Json>
    static jinja_value jinja_messages(const Json &body) {
        Json messages = body.at("messages");
        for (size_t i = 0; i < messages.size(); ++i)
            if (messages[i].contains("content") && messages[i]["content"].is_array())
                messages[i]["content"] = message_content(json::parse(messages[i]["content"].dump()), i);
        return jinja_from_json(messages);
    }

    // /apply-template: the prompt text of a chat body, as the chat route would render it, with the
    // reference's add_generation_prompt (default true) and chat_template_kwargs. What the template
    // sees keeps the body's key order (a tool's JSON schema is printed as sent).
    std::string render_prompt(const std::string &body_text) const {
        const auto ordered = nlohmann::ordered_json::parse(body_text, nullptr, false);
        if (ordered.is_discarded()) throw request_error("the request body is not valid JSON");
        if (!ordered.is_object()) throw request_error("the request body must be a JSON object");
        const json body = json::parse(body_text);
        const std::vector<chat_message> messages = read_messages(body);
        const bool add_generation_prompt = bool_field(body, "add_generation_prompt").value_or(true);
        const auto kwargs = field(
            body, "chat_template_kwargs", [](const json &j) { return j.is_object(); }, "an object");
        bool with_tools = false;
        uses_tools(body, with_tools);
        if (template_.jinja.empty())  // tools are refused there; the kwargs mean nothing to a family
            return with_tools ? render_with_tools(body, true)
                              : template_.format(messages, add_generation_prompt);
        chat_request request;
        request.messages = jinja_messages(ordered);
        if (with_tools) request.tools = jinja_from_json(ordered.at("tools"));
        if (kwargs) request.kwargs = jinja_from_json(ordered.at("chat_template_kwargs"));
        request.add_generation_prompt = add_generation_prompt;
        return render_jinja(request);
    }

    std::string render_jinja(const chat_request &request) const {
        try {
            return render_chat_request(jinja_template(template_.jinja), request, template_.tokens);
        } catch (const jinja_error &e) {
            throw request_error(std::string("the chat template refused these messages and tools: ") +
                                e.what());
        }
    }

    const model *model_;
    const template_choice &template_;
    limits limits_;
    mutable std::mutex images_mutex_;
    mutable std::condition_variable image_turn_free_;
    mutable size_t images_under_way_ = 0;
};

openai_request_reader::openai_request_reader(const model &m, const template_choice &tmpl, int32_t n_predict,
                                             int32_t max_tokens_cap, size_t n_lora,
                                             const vision::clip_model *mmproj, int n_threads,
                                             int64_t n_ctx_slot)
    : impl_(std::make_unique<impl>(
          m, tmpl, impl::limits{n_predict, max_tokens_cap, n_lora, mmproj, n_threads, n_ctx_slot})) {}

std::vector<float> read_lora_scales(const json &list, size_t n_adapters, const std::string &what) {
    if (!list.is_array()) throw request_error("'" + what + "' must be an array of {\"id\", \"scale\"}");
    std::vector<float> scales(n_adapters, 0.0f);
    std::vector<bool> seen(n_adapters, false);
    for (size_t i = 0; i < list.size(); ++i) {
        const json &e = list[i];
        const std::string at = what + "[" + std::to_string(i) + "]";
        if (!e.is_object()) throw request_error("'" + at + "' must be an object {\"id\", \"scale\"}");
        const auto id = field(
            e, "id", [](const json &j) { return j.is_number_integer(); }, "an integer");
        if (!id) throw request_error("'" + at + ".id' is required");
        const int64_t n = integer_value(*id, at + ".id");
        if (n < 0 || size_t(n) >= n_adapters)
            throw request_error("'" + at + ".id' is " + std::to_string(n) + "; the server has " +
                                std::to_string(n_adapters) + " LoRA adapters (GET /lora-adapters)");
        if (seen[size_t(n)])
            throw request_error("'" + at + ".id': adapter " + std::to_string(n) + " is given twice");
        seen[size_t(n)] = true;
        const auto scale = field(
            e, "scale", [](const json &j) { return j.is_number(); }, "a number");
        if (!scale) throw request_error("'" + at + ".scale' is required");
        const double v = scale->get<double>();
        try {
            check_lora_scale(v, "'" + at + ".scale'");
        } catch (const error &e) {
            throw request_error(e.what());
        }
        scales[size_t(n)] = float(v);
    }
    return scales;
}

openai_request_reader::~openai_request_reader() = default;

parsed_request openai_request_reader::parse(const json &body, bool chat) const {
    return impl_->parse_request(body, chat);
}

std::string openai_request_reader::render_prompt(const std::string &body_text) const {
    return impl_->render_prompt(body_text);
}

}  // namespace weft::server
