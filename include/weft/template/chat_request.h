// weft/template/chat_request.h — a chat request's messages made ready for a model's Jinja chat
// template the way the reference server makes them ready, so that the template renders the same
// prompt: tool call arguments sent as JSON text become the objects the templates expect, a null
// content is "", and an assistant turn's reasoning_content is also given as `thinking` (the name
// gpt-oss's template reads).
#pragma once

#include <optional>
#include <string_view>

#include "weft/template/chat_template.h"
#include "weft/template/jinja.h"

namespace weft {

// JSON text as a Jinja value (objects keep their key order); nullopt when it is not one JSON value.
std::optional<jinja_value> jinja_parse_json(std::string_view text);

// A copy of `messages` (a list of dicts as the client sent them; the input is not changed) with
// (when object_arguments) each assistant tool call's function.arguments that is a JSON object's
// text replaced by the object,
// a null content as "", and reasoning_content copied to thinking where a message has no thinking of
// its own.
jinja_value prepare_chat_messages(const jinja_value &messages, bool object_arguments);

// A chat request as a chat template sees it.
struct chat_request {
    jinja_value messages = jinja_value::list();  // as sent: role, content, tool_calls, reasoning_content ...
    jinja_value tools;                           // the tools offered, or undefined
    jinja_value kwargs;  // a dict of more variables (chat_template_kwargs: enable_thinking ...), or undefined
    bool add_generation_prompt = true;
    jinja_value strftime_now;  // a function for strftime_now(), or undefined for the clock's
};

// The prompt: the messages prepared as above, rendered with the tools, the kwargs, bos_token and
// eos_token; one leading BOS the template writes is removed (the tokenizer adds it), as the
// reference does. Tool call arguments go in as objects, which most templates expect (tojson,
// items()); a template that fails with them is rendered again with the arguments as sent (those
// that join them as text, as the reference finds by probing the template). enable_thinking is
// given as chat_template_thinks_when_asked says (the kwargs may override it), and for Gemma 4's first
// template each assistant(tool calls) -> tool... -> assistant run becomes one turn with
// `tool_responses`, as the reference's workaround makes it. Throws jinja_error.
std::string render_chat_request(const jinja_template &tmpl, const chat_request &request,
                                const chat_template_tokens &tokens);

}  // namespace weft
