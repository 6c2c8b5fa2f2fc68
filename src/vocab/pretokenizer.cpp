// src/vocab/pretokenizer.cpp — pre-tokenizer names → regex chains, and the PCRE2 chain splitter.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "vocab/pretokenizer.h"

#include <pcre2.h>

#include <initializer_list>

#include "vocab/unicode.h"
#include "weft/core/error.h"

namespace weft {

namespace {

// The regexes of the established engine (llama.cpp's llm_tokenizer_bpe), by family.
const char *const k_gpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
// The original is "(?i:'s|'t|...)"; the case-insensitive group is spelled out so that only ASCII
// letters fold (PCRE2 would also fold U+017F into 's'), as the established engine does.
const char *const k_llama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char *const k_qwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char *const k_bloom = " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+";
// Tekken and GPT-4o: PCRE2 understands the original expressions of tokenizer.json, so they are
// used directly instead of the established engine's ASCII approximation of \p{Lu}/\p{Ll}.
const char *const k_tekken =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}"
    "\\p{N}]?[\\p{"
    "Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/"
    "]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char *const k_gpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|"
    "'[rR][eE]|'["
    "vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{"
    "Lm}\\p{Lo}\\p{"
    "M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/"
    "]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct family {
    std::initializer_list<const char *> names;
    std::initializer_list<const char *> regexes;
    bool clean_spaces = true;
    bool ignore_merges = false;
    bool default_add_bos = false;
};

const family k_families[] = {
    // default: what the established engine uses when tokenizer.ggml.pre is absent or "default"
    {{"default"}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", k_gpt2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "midm-2.0", "lfm2"},
     {k_llama3},
     true,
     true,
     true},
    {{"dbrx", "smaug-bpe"}, {k_llama3}},
    // the letter class is spelled with \x{} escapes: several of its characters (U+1FD3, U+212A ...)
    // have singleton canonical decompositions and would not survive an editor's NFC normalization
    {{"deepseek-llm"},
     {"[\r\n]",
      "\\s?["
      "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
      "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
      "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
      "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"
      "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
      "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"
      "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}"
      "\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}"
      "\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}"
      "\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"
      "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}"
      "\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}"
      "\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}"
      "\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
      "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"
      "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
      "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
      "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+", "\\s+$",
      "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}+"},
     false},
    {{"deepseek-v3"},
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
      "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
     false},
    {{"deepseek-coder"},
     {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
      "\\p{N}"},
     false},
    {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", k_gpt2, "[0-9][0-9][0-9]"}},
    {{"starcoder", "refact", "smollm", "codeshell", "exaone", "minerva-7b"}, {"\\p{N}", k_gpt2}},
    {{"command-r"}, {"\\p{N}", k_gpt2}, false},
    {{"gpt-2", "gpt2", "phi-2", "gpt-neox", "mpt", "olmo", "jais", "trillion", "jina-es", "jina-de",
      "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe"},
     {k_gpt2}},
    {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan"}, {k_qwen2}, false},
    {{"poro-chat"}, {k_bloom}, false},
    {{"bloom", "gpt3-finnish"}, {k_bloom}},
    {{"viking"}, {k_bloom, "\\p{N}"}, false},
    {{"chatglm-bpe"}, {k_llama3}},
    {{"tekken"}, {k_tekken}, false, true, true},
    {{"chameleon"},
     {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
      "[\\p{P}!-/:-@\\[-`{-~]", k_gpt2},
     false,
     false,
     true},
    {{"gpt-4o", "llama4"}, {k_gpt4o}, false},
};

}  // namespace

bool pretokenizer_lookup(const std::string &pre, pretokenizer_config &out) {
    const std::string name = pre.empty() ? "default" : pre;
    for (const auto &f : k_families) {
        for (const char *n : f.names) {
            if (name != n) continue;
            out.regexes.assign(f.regexes.begin(), f.regexes.end());
            out.clean_spaces = f.clean_spaces;
            out.ignore_merges = f.ignore_merges;
            out.default_add_bos = f.default_add_bos;
            return true;
        }
    }
    return false;
}

struct regex_chain::compiled {
    pcre2_code *code = nullptr;
    bool jit = false;
    ~compiled() { pcre2_code_free(code); }
};

regex_chain::regex_chain(const std::vector<std::string> &regexes) {
    for (const auto &re : regexes) {
        int err = 0;
        PCRE2_SIZE err_offset = 0;
        auto c = std::make_unique<compiled>();
        c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_MATCH_INVALID_UTF, &err,
                                &err_offset, nullptr);
        if (!c->code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            throw error("pre-tokenizer regex '" + re + "' at offset " + std::to_string(err_offset) + ": " +
                        reinterpret_cast<const char *>(msg));
        }
        c->jit = pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE) == 0;
        compiled_.push_back(std::move(c));
    }
}

regex_chain::~regex_chain() = default;

std::vector<std::string_view> regex_chain::split(std::string_view text) const {
    std::vector<std::string_view> pieces;
    if (text.empty()) return pieces;
    pieces.push_back(text);
    std::vector<std::string_view> next;
    for (const auto &c : compiled_) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(c->code, nullptr);
        WEFT_ASSERT(md != nullptr);
        next.clear();
        next.reserve(pieces.size() * 2);
        for (std::string_view piece : pieces) {
            const auto *subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
            size_t pos = 0, gap_start = 0;
            while (pos <= piece.size()) {
                const int rc = c->jit ? pcre2_jit_match(c->code, subject, piece.size(), pos, 0, md, nullptr)
                                      : pcre2_match(c->code, subject, piece.size(), pos, 0, md, nullptr);
                if (rc < 0) {
                    if (rc == PCRE2_ERROR_NOMATCH) break;
                    pcre2_match_data_free(md);
                    PCRE2_UCHAR msg[256];
                    pcre2_get_error_message(rc, msg, sizeof msg);
                    throw error(std::string("pre-tokenizer regex match failed: ") +
                                reinterpret_cast<const char *>(msg));
                }
                const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                const size_t begin = ov[0], end = ov[1];
                if (end == begin) {
                    // an empty match splits nothing: step over one character and look again
                    if (begin >= piece.size()) break;
                    const size_t n = unicode::valid_sequence_length(piece, begin);
                    pos = begin + (n ? n : 1);
                    continue;
                }
                if (begin > gap_start) next.push_back(piece.substr(gap_start, begin - gap_start));
                next.push_back(piece.substr(begin, end - begin));
                gap_start = pos = end;
            }
            if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
        }
        pcre2_match_data_free(md);
        pieces.swap(next);
    }
    return pieces;
}

}  // namespace weft
