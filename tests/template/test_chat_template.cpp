// tests/template/test_chat_template.cpp — exact text per template family, detection, prefix property.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "weft/template/chat_template.h"
#include "weft/template/jinja.h"

namespace weft {
namespace {

// system + user + assistant + user; the assistant reply carries outer spaces so the families that
// trim can be told from those that do not.
const std::vector<chat_message> conversation = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "  Hi there  "},
    {"user", "Who are you"},
};

struct expected_format {
    chat_template_kind kind;
    std::string without_prompt;
    std::string assistant_prompt;  // what add_assistant_prompt appends
};

const std::vector<expected_format> expected_formats = {
    {chat_template_kind::chatml,
     "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
     "<|im_start|>assistant\n  Hi there  <|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n",
     "<|im_start|>assistant\n"},
    {chat_template_kind::llama3,
     "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>",
     "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    {chat_template_kind::llama2,
     "[INST] You are a helpful assistant\nHello [/INST]  Hi there  </s>[INST] Who are you [/INST]", ""},
    {chat_template_kind::llama2_sys,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]  Hi there  </s>"
     "[INST] Who are you [/INST]",
     ""},
    {chat_template_kind::llama2_sys_bos,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]  Hi there  </s>"
     "<s>[INST] Who are you [/INST]",
     ""},
    {chat_template_kind::llama2_sys_strip,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
     "[INST] Who are you [/INST]",
     ""},
    {chat_template_kind::mistral_v1,
     " [INST] You are a helpful assistant\n\nHello [/INST]   Hi there  </s> [INST] Who are you [/INST]", ""},
    {chat_template_kind::mistral_v3,
     "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST]", ""},
    {chat_template_kind::mistral_v3_tekken,
     "[INST]You are a helpful assistant\n\nHello[/INST]  Hi there  </s>[INST]Who are you[/INST]", ""},
    {chat_template_kind::mistral_v7,
     "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST]   Hi there  </s>"
     "[INST] Who are you[/INST]",
     ""},
    {chat_template_kind::phi3,
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\n  Hi there  "
     "<|end|>\n<|user|>\nWho are you<|end|>\n",
     "<|assistant|>\n"},
    {chat_template_kind::phi4,
     "<|im_start|>system<|im_sep|>You are a helpful assistant<|im_end|><|im_start|>user<|im_sep|>Hello"
     "<|im_end|><|im_start|>assistant<|im_sep|>  Hi there  <|im_end|><|im_start|>user<|im_sep|>"
     "Who are you<|im_end|>",
     "<|im_start|>assistant<|im_sep|>"},
    {chat_template_kind::zephyr,
     "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n<|assistant|>\n"
     "  Hi there  <|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n",
     "<|assistant|>\n"},
    {chat_template_kind::gemma,
     "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\n"
     "Hi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n",
     "<start_of_turn>model\n"},
    {chat_template_kind::command_r,
     "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant<|END_OF_TURN_TOKEN|>"
     "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|>"
     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
     "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are you<|END_OF_TURN_TOKEN|>",
     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"},
    {chat_template_kind::deepseek3,
     "You are a helpful assistant\n\n<｜User｜>Hello<｜Assistant｜>  Hi there  <｜end▁of▁sentence｜>"
     "<｜User｜>Who are you",
     "<｜Assistant｜>"},
};

TEST(ChatTemplate, EveryFamilyExactText) {
    for (const auto &e : expected_formats) {
        SCOPED_TRACE(chat_template_name(e.kind));
        EXPECT_EQ(apply_chat_template(e.kind, conversation, false), e.without_prompt);
        EXPECT_EQ(apply_chat_template(e.kind, conversation, true), e.without_prompt + e.assistant_prompt);
        // by name, as a --chat-template override gives it
        EXPECT_EQ(apply_chat_template(std::string(chat_template_name(e.kind)), conversation, true),
                  e.without_prompt + e.assistant_prompt);
    }
}

TEST(ChatTemplate, NamesRoundTrip) {
    for (const auto &e : expected_formats)
        EXPECT_EQ(chat_template_from_name(chat_template_name(e.kind)), e.kind);
    EXPECT_EQ(chat_template_from_name("chatml"), chat_template_kind::chatml);
    EXPECT_EQ(chat_template_from_name("llama3"), chat_template_kind::llama3);
    EXPECT_EQ(chat_template_from_name("llama2"), chat_template_kind::llama2);
    EXPECT_EQ(chat_template_from_name("ChatML "), std::nullopt);
}

// Shortened but faithful copies of the Jinja templates that models ship in tokenizer.chat_template.
TEST(ChatTemplate, DetectsFamiliesFromJinja) {
    const std::string qwen2 =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
    const std::string llama3 =
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
        "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
        "{{ content }}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
    const std::string llama2_chat =
        "{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + "
        "messages[0]['content'] | trim + '\\n<</SYS>>\\n\\n' %}{% endif %}{% for message in messages %}"
        "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content | trim + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ ' ' + content | trim + ' ' + eos_token }}{% endif %}{% "
        "endfor %}";
    const std::string mistral_v01 =
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
        "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
        "{{ message['content'] + eos_token}}{% endif %}{% endfor %}";
    const std::string mistral_small =
        "{%- if messages[0]['role'] == 'system' %}{{- '[SYSTEM_PROMPT]' + messages[0]['content'] + "
        "'[/SYSTEM_PROMPT]' }}{%- endif %}{%- for message in loop_messages %}{%- if message['role'] == "
        "'user' %}"
        "{{- '[INST]' + message['content'] + '[/INST]' }}{%- endif %}{%- endfor %}";
    const std::string phi3 =
        "{% for message in messages %}{% if message['role'] == 'system' %}"
        "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
        "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}";
    const std::string tinyllama_zephyr =
        "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
        "message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  "
        "+ "
        "message['content'] + eos_token }}\n{% endif %}\n{% endfor %}";
    const std::string gemma =
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'assistant') %}"
        "{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
        "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}";
    const std::string phi4 =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '<|im_sep|>' + "
        "message['content'] + '<|im_end|>'}}{% endfor %}";
    const std::string command_r =
        "{{ bos_token }}{% for message in loop_messages %}{% if message['role'] == 'user' %}"
        "{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content.strip() + '<|END_OF_TURN_TOKEN|>' }}"
        "{% elif message['role'] == 'assistant' %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>'  + "
        "content.strip() + '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% endfor %}";
    const std::string deepseek_r1 =
        "{% for message in messages %}{%- if message['role'] == 'user' %}{{'<｜User｜>' + "
        "message['content']}}"
        "{%- endif %}{%- if message['role'] == 'assistant' %}{{'<｜Assistant｜>' + content + "
        "'<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{% if add_generation_prompt %}{{'<｜Assistant｜>"
        "<think>\\n'}}{% endif %}";

    EXPECT_EQ(chat_template_detect(qwen2), chat_template_kind::chatml);
    EXPECT_EQ(chat_template_detect(llama3), chat_template_kind::llama3);
    EXPECT_EQ(chat_template_detect(llama2_chat), chat_template_kind::llama2_sys_bos);
    EXPECT_EQ(chat_template_detect(mistral_v01), chat_template_kind::llama2);
    EXPECT_EQ(chat_template_detect(mistral_small), chat_template_kind::mistral_v7);
    EXPECT_EQ(chat_template_detect(phi3), chat_template_kind::phi3);
    EXPECT_EQ(chat_template_detect(tinyllama_zephyr), chat_template_kind::zephyr);
    EXPECT_EQ(chat_template_detect(gemma), chat_template_kind::gemma);
    EXPECT_EQ(chat_template_detect(phi4), chat_template_kind::phi4);
    EXPECT_EQ(chat_template_detect(command_r), chat_template_kind::command_r);
    EXPECT_EQ(chat_template_detect(deepseek_r1), chat_template_kind::deepseek3);

    // a model's template drives apply_chat_template directly
    EXPECT_EQ(apply_chat_template(llama3, {{"user", "Hi"}}, true),
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, EmptyOrUnknownFallsBackToChatML) {
    EXPECT_EQ(chat_template_detect(""), std::nullopt);
    EXPECT_EQ(chat_template_detect("{{ messages | tojson }}"), std::nullopt);
    EXPECT_EQ(chat_template_resolve(""), chat_template_kind::chatml);
    EXPECT_EQ(chat_template_resolve("{{ messages | tojson }}"), chat_template_kind::chatml);
    EXPECT_EQ(apply_chat_template(std::string(), {{"user", "Hi"}}, true),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// `weft chat` decodes only what a turn adds: the prompt of one turn must be a prefix of the
// conversation once the reply is in it, for every family (with a reply without outer whitespace).
TEST(ChatTemplate, TurnPromptIsPrefixOfTheNextConversation) {
    for (const auto &e : expected_formats) {
        SCOPED_TRACE(chat_template_name(e.kind));
        std::vector<chat_message> msgs = {{"system", "Be brief."}, {"user", "Hello"}};
        const std::string prompt = apply_chat_template(e.kind, msgs, true);
        msgs.push_back({"assistant", "Hi there"});
        const std::string after_reply = apply_chat_template(e.kind, msgs, false);
        EXPECT_EQ(after_reply.compare(0, prompt.size(), prompt), 0) << prompt << "\n---\n" << after_reply;
        EXPECT_NE(after_reply.find("Hi there", prompt.size()), std::string::npos);
        msgs.push_back({"user", "Again"});
        const std::string next_prompt = apply_chat_template(e.kind, msgs, true);
        EXPECT_EQ(next_prompt.compare(0, after_reply.size(), after_reply), 0);
    }
}

// Jinja text is rendered by the interpreter, with the model's BOS / EOS; the one leading BOS is
// dropped (the tokenizer adds it); when the render fails the family of the template is the fallback.
TEST(ChatTemplate, JinjaTemplatesAreRendered) {
    const std::string custom =
        "{{ bos_token }}{% for m in messages %}<{{ m.role | upper }}>{{ m.content | trim }}{{ eos_token }}"
        "{% endfor %}{% if add_generation_prompt %}<ASSISTANT>{% endif %}";
    EXPECT_TRUE(chat_template_is_jinja(custom));
    EXPECT_FALSE(chat_template_is_jinja("chatml"));
    EXPECT_FALSE(chat_template_is_jinja(""));
    EXPECT_EQ(apply_chat_template(custom, {{"system", " Be brief. "}, {"user", "Hi"}}, true, {"<s>", "</s>"}),
              "<SYSTEM>Be brief.</s><USER>Hi</s><ASSISTANT>");
    // only one BOS is removed, and only at the start
    EXPECT_EQ(render_chat_template("{{ bos_token }}{{ bos_token }}x{{ bos_token }}", {}, false, {"<s>", ""}),
              "<s>x<s>");
    EXPECT_EQ(render_chat_template("x{{ bos_token }}", {}, false, {"<s>", ""}), "x<s>");

    const std::string llama3 =
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
        "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
        "{{ content }}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
    EXPECT_EQ(apply_chat_template(llama3, conversation, true, {"<|begin_of_text|>", "<|eot_id|>"}),
              apply_chat_template(chat_template_kind::llama3, conversation, true));

    // Gemma's template rejects a system message; the gemma family folds it into the first user turn
    const std::string gemma =
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
        "supported') "
        "}}{% endif %}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = "
        "'model' "
        "%}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + "
        "message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt "
        "%}{{'<start_of_turn>model\n'}}{% endif %}";
    EXPECT_THROW(render_chat_template(gemma, conversation, true, {"<bos>", "<eos>"}), jinja_error);
    EXPECT_EQ(apply_chat_template(gemma, conversation, true, {"<bos>", "<eos>"}),
              apply_chat_template(chat_template_kind::gemma, conversation, true));
    EXPECT_EQ(apply_chat_template(gemma, {{"user", "Hi"}}, true, {"<bos>", "<eos>"}),
              "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");

    // beyond the subset (or broken): the family the markers name
    const std::string broken = "{% include 'chatml.jinja' %}<|im_start|>";
    EXPECT_THROW(render_chat_template(broken, {{"user", "Hi"}}, true), jinja_error);
    EXPECT_EQ(apply_chat_template(broken, {{"user", "Hi"}}, true),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, OtherRolesAndEmptyConversation) {
    EXPECT_EQ(apply_chat_template(chat_template_kind::chatml, {{"tool", "42"}}, false),
              "<|im_start|>tool\n42<|im_end|>\n");
    EXPECT_EQ(apply_chat_template(chat_template_kind::chatml, {}, true), "<|im_start|>assistant\n");
    EXPECT_EQ(apply_chat_template(chat_template_kind::llama3, {}, false), "");
}

}  // namespace
}  // namespace weft
