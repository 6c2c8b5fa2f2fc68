// src/vocab/vocab.cpp — loading a vocabulary, special tokens, tokenize dispatch, pieces, detokenize.
#include "weft/vocab/vocab.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <limits>
#include <span>

#include "vocab/unicode.h"
#include "vocab/vocab_impl.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

constexpr std::string_view k_space_marker = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's space

std::string escape_whitespace(std::string_view text) {
    std::string out;
    out.reserve(text.size() + text.size() / 4);
    for (const char c : text) {
        if (c == ' ') {
            out += k_space_marker;
        } else {
            out += c;
        }
    }
    return out;
}

std::string unescape_whitespace(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        if (text.substr(i, 3) == k_space_marker) {
            out += ' ';
            i += 3;
        } else {
            out += text[i++];
        }
    }
    return out;
}

// The byte-level alphabet back to bytes; a code point outside it is kept as its UTF-8 (the
// established engine writes "[UNK_BYTE_0x..]" there, which helps nobody).
std::string decode_byte_level(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
        const size_t start = pos;
        const uint32_t cpt = unicode::decode(text, pos);
        const int byte = cpt == unicode::invalid_cpt ? -1 : unicode::cpt_to_byte(cpt);
        if (byte >= 0) {
            out += char(byte);
        } else {
            out.append(text.substr(start, pos - start));
        }
    }
    return out;
}

uint32_t attr_from_type(token_type t) {
    switch (t) {
        case token_type::unknown:
            return attr_unknown;
        case token_type::unused:
            return attr_unused;
        case token_type::normal:
            return attr_normal;
        case token_type::control:
            return attr_control;
        case token_type::user_defined:
            return attr_user_defined;
        case token_type::byte:
            return attr_byte;
        case token_type::undefined:
            return attr_undefined;
    }
    return attr_undefined;
}

bool is_c_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// HF-style clean-up of decoded text, as the established engine does it: no space before . , ! ?
// and before the contractions 's 'm 're 've.
std::string clean_up_spaces(std::string text) {
    std::string pass1;
    pass1.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        const char x = text[i];
        if (i > 0 && text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) pass1.pop_back();
        pass1 += x;
    }
    std::string pass2;
    pass2.reserve(pass1.size());
    for (size_t i = 0; i < pass1.size(); ++i) {
        const char x = pass1[i];
        if (i > 0 && pass1[i - 1] == ' ' && x == '\'' && i + 1 < pass1.size()) {
            const char x1 = pass1[i + 1];
            const char x2 = i + 2 < pass1.size() ? pass1[i + 2] : '\0';
            if (x1 == 's' || x1 == 'm' || (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'))
                pass2.pop_back();
        }
        pass2 += x;
    }
    return pass2;
}

// Texts of end-of-turn tokens, in the order they are preferred as "the" EOT when several exist.
const char *const k_eot_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "_<EOT>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81"
    "of\xE2\x96\x81"
    "sentence\xEF\xBD\x9C>",  // DeepSeek
    "<end_of_utterance>",
};
// Texts of tokens that end generation.
// (the 2026 reference's list: <|return|> and <|call|> are gpt-oss's harmony, <|flush|> and <|calls|>
// Solar Open's, [EOT] and [EOS] Kimi-K2's, <turn|> and <|tool_response> Gemma 4's)
const char *const k_eog_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
};
// Texts of fill-in-the-middle tokens, by role, as the 2026 reference finds them when the file
// names no id (Qwen's <|fim_prefix|>, Granite's <fim_prefix>, DeepSeek's, CodeLlama's, GLM-4.5's,
// Falcon-H1's; Kimi-K2's [PAD]); the first found wins.
const char *const k_fim_pre_texts[] = {"<|fim_prefix|>",
                                       "<fim-prefix>",
                                       "<fim_prefix>",
                                       "<\xEF\xBD\x9C"
                                       "fim\xE2\x96\x81"
                                       "begin\xEF\xBD\x9C>",
                                       "<PRE>",
                                       "\xE2\x96\x81<PRE>",
                                       "<|code_prefix|>",
                                       "<|prefix|>"};
const char *const k_fim_suf_texts[] = {"<|fim_suffix|>",
                                       "<fim-suffix>",
                                       "<fim_suffix>",
                                       "<\xEF\xBD\x9C"
                                       "fim\xE2\x96\x81"
                                       "hole\xEF\xBD\x9C>",
                                       "<SUF>",
                                       "\xE2\x96\x81<SUF>",
                                       "<|code_suffix|>",
                                       "<|suffix|>"};
const char *const k_fim_mid_texts[] = {"<|fim_middle|>",
                                       "<fim-middle>",
                                       "<fim_middle>",
                                       "<\xEF\xBD\x9C"
                                       "fim\xE2\x96\x81"
                                       "end\xEF\xBD\x9C>",
                                       "<MID>",
                                       "\xE2\x96\x81<MID>",
                                       "<|code_middle|>",
                                       "<|middle|>"};
const char *const k_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const char *const k_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const char *const k_fim_sep_texts[] = {"<|file_sep|>"};
// gpt-oss's harmony headers, which a reply is parsed by (its channels): always rendered, as text
const char *const k_harmony_header_texts[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
// Gemma 4's thought channel, which a reply is split by (weft/template/reasoning.h): rendered too
const char *const k_thought_channel_texts[] = {"<|channel>", "<channel|>"};

void warn(const std::string &msg) {
    std::fprintf(stderr, "weft: warning: %s\n", msg.c_str());
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// loading

std::unique_ptr<vocab> vocab::load(const gguf_file &f) {
    const std::string &path = f.path();
    const auto fail = [&](const std::string &msg) -> error { return error(path + ": " + msg); };
    vocab_spec spec;
    try {
        const auto model = f.get_string("tokenizer.ggml.model");
        if (!model) throw fail("no tokenizer.ggml.model: the file holds no vocabulary");
        spec.model = *model;
        spec.pre = f.get_string("tokenizer.ggml.pre");
        spec.name = f.get_string("general.name").value_or("");

        const auto require_array = [&](const char *key, std::initializer_list<gguf_type> types,
                                       bool required) {
            const gguf_kv *kv = f.find(key);
            if (!kv) {
                if (required) throw fail(std::string("no ") + key);
                return false;
            }
            if (!kv->is_array() || std::find(types.begin(), types.end(), kv->array_type) == types.end()) {
                throw fail(std::string(key) + " is " +
                           (kv->is_array() ? std::string("an array of ") + gguf_type_name(kv->array_type)
                                           : std::string("a ") + gguf_type_name(kv->type)) +
                           ", expected an array of " + gguf_type_name(*types.begin()));
            }
            return true;
        };
        require_array("tokenizer.ggml.tokens", {gguf_type::string}, true);
        spec.tokens = *f.get_string_array("tokenizer.ggml.tokens");
        if (require_array("tokenizer.ggml.scores", {gguf_type::f32, gguf_type::f64}, false)) {
            spec.scores = f.get_float_array("tokenizer.ggml.scores").value_or(std::vector<float>{});
        }
        if (require_array("tokenizer.ggml.token_type",
                          {gguf_type::i32, gguf_type::u32, gguf_type::i8, gguf_type::u8, gguf_type::i16,
                           gguf_type::u16, gguf_type::i64, gguf_type::u64},
                          false)) {
            const std::vector<int64_t> types =
                f.get_int_array("tokenizer.ggml.token_type").value_or(std::vector<int64_t>{});
            for (const int64_t t : types) {
                spec.types.push_back(t >= 0 && t <= 6 ? token_type(t) : token_type::undefined);
            }
        }
        if (spec.model == "gpt2") {
            require_array("tokenizer.ggml.merges", {gguf_type::string}, true);
            spec.merges = *f.get_string_array("tokenizer.ggml.merges");
        }
        if (require_array("tokenizer.ggml.suppress_tokens",
                          {gguf_type::i32, gguf_type::u32, gguf_type::i8, gguf_type::u8, gguf_type::i16,
                           gguf_type::u16, gguf_type::i64, gguf_type::u64},
                          false)) {
            spec.suppress =
                f.get_int_array("tokenizer.ggml.suppress_tokens").value_or(std::vector<int64_t>{});
        }
        const auto read_id = [&](std::optional<int64_t> &dst, std::initializer_list<const char *> keys) {
            for (const char *k : keys) {
                if (auto v = f.get_int(k)) {
                    dst = *v;
                    return;
                }
            }
        };
        read_id(spec.bos, {"tokenizer.ggml.bos_token_id"});
        read_id(spec.eos, {"tokenizer.ggml.eos_token_id"});
        read_id(spec.eot, {"tokenizer.ggml.eot_token_id"});
        read_id(spec.eom, {"tokenizer.ggml.eom_token_id"});
        read_id(spec.unk, {"tokenizer.ggml.unknown_token_id"});
        read_id(spec.sep, {"tokenizer.ggml.seperator_token_id", "tokenizer.ggml.separator_token_id"});
        read_id(spec.pad, {"tokenizer.ggml.padding_token_id"});
        read_id(spec.mask, {"tokenizer.ggml.mask_token_id"});
        // the older keys first: where a file has both, the reference ends with the older one's id
        read_id(spec.fim_pre, {"tokenizer.ggml.prefix_token_id", "tokenizer.ggml.fim_pre_token_id"});
        read_id(spec.fim_suf, {"tokenizer.ggml.suffix_token_id", "tokenizer.ggml.fim_suf_token_id"});
        read_id(spec.fim_mid, {"tokenizer.ggml.middle_token_id", "tokenizer.ggml.fim_mid_token_id"});
        read_id(spec.fim_pad, {"tokenizer.ggml.fim_pad_token_id"});
        read_id(spec.fim_rep, {"tokenizer.ggml.fim_rep_token_id"});
        read_id(spec.fim_sep, {"tokenizer.ggml.fim_sep_token_id"});
        spec.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
        spec.add_eos = f.get_bool("tokenizer.ggml.add_eos_token");
        spec.add_sep = f.get_bool("tokenizer.ggml.add_sep_token");
        spec.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix");
    } catch (const gguf_error &e) {
        const std::string what = e.what();
        if (what.rfind(path, 0) == 0) throw;
        throw fail(what);
    }
    return create(spec, path);
}

std::unique_ptr<vocab> vocab::create(const vocab_spec &spec, const std::string &source) {
    auto p = std::make_unique<impl>();
    impl &v = *p;
    v.source = source;
    const auto fail = [&](const std::string &msg) -> error { return error(source + ": " + msg); };

    if (spec.model == "llama") {
        v.kind = vocab_kind::spm;
    } else if (spec.model == "gpt2") {
        v.kind = vocab_kind::bpe;
    } else if (spec.model == "bert") {
        v.kind = vocab_kind::wpm;
    } else {
        throw fail("unknown tokenizer model '" + spec.model +
                   "' (tokenizer.ggml.model); supported: llama (SPM), gpt2 (BPE), bert (WPM)");
    }

    // --- token table
    const size_t n_tokens = spec.tokens.size();
    if (n_tokens == 0) throw fail("tokenizer.ggml.tokens is empty");
    if (n_tokens >= size_t(std::numeric_limits<int32_t>::max())) throw fail("too many tokens");
    if (!spec.scores.empty() && spec.scores.size() != n_tokens) {
        throw fail("tokenizer.ggml.scores has " + std::to_string(spec.scores.size()) +
                   " entries but tokenizer.ggml.tokens has " + std::to_string(n_tokens));
    }
    if (!spec.types.empty() && spec.types.size() != n_tokens) {
        throw fail("tokenizer.ggml.token_type has " + std::to_string(spec.types.size()) +
                   " entries but tokenizer.ggml.tokens has " + std::to_string(n_tokens));
    }
    v.tokens.resize(n_tokens);
    for (size_t i = 0; i < n_tokens; ++i) {
        impl::token_data &t = v.tokens[i];
        t.text = spec.tokens[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : spec.tokens[i];
        t.score = spec.scores.empty() ? 0.0f : spec.scores[i];
        t.type = spec.types.empty() ? token_type::normal : spec.types[i];
        t.attr = attr_from_type(t.type);
        v.max_token_len = std::max(v.max_token_len, t.text.size());
    }
    for (size_t i = 0; i < spec.suppress.size(); ++i) {
        const int64_t id = spec.suppress[i];
        if (id < 0 || id >= int64_t(n_tokens))
            throw fail("tokenizer.ggml.suppress_tokens[" + std::to_string(i) + "] is " + std::to_string(id) +
                       ", not a token of the " + std::to_string(n_tokens) + "-token vocabulary");
        v.suppressed.push_back(token(id));
    }
    std::sort(v.suppressed.begin(), v.suppressed.end());
    v.suppressed.erase(std::unique(v.suppressed.begin(), v.suppressed.end()), v.suppressed.end());
    v.text_to_id.reserve(n_tokens);
    for (size_t i = 0; i < n_tokens; ++i)
        v.text_to_id[v.tokens[i].text] = token(i);  // a later duplicate wins

    // --- defaults per tokenizer type
    switch (v.kind) {
        case vocab_kind::spm:
            v.bos = 1, v.eos = 2, v.unk = 0;
            v.add_space_prefix = true, v.clean_spaces = false, v.add_bos = true, v.add_eos = false;
            break;
        case vocab_kind::wpm:
            v.bos = 101, v.unk = 100, v.sep = 102, v.pad = 0, v.mask = 103;
            v.add_space_prefix = false, v.clean_spaces = true, v.add_bos = true, v.add_eos = false;
            v.add_sep = true;
            break;
        case vocab_kind::bpe: {
            v.bos = 11, v.eos = 11;
            pretokenizer_config cfg;
            if (!spec.pre) {
                warn(source + ": no tokenizer.ggml.pre; using the 'default' pre-tokenizer");
            }
            v.pre_name = spec.pre.value_or("default");
            if (!pretokenizer_lookup(v.pre_name, cfg)) {
                throw fail("unknown pre-tokenizer type '" + v.pre_name + "' (tokenizer.ggml.pre)");
            }
            v.clean_spaces = cfg.clean_spaces;
            v.ignore_merges = cfg.ignore_merges;
            v.add_bos = cfg.default_add_bos;
            v.pretok = std::make_unique<regex_chain>(cfg.regexes);
            break;
        }
    }
    if (v.kind != vocab_kind::bpe && spec.pre) v.pre_name = *spec.pre;
    if (spec.add_space_prefix) v.add_space_prefix = *spec.add_space_prefix;

    // --- special ids
    const auto set_id = [&](token &dst, const std::optional<int64_t> &id, const char *what) {
        if (!id) return;
        if (*id == -1 || *id == int64_t(UINT32_MAX)) {  // written as "none" by converters
            dst = token_null;
            return;
        }
        if (*id < 0 || *id >= int64_t(n_tokens)) {
            warn(source + ": bad special token " + what + " = " + std::to_string(*id) + " (of " +
                 std::to_string(n_tokens) + " tokens); keeping the default");
            return;
        }
        dst = token(*id);
    };
    set_id(v.bos, spec.bos, "bos");
    set_id(v.eos, spec.eos, "eos");
    set_id(v.eot, spec.eot, "eot");
    set_id(v.eom, spec.eom, "eom");
    set_id(v.unk, spec.unk, "unk");
    set_id(v.sep, spec.sep, "sep");
    set_id(v.pad, spec.pad, "pad");
    set_id(v.mask, spec.mask, "mask");
    set_id(v.fim.pre, spec.fim_pre, "fim_pre");
    set_id(v.fim.suf, spec.fim_suf, "fim_suf");
    set_id(v.fim.mid, spec.fim_mid, "fim_mid");
    set_id(v.fim.pad, spec.fim_pad, "fim_pad");
    set_id(v.fim.rep, spec.fim_rep, "fim_rep");
    set_id(v.fim.sep, spec.fim_sep, "fim_sep");
    for (token *t : {&v.bos, &v.eos, &v.eot, &v.eom, &v.unk, &v.sep, &v.pad, &v.mask}) {
        if (!v.valid(*t)) *t = token_null;  // a default that this (small) vocabulary does not have
    }
    if (spec.add_bos) v.add_bos = *spec.add_bos;
    if (spec.add_eos) v.add_eos = *spec.add_eos;
    if (spec.add_sep) v.add_sep = *spec.add_sep;

    // --- byte tokens
    static const char *hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        const char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
        token t = v.find(name);
        if (t == token_null) t = v.find(std::string(1, char(b)));
        v.byte_token[size_t(b)] = t;
        const std::string &spelled = unicode::byte_to_utf8(uint8_t(b));
        v.byte_level_token[size_t(b)] = v.find(spelled);
        for (const char c : spelled) {
            const token single = v.find(std::string(1, c));
            if (single != token_null) v.byte_fallback[size_t(b)].push_back(single);
        }
    }

    // --- SPM: where merging can cross the start of a word
    if (v.kind == vocab_kind::spm) {
        v.spm_can_cut = true;
        for (const auto &t : v.tokens) {
            uint32_t prev = unicode::invalid_cpt;
            for (size_t pos = 0; pos < t.text.size();) {
                const uint32_t cpt = unicode::decode(t.text, pos);
                if (cpt == unicode::invalid_cpt) v.spm_can_cut = false;
                if (cpt == 0x2581 && prev != unicode::invalid_cpt) v.spm_before_space.insert(prev);
                prev = cpt;
            }
        }
    }

    // --- BPE merges
    if (v.kind == vocab_kind::bpe) {
        v.merges.reserve(spec.merges.size());
        for (size_t i = 0; i < spec.merges.size(); ++i) {
            const std::string &m = spec.merges[i];
            const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
            const auto bad = [&](const std::string &why) {
                return fail("tokenizer.ggml.merges[" + std::to_string(i) + "] '" + m + "': " + why);
            };
            if (space == std::string::npos) throw bad("not of the form 'left right'");
            const std::string_view left = std::string_view(m).substr(0, space);
            const std::string_view right = std::string_view(m).substr(space + 1);
            const token l = v.find(left), r = v.find(right);
            if (l == token_null) throw bad("'" + std::string(left) + "' is not a token");
            if (r == token_null) throw bad("'" + std::string(right) + "' is not a token");
            const token result = v.find(std::string(left) + std::string(right));
            v.merges.try_emplace(uint64_t(uint32_t(l)) << 32 | uint32_t(r),
                                 impl::bpe_merge{int32_t(i), result});
        }
    }

    // --- newline
    switch (v.kind) {
        case vocab_kind::spm:
            v.nl = v.byte_token['\n'];
            break;
        case vocab_kind::bpe:
            v.nl = v.byte_level_token['\n'];
            break;
        case vocab_kind::wpm:
            v.nl = token_null;
            break;
    }
    if (v.nl == token_null) v.nl = v.pad;

    // --- end of turn / end of generation, detected by text as the established engine does; such
    // tokens become control tokens
    if (v.eot == token_null) {
        for (const char *text : k_eot_texts) {
            if (const token t = v.find(text); t != token_null) {
                v.eot = t;
                v.tokens[size_t(t)].attr = attr_control;
                break;
            }
        }
    }
    if (v.eom == token_null) {
        if (const token t = v.find("<|eom_id|>"); t != token_null) {
            v.eom = t;
            v.tokens[size_t(t)].attr = attr_control;
        }
    }
    // fill-in-the-middle tokens the file names no id for, by their text; they become control tokens
    // and pad, rep and sep end generation (a completion stops at the next file or padding)
    const auto find_fim = [&](token &dst, std::span<const char *const> texts) {
        for (const char *text : texts) {
            if (dst != token_null) break;
            if (const token t = v.find(text); t != token_null) {
                dst = t;
                v.tokens[size_t(t)].attr = attr_control;
            }
        }
    };
    find_fim(v.fim.pre, k_fim_pre_texts);
    find_fim(v.fim.suf, k_fim_suf_texts);
    find_fim(v.fim.mid, k_fim_mid_texts);
    find_fim(v.fim.pad, k_fim_pad_texts);
    find_fim(v.fim.rep, k_fim_rep_texts);
    find_fim(v.fim.sep, k_fim_sep_texts);
    for (const token t : {v.fim.pad, v.fim.rep, v.fim.sep})
        if (t != token_null) v.eog.push_back(t);
    for (const char *text : k_eog_texts) {
        if (const token t = v.find(text); t != token_null) {
            v.eog.push_back(t);
            v.tokens[size_t(t)].attr = attr_control;
        }
    }
    for (const auto &texts : {std::span<const char *const>(k_harmony_header_texts),
                              std::span<const char *const>(k_thought_channel_texts)})
        for (const char *text : texts)
            if (const token t = v.find(text); t != token_null) v.tokens[size_t(t)].attr = attr_user_defined;
    for (const token t : {v.eos, v.eot, v.eom}) {
        if (t != token_null) v.eog.push_back(t);
    }
    std::sort(v.eog.begin(), v.eog.end());
    v.eog.erase(std::unique(v.eog.begin(), v.eog.end()), v.eog.end());
    const auto ends_generation = [&](const char *text) {
        const token t = v.find(text);
        return t != token_null && std::binary_search(v.eog.begin(), v.eog.end(), t);
    };
    const auto not_an_end = [&](const char *text, uint32_t attr) {
        const token t = v.find(text);
        v.eog.erase(std::find(v.eog.begin(), v.eog.end(), t));
        v.tokens[size_t(t)].attr = attr;
    };
    // harmony (and Solar Open): <|end|> closes one message of a reply that goes on (the reply ends
    // at <|return|> or <|call|>), so it is text the reply is parsed by
    if (ends_generation("<|end|>") && (ends_generation("<|call|>") || ends_generation("<|calls|>")) &&
        (ends_generation("<|return|>") || ends_generation("<|flush|>"))) {
        not_an_end("<|end|>", attr_user_defined);
    }
    // Gemma 4 (it ends a reply at <turn|> or <|tool_response>): </s> is an ordinary token
    if (ends_generation("</s>") && ends_generation("<|tool_response>")) not_an_end("</s>", attr_normal);

    // --- tokens matched in the text before tokenization, longest first (ties: lower id first)
    for (size_t i = 0; i < n_tokens; ++i) {
        if (v.tokens[i].attr & (attr_control | attr_user_defined | attr_unknown))
            v.special_tokens.push_back(token(i));
    }
    std::stable_sort(v.special_tokens.begin(), v.special_tokens.end(), [&](token a, token b) {
        return v.tokens[size_t(a)].text.size() > v.tokens[size_t(b)].text.size();
    });

    // --- pieces
    v.pieces.resize(n_tokens);
    for (size_t i = 0; i < n_tokens; ++i) v.pieces[i] = v.render_piece(token(i));

    // --- per-family token attributes the file does not carry (as the established engine sets them)
    std::string lower_name = spec.name;
    for (char &c : lower_name) c = char(std::tolower(uint8_t(c)));
    const auto set_attr = [&](token t, uint32_t attr, bool on) {
        if (t == token_null) return;
        auto &a = v.tokens[size_t(t)].attr;
        a = on ? (a | attr) : (a & ~attr);
    };
    if (v.pre_name.find("jina-v2-de") != std::string::npos ||
        v.pre_name.find("jina-v2-es") != std::string::npos ||
        v.pre_name.find("jina-v2-code") != std::string::npos) {
        set_attr(v.find("<mask>"), attr_lstrip, true);
    } else if (lower_name.find("phi-3") != std::string::npos ||
               lower_name.find("phi3") != std::string::npos) {
        for (const token t : v.special_tokens) set_attr(t, attr_rstrip, true);
        set_attr(v.find("</s>"), attr_rstrip, true);
        for (const char *text : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(v.find(text), attr_rstrip, false);
    }

    return std::unique_ptr<vocab>(new vocab(std::move(p)));
}

vocab::vocab(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
vocab::~vocab() = default;

// ---------------------------------------------------------------------------------------------
// accessors

vocab_kind vocab::kind() const {
    return impl_->kind;
}
const std::string &vocab::pre_type() const {
    return impl_->pre_name;
}
int32_t vocab::n_tokens() const {
    return int32_t(impl_->tokens.size());
}
token vocab::bos() const {
    return impl_->bos;
}
token vocab::eos() const {
    return impl_->eos;
}
token vocab::eot() const {
    return impl_->eot;
}
token vocab::unk() const {
    return impl_->unk;
}
token vocab::pad() const {
    return impl_->pad;
}
token vocab::sep() const {
    return impl_->sep;
}
token vocab::nl() const {
    return impl_->nl;
}
token vocab::mask() const {
    return impl_->mask;
}
const fim_tokens &vocab::fim() const {
    return impl_->fim;
}
bool vocab::add_bos() const {
    return impl_->add_bos;
}
bool vocab::add_eos() const {
    return impl_->add_eos;
}
bool vocab::add_sep() const {
    return impl_->add_sep;
}
bool vocab::add_space_prefix() const {
    return impl_->add_space_prefix;
}
bool vocab::is_eog(token t) const {
    return std::binary_search(impl_->eog.begin(), impl_->eog.end(), t);
}
const std::vector<token> &vocab::eog_tokens() const {
    return impl_->eog;
}
const std::vector<token> &vocab::suppressed_tokens() const {
    return impl_->suppressed;
}
bool vocab::is_control(token t) const {
    return impl_->valid(t) && (impl_->tokens[size_t(t)].attr & attr_control);
}
token vocab::find(std::string_view text) const {
    return impl_->find(text);
}

token_type vocab::type_of(token t) const {
    if (!impl_->valid(t)) throw error(impl_->source + ": token id " + std::to_string(t) + " out of range");
    return impl_->tokens[size_t(t)].type;
}
const std::string &vocab::text_of(token t) const {
    if (!impl_->valid(t)) throw error(impl_->source + ": token id " + std::to_string(t) + " out of range");
    return impl_->tokens[size_t(t)].text;
}
float vocab::score_of(token t) const {
    if (!impl_->valid(t)) throw error(impl_->source + ": token id " + std::to_string(t) + " out of range");
    return impl_->tokens[size_t(t)].score;
}

// ---------------------------------------------------------------------------------------------
// tokenize

namespace {

struct fragment {
    token id;       // token_null: raw text
    size_t offset;  // raw text: the bytes [offset, offset + length) of the input
    size_t length;
};

}  // namespace

std::vector<token> vocab::impl::tokenize(std::string_view text, bool add_special, bool parse_special,
                                         std::span<const text_span> literal) const {
    // whether [at, at + n) touches a literal range
    const auto in_literal = [&](size_t at, size_t n) {
        for (const text_span &s : literal)
            if (at < s.offset + s.length && s.offset < at + n) return true;
        return false;
    };
    // Partition: each special token, longest first, is cut out of every raw fragment (control and
    // unknown tokens only when parse_special; user-defined ones always). lstrip / rstrip tokens eat
    // the whitespace beside them.
    std::vector<fragment> frags;
    if (!text.empty()) frags.push_back({token_null, 0, text.size()});
    std::vector<fragment> next;
    for (const token id : special_tokens) {
        const token_data &data = tokens[size_t(id)];
        if (!parse_special && (data.attr & (attr_control | attr_unknown))) continue;
        const std::string &needle = data.text;
        bool any = false;
        for (const fragment &f : frags) {
            if (f.id == token_null && f.length >= needle.size() &&
                text.substr(f.offset, f.length).find(needle) != std::string_view::npos) {
                any = true;
                break;
            }
        }
        if (!any) continue;
        next.clear();
        for (const fragment &f : frags) {
            if (f.id != token_null) {
                next.push_back(f);
                continue;
            }
            size_t offset = f.offset, length = f.length;
            const bool control = (data.attr & (attr_control | attr_unknown)) != 0;
            while (length > 0) {
                size_t match = text.substr(0, offset + length).find(needle, offset);
                while (control && match != std::string_view::npos && in_literal(match, needle.size()))
                    match = text.substr(0, offset + length).find(needle, match + 1);
                if (match == std::string_view::npos) break;
                size_t left_len = match - offset;
                if (data.attr & attr_lstrip) {
                    while (left_len > 0 && is_c_space(text[offset + left_len - 1])) --left_len;
                }
                if (left_len > 0) next.push_back({token_null, offset, left_len});
                next.push_back({id, 0, 0});
                size_t right_off = match + needle.size();
                size_t right_len = offset + length - right_off;
                if (data.attr & attr_rstrip) {
                    while (right_len > 0 && is_c_space(text[right_off])) ++right_off, --right_len;
                }
                offset = right_off;
                length = right_len;
            }
            if (length > 0) next.push_back({token_null, offset, length});
        }
        frags.swap(next);
    }

    std::vector<token> out;
    const auto push_if = [&](bool cond, token t) {
        if (cond && t != token_null) out.push_back(t);
    };
    switch (kind) {
        case vocab_kind::spm: {
            // OG SentencePiece: a space before the text and after every special token
            push_if(add_special && add_bos, bos);
            bool prev_special = true;
            for (const fragment &f : frags) {
                if (f.id != token_null) {
                    out.push_back(f.id);
                    prev_special = true;
                    continue;
                }
                std::string raw = add_space_prefix && prev_special ? " " : "";
                raw += text.substr(f.offset, f.length);
                tokenize_spm(escape_whitespace(raw), out);
                prev_special = false;
            }
            push_if(add_special && add_eos, eos);
            break;
        }
        case vocab_kind::bpe:
            push_if(add_special && add_bos, bos);
            for (const fragment &f : frags) {
                if (f.id != token_null) {
                    out.push_back(f.id);
                } else {
                    tokenize_bpe(text.substr(f.offset, f.length), out);
                }
            }
            push_if(add_special && add_eos, eos);
            break;
        case vocab_kind::wpm:
            push_if(add_special && add_bos, bos);  // [CLS]
            for (const fragment &f : frags) {
                if (f.id != token_null) {
                    out.push_back(f.id);
                } else {
                    tokenize_wpm(text.substr(f.offset, f.length), out);
                }
            }
            push_if(add_special && add_sep, sep);  // [SEP]
            push_if(add_special && add_eos, eos);
            break;
    }
    return out;
}

int32_t vocab::tokenize(std::string_view text, token *out, int32_t n_max, bool add_special,
                        bool parse_special) const {
    const std::vector<token> ids = impl_->tokenize(text, add_special, parse_special);
    if (ids.size() > size_t(std::numeric_limits<int32_t>::max())) {
        throw error(impl_->source + ": tokenization of " + std::to_string(text.size()) +
                    " bytes gives more than 2^31 tokens");
    }
    const int32_t n = int32_t(ids.size());
    if (n_max < n) return -n;
    std::copy(ids.begin(), ids.end(), out);
    return n;
}

std::vector<token> vocab::tokenize(std::string_view text, bool add_special, bool parse_special) const {
    return impl_->tokenize(text, add_special, parse_special);
}

std::vector<token> vocab::tokenize(std::string_view text, bool add_special, bool parse_special,
                                   std::span<const text_span> literal) const {
    return impl_->tokenize(text, add_special, parse_special, literal);
}

// ---------------------------------------------------------------------------------------------
// pieces

std::string vocab::impl::render_piece(token t) const {
    const token_data &d = tokens[size_t(t)];
    if (d.attr & (attr_unknown | attr_control | attr_user_defined)) return d.text;
    switch (kind) {
        case vocab_kind::spm:
        case vocab_kind::wpm:
            if (d.attr & attr_normal) return unescape_whitespace(d.text);
            if (d.attr & attr_byte) {
                // "<0xNN>"; a byte token spelled otherwise renders as its text
                if (d.text.size() == 6 && d.text.compare(0, 3, "<0x") == 0 && d.text[5] == '>') {
                    return std::string(1, char(std::strtoul(d.text.substr(3, 2).c_str(), nullptr, 16)));
                }
                return d.text;
            }
            return {};
        case vocab_kind::bpe:
            if (d.attr & attr_normal) return decode_byte_level(d.text);
            return {};
    }
    return {};
}

int32_t vocab::token_to_piece(token t, char *buf, int32_t len, bool special) const {
    if (!impl_->valid(t)) return 0;
    if (!special && (impl_->tokens[size_t(t)].attr & (attr_unknown | attr_control))) return 0;
    const std::string &piece = impl_->pieces[size_t(t)];
    const int32_t n = int32_t(piece.size());
    if (len < n) return -n;
    if (n > 0) std::memcpy(buf, piece.data(), size_t(n));
    return n;
}

std::string vocab::token_to_piece(token t, bool special) const {
    if (!impl_->valid(t)) return {};
    if (!special && (impl_->tokens[size_t(t)].attr & (attr_unknown | attr_control))) return {};
    return impl_->pieces[size_t(t)];
}

std::string vocab::detokenize(std::span<const token> ids, bool special) const {
    std::string text;
    bool remove_space = impl_->add_space_prefix;  // the space the tokenizer put before the text
    for (const token t : ids) {
        std::string_view piece;
        if (impl_->valid(t) &&
            (special || !(impl_->tokens[size_t(t)].attr & (attr_unknown | attr_control)))) {
            piece = impl_->pieces[size_t(t)];
        }
        if (remove_space && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
        remove_space = false;
        text += piece;
    }
    return impl_->clean_spaces ? clean_up_spaces(std::move(text)) : text;
}

}  // namespace weft
