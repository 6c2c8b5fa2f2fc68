// weft/template/jinja.h — a Jinja-subset interpreter for chat templates: values, errors, limits,
// a parsed template that renders many times, and a helper that renders a chat conversation.
//
// The subset is what Hugging Face chat templates use (jinja2 with trim_blocks and lstrip_blocks,
// in a sandbox): expressions, filters, tests, if / for / set / macro / filter / generation blocks,
// namespaces, loop controls and raise_exception. Values behave like their Python counterparts:
// truthiness, str() of lists and dicts, equality of 1 and 1.0, tojson like json.dumps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft {

// A bad template or a failed render. The message names the line and column of the template
// ("line 3, column 14: unknown filter 'frobnicate'"); raised() tells a template's own
// raise_exception(...) apart, whose message is what the template said.
class jinja_error : public std::runtime_error {
  public:
    jinja_error(const std::string &what, int line, int column, bool raised = false);
    int line() const { return line_; }
    int column() const { return column_; }
    bool raised() const { return raised_; }

  private:
    int line_;
    int column_;
    bool raised_;
};

class jinja_value;
struct jinja_call_args;
using jinja_list = std::vector<jinja_value>;
using jinja_function = std::function<jinja_value(jinja_call_args &)>;

// Insertion-ordered string-keyed map (Python dict); a namespace() is a dict with is_namespace set.
struct jinja_dict {
    std::vector<std::pair<std::string, jinja_value>> items;
    bool is_namespace = false;

    const jinja_value *find(std::string_view key) const;
    jinja_value *find(std::string_view key);
    void set(std::string key, jinja_value value);
};

// A dynamic value. Lists, dicts and functions are shared by reference, as Python objects are:
// a copy of a jinja_value that holds a list sees the changes made through the other. Strings are
// immutable and shared too.
class jinja_value {
  public:
    enum class kind { undefined, none, boolean, integer, floating, string, list, dict, function };

    jinja_value() = default;  // undefined
    jinja_value(std::nullptr_t) : kind_(kind::none) {}
    jinja_value(bool b) : kind_(kind::boolean), int_(b) {}
    jinja_value(int i) : kind_(kind::integer), int_(i) {}
    jinja_value(int64_t i) : kind_(kind::integer), int_(i) {}
    jinja_value(double f) : kind_(kind::floating), float_(f) {}
    jinja_value(const char *s) : kind_(kind::string), str_(std::make_shared<const std::string>(s)) {}
    jinja_value(std::string s)
        : kind_(kind::string), str_(std::make_shared<const std::string>(std::move(s))) {}
    jinja_value(std::string_view s) : kind_(kind::string), str_(std::make_shared<const std::string>(s)) {}
    jinja_value(jinja_list l);
    jinja_value(jinja_dict d);
    jinja_value(jinja_function f);

    static jinja_value none() { return jinja_value(nullptr); }
    static jinja_value list() { return jinja_value(jinja_list{}); }
    static jinja_value dict() { return jinja_value(jinja_dict{}); }
    // A Python tuple: a list that prints as (a, b) and is not equal to a list.
    static jinja_value tuple(jinja_list l);
    // What jinja2's select / reject / map / unique / batch / items filters return: a Python
    // generator, always true, without len(), not subscriptable, and empty once iterated.
    static jinja_value generator(jinja_list l);
    // An undefined value that remembers the name it was looked up by, for error messages.
    static jinja_value undefined(std::string name);

    kind type() const { return kind_; }
    bool is_undefined() const { return kind_ == kind::undefined; }
    bool is_none() const { return kind_ == kind::none; }
    bool is_bool() const { return kind_ == kind::boolean; }
    bool is_int() const { return kind_ == kind::integer; }
    bool is_float() const { return kind_ == kind::floating; }
    bool is_number() const {
        return kind_ == kind::integer || kind_ == kind::floating || kind_ == kind::boolean;
    }
    bool is_string() const { return kind_ == kind::string; }
    bool is_list() const { return kind_ == kind::list; }
    bool is_dict() const { return kind_ == kind::dict; }
    bool is_function() const { return kind_ == kind::function; }
    bool is_tuple() const { return tuple_; }
    bool is_generator() const { return generator_; }

    bool as_bool() const { return int_ != 0; }
    int64_t as_int() const { return int_; }  // integer or boolean
    double as_float() const { return kind_ == kind::floating ? float_ : double(int_); }
    // the string, or the undefined's name
    const std::string &as_string() const { return str_ ? *str_ : empty_string(); }
    // the shared container: only for is_list() / is_dict() / is_function() values
    jinja_list &as_list() const { return *list_; }
    jinja_dict &as_dict() const { return *dict_; }
    const jinja_function &as_function() const { return *fn_; }

    bool truthy() const;  // Python truthiness
    // dict helpers: set a key (the value must be a dict); get a key or undefined
    void set(std::string key, jinja_value v);
    jinja_value get(std::string_view key) const;
    void push_back(jinja_value v);  // the value must be a list

  private:
    static const std::string &empty_string();

    kind kind_ = kind::undefined;
    bool tuple_ = false;
    bool generator_ = false;
    int64_t int_ = 0;
    double float_ = 0;
    std::shared_ptr<const std::string> str_;  // shared and immutable: copies of values are cheap
    std::shared_ptr<jinja_list> list_;
    std::shared_ptr<jinja_dict> dict_;
    std::shared_ptr<jinja_function> fn_;
};

// Arguments of a call: positional, then keyword in the order given.
struct jinja_call_args {
    std::vector<jinja_value> positional;
    std::vector<std::pair<std::string, jinja_value>> keyword;
};

// Python's str() and repr() of a value, and json.dumps(value, ensure_ascii=False, indent=...)
// (indent < 0: on one line with ", " and ": "). `limit` caps the size of the text: a longer one is
// an error rather than an allocation without bound.
std::string jinja_str(const jinja_value &v, size_t limit = SIZE_MAX);
std::string jinja_repr(const jinja_value &v, size_t limit = SIZE_MAX);
std::string jinja_tojson(const jinja_value &v, int indent = -1, size_t limit = SIZE_MAX);
// The json.dumps options HF's tojson filter passes on. Unset separators are json.dumps's defaults:
// ", " and ": " on one line, "," and ": " with an indent.
struct jinja_json_format {
    int indent = -1;
    std::optional<std::string> item_separator;
    std::optional<std::string> key_separator;
    bool sort_keys = false;
    bool ensure_ascii = false;  // true: non-ASCII as \uXXXX (surrogate pairs above U+FFFF)
};
std::string jinja_tojson(const jinja_value &v, const jinja_json_format &format, size_t limit = SIZE_MAX);
// Python ==
bool jinja_equal(const jinja_value &a, const jinja_value &b);

// The lexer options HF transformers renders chat templates with, and the bounds that keep a
// hostile template from taking unbounded time or memory.
struct jinja_options {
    bool trim_blocks = true;              // drop the first newline after a block tag
    bool lstrip_blocks = true;            // drop spaces and tabs before a block tag at the start of a line
    size_t max_output = size_t(8) << 20;  // bytes of rendered text, and of any one string value
    size_t max_list = size_t(1) << 20;    // elements of any one list
    int64_t max_iterations = 1000000;     // loop iterations and macro calls in one render, together
    int64_t max_range = 100000;           // elements of one range() (jinja2's sandbox allows 100000)
    int max_call_depth = 128;             // nested macro calls
    int max_nesting = 256;                // nested blocks and expressions when parsing
    int max_value_depth = 256;            // lists and dicts nested in one another
    double max_seconds = 10;              // wall time of one render
    // bytes of the strings and lists that operators, filters and calls create in one render, all
    // together: bounds the memory a template can fill by keeping many large values
    size_t max_alloc = size_t(256) << 20;
};

namespace jinja_detail {
struct program;
}

// A parsed template: parse once (syntax errors are thrown here), render many times.
class jinja_template {
  public:
    explicit jinja_template(std::string_view source, jinja_options options = {});
    ~jinja_template();
    jinja_template(jinja_template &&) noexcept;
    jinja_template &operator=(jinja_template &&) noexcept;

    // `context` is a dict of variables (or undefined for none). Throws jinja_error.
    std::string render(const jinja_value &context) const;

    // The template's text, as given (the chat request code recognises a few families by it).
    const std::string &source() const { return source_; }

  private:
    std::unique_ptr<jinja_detail::program> program_;
    jinja_options options_;
    std::string source_;
};

// Parse and render in one step.
std::string jinja_render(std::string_view source, const jinja_value &context,
                         const jinja_options &options = {});

// The variables a chat template is rendered with, as transformers' apply_chat_template passes them.
struct jinja_chat_params {
    jinja_value messages = jinja_value::list();  // list of dicts: role, content, tool_calls, name ...
    jinja_value tools;                           // a list of tool schemas, or undefined for none
    bool add_generation_prompt = false;
    std::string bos_token;
    std::string eos_token;
    jinja_value extra;  // a dict of more variables (enable_thinking, date_string ...), or undefined
};
std::string jinja_render_chat(const jinja_template &tmpl, const jinja_chat_params &params);

}  // namespace weft
