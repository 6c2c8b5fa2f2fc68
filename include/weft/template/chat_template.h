// weft/template/chat_template.h — chat templates: a model's Jinja template rendered by the Jinja
// interpreter (jinja.h), and the hand-written families (detection from Jinja text, formatting) as
// the fallback.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

struct chat_message {
    std::string
        role;  // "system", "user", "assistant" (other roles are written as given where the family allows)
    std::string content;
};

// The families we format natively. A model's tokenizer.chat_template is recognised by substrings
// that only its family uses, and the family is written by hand-coded rules: the fallback when the
// Jinja template itself cannot be rendered.
enum class chat_template_kind {
    chatml,             // <|im_start|>role\ncontent<|im_end|>\n (Qwen, Yi, OpenHermes ...)
    llama2,             // [INST] user [/INST]assistant</s>, system text inlined
    llama2_sys,         // llama2 with <<SYS>>\n...\n<</SYS>>\n\n
    llama2_sys_bos,     // llama2_sys, later turns open with <s>[INST]
    llama2_sys_strip,   // llama2_sys with contents trimmed
    mistral_v1,         // " [INST] user [/INST] assistant</s>"
    mistral_v3,         // "[INST] user[/INST] assistant</s>", assistant trimmed
    mistral_v3_tekken,  // "[INST]user[/INST]assistant</s>"
    mistral_v7,         // [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST] ...</s>
    llama3,             // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
    phi3,               // <|role|>\ncontent<|end|>\n
    phi4,               // <|im_start|>role<|im_sep|>content<|im_end|>
    zephyr,             // <|role|>\ncontent<|endoftext|>\n
    gemma,              // <start_of_turn>user\n...<end_of_turn>\n; assistant is "model", system joins user
    command_r,          // <|START_OF_TURN_TOKEN|><|USER_TOKEN|>...<|END_OF_TURN_TOKEN|>
    deepseek3,          // system\n\n<｜User｜>...<｜Assistant｜>...<｜end▁of▁sentence｜> (V3, R1)
};

// "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1",
// "mistral-v3", "mistral-v3-tekken", "mistral-v7", "llama3", "phi3", "phi4", "zephyr", "gemma",
// "command-r", "deepseek3".
const char *chat_template_name(chat_template_kind kind);
std::optional<chat_template_kind> chat_template_from_name(std::string_view name);

// The family of `tmpl`, which is either a family name above or the Jinja text of a model's
// tokenizer.chat_template; nullopt when it is empty or not recognised.
std::optional<chat_template_kind> chat_template_detect(std::string_view tmpl);

// chat_template_detect, falling back to ChatML (the most widely understood format) when the
// template is empty or unknown.
chat_template_kind chat_template_resolve(std::string_view tmpl);

// The conversation as prompt text. add_assistant_prompt appends the opening of an assistant turn
// (nothing for the llama2 / mistral families, whose assistant turn begins right after [/INST]).
// BOS is not written: the tokenizer adds it.
std::string apply_chat_template(chat_template_kind kind, const std::vector<chat_message> &msgs,
                                bool add_assistant_prompt);
// The special tokens a Jinja chat template writes as bos_token / eos_token (from the vocabulary).
struct chat_template_tokens {
    std::string bos;
    std::string eos;
};

// Whether `tmpl` is Jinja text (it has "{%" or "{{"), as opposed to a family name or "".
bool chat_template_is_jinja(std::string_view tmpl);

// Whether the template thinks when asked to, as the reference decides whether to give it
// enable_thinking = true (a template it finds a reasoning section in) or false: the reference
// renders one user turn with enable_thinking false and true and looks for the tag the difference
// makes; this is that test in short: the two renderings differ by more than one character once
// their common start and end are taken away (DeepSeek V3.1's "</think>" against "<think>" is no
// section to it). Where they do not differ the value cannot change a prompt.
class jinja_template;
bool chat_template_thinks_when_asked(const jinja_template &tmpl, const chat_template_tokens &tokens);

// Renders the Jinja template `tmpl` with the interpreter: messages (role, content),
// add_generation_prompt, bos_token, eos_token and enable_thinking (as
// chat_template_thinks_when_asked says). One leading BOS the template writes is removed,
// as the tokenizer adds BOS itself. Throws jinja_error (weft/template/jinja.h: a syntax error, a
// failed render, or the template's own raise_exception).
std::string render_chat_template(std::string_view tmpl, const std::vector<chat_message> &msgs,
                                 bool add_assistant_prompt, const chat_template_tokens &tokens = {});

// A family name, a model's Jinja template, or "" (ChatML). Jinja text is rendered by
// render_chat_template; when that fails, and for names and "", the family of
// chat_template_resolve(tmpl) formats the conversation.
std::string apply_chat_template(const std::string &tmpl, const std::vector<chat_message> &msgs,
                                bool add_assistant_prompt, const chat_template_tokens &tokens = {});

}  // namespace weft
