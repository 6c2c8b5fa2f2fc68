// tests/template/test_jinja.cpp — the Jinja-subset interpreter: real chat templates of popular model
// families and small feature probes against expectations rendered by Python's jinja2
// (scripts/jinja-oracle.py, checked in, and live when jinja2 is installed), errors with positions,
// and hostile templates that must fail fast with a clear message.
#include <gtest/gtest.h>

#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "weft/template/jinja.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

const fs::path data_dir = fs::path(WEFT_SOURCE_DIR) / "tests" / "template" / "jinja";

std::string read_file(const fs::path &p) {
    std::ifstream f(p, std::ios::binary);
    EXPECT_TRUE(f.good()) << p;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

jinja_value from_json(const json &j) {
    switch (j.type()) {
        case json::value_t::null:
            return jinja_value::none();
        case json::value_t::boolean:
            return jinja_value(j.get<bool>());
        case json::value_t::number_integer:
        case json::value_t::number_unsigned:
            return jinja_value(j.get<int64_t>());
        case json::value_t::number_float:
            return jinja_value(j.get<double>());
        case json::value_t::string:
            return jinja_value(j.get<std::string>());
        case json::value_t::array: {
            jinja_list l;
            for (const auto &x : j) l.push_back(from_json(x));
            return jinja_value(std::move(l));
        }
        case json::value_t::object: {
            jinja_value d = jinja_value::dict();
            for (const auto &[k, v] : j.items()) d.set(k, from_json(v));
            return d;
        }
        default:
            return jinja_value();
    }
}

// strftime_now at the oracle's fixed instant, 2024-07-26 09:30:00
jinja_value fixed_strftime_now() {
    return jinja_value(jinja_function([](jinja_call_args &a) -> jinja_value {
        std::tm tm{};
        tm.tm_year = 2024 - 1900;
        tm.tm_mon = 6;
        tm.tm_mday = 26;
        tm.tm_hour = 9;
        tm.tm_min = 30;
        tm.tm_wday = 5;
        tm.tm_yday = 207;
        char buf[128];
        const std::string fmt = a.positional.empty() ? "" : a.positional[0].as_string();
        return jinja_value(std::string(buf, std::strftime(buf, sizeof buf, fmt.c_str(), &tm)));
    }));
}

struct outcome {
    bool ok = true;
    std::string text;  // the rendering, or the error message
    bool raised = false;
};

outcome try_render(const std::function<std::string()> &fn) {
    try {
        return {true, fn(), false};
    } catch (const jinja_error &e) {
        return {false, e.what(), e.raised()};
    }
}

// The C++ rendering of one template with one conversation, set up like the oracle's.
outcome render_case(const std::string &name, const json &c, const std::string &conversation) {
    const json conv = json::parse(read_file(data_dir / "conversations" / (conversation + ".json")));
    return try_render([&] {
        const jinja_template tmpl(read_file(data_dir / "templates" / (name + ".jinja")));
        jinja_chat_params p;
        p.messages = from_json(conv["messages"]);
        if (conv.contains("tools")) p.tools = from_json(conv["tools"]);
        p.add_generation_prompt = conv.value("add_generation_prompt", false);
        p.bos_token = c.value("bos_token", "");
        p.eos_token = c.value("eos_token", "");
        p.extra = conv.contains("extra") ? from_json(conv["extra"]) : jinja_value::dict();
        p.extra.set("strftime_now", fixed_strftime_now());
        return jinja_render_chat(tmpl, p);
    });
}

// An expectation: {"ok": text} or {"error": message}; a template's raise_exception() must give
// the same message, any other failure only has to fail too (messages differ from Python's).
void expect_matches(const outcome &got, bool want_ok, const std::string &want) {
    if (want_ok) {
        EXPECT_TRUE(got.ok) << "failed: " << got.text;
        if (got.ok) {
            EXPECT_EQ(got.text, want);
        }
        return;
    }
    EXPECT_FALSE(got.ok) << "rendered, but jinja2 fails with " << want << "; got:\n" << got.text;
    const std::string prefix = "raise_exception: ";
    if (!got.ok && want.rfind(prefix, 0) == 0) {
        EXPECT_TRUE(got.raised) << got.text;
        EXPECT_EQ(got.text, want.substr(prefix.size()));
    }
}

// Every template x conversation of cases.json against the files in `expected`; returns the count.
int check_templates(const fs::path &expected) {
    const json cases = json::parse(read_file(data_dir / "cases.json"));
    int n = 0;
    for (const auto &[name, c] : cases.items()) {
        for (const auto &conv : c["conversations"]) {
            const std::string id = name + "--" + conv.get<std::string>();
            SCOPED_TRACE(id);
            const outcome got = render_case(name, c, conv.get<std::string>());
            if (fs::exists(expected / (id + ".txt")))
                expect_matches(got, true, read_file(expected / (id + ".txt")));
            else
                expect_matches(got, false, read_file(expected / (id + ".error")));
            ++n;
        }
    }
    return n;
}

int check_snippets(const fs::path &expected) {
    const json snippets = json::parse(read_file(data_dir / "snippets.json"));
    const json results = json::parse(read_file(expected / "snippets.json"));
    EXPECT_EQ(snippets.size(), results.size());
    for (size_t i = 0; i < snippets.size() && i < results.size(); ++i) {
        const std::string source = snippets[i]["template"];
        SCOPED_TRACE("snippet " + std::to_string(i) + ": " + source);
        jinja_value ctx =
            snippets[i].contains("context") ? from_json(snippets[i]["context"]) : jinja_value::dict();
        ctx.set("strftime_now", fixed_strftime_now());
        const outcome got = try_render([&] { return jinja_render(source, ctx); });
        const bool ok = results[i].contains("ok");
        expect_matches(got, ok, results[i][ok ? "ok" : "error"].get<std::string>());
    }
    return int(snippets.size());
}

TEST(Jinja, RealChatTemplatesMatchJinja2) {
    const json cases = json::parse(read_file(data_dir / "cases.json"));
    EXPECT_GE(cases.size(), 20u) << "the issue asks for at least 20 real chat templates";
    EXPECT_GE(check_templates(data_dir / "expected"), 100);
}

TEST(Jinja, FeatureSnippetsMatchJinja2) {
    EXPECT_GE(check_snippets(data_dir / "expected"), 50);
}

// Re-renders every expectation with the installed jinja2 and compares again, so a change of the
// test data cannot drift from the oracle unnoticed.
TEST(Jinja, LiveOracleAgrees) {
    if (std::system("python3 -c 'import jinja2' >/dev/null 2>&1") != 0)
        GTEST_SKIP() << "python3 with jinja2 is not installed (Debian: python3-jinja2); the checked-in "
                        "expectations were still compared";
    const fs::path out = fs::temp_directory_path() / ("weft-jinja-oracle-" + std::to_string(::getpid()));
    const std::string cmd = "python3 '" +
                            (fs::path(WEFT_SOURCE_DIR) / "scripts" / "jinja-oracle.py").string() +
                            "' generate --out '" + out.string() + "' >/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    check_templates(out);
    check_snippets(out);
    // and the checked-in files are what the oracle writes today
    for (const auto &entry : fs::directory_iterator(out)) {
        SCOPED_TRACE(entry.path().filename().string());
        const fs::path checked_in = data_dir / "expected" / entry.path().filename();
        ASSERT_TRUE(fs::exists(checked_in)) << "run scripts/jinja-oracle.py generate";
        EXPECT_EQ(read_file(entry.path()), read_file(checked_in)) << "run scripts/jinja-oracle.py generate";
    }
    fs::remove_all(out);
}

TEST(Jinja, ParseOnceRenderMany) {
    const jinja_template t("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ n }}");
    jinja_value ctx = jinja_value::dict();
    jinja_value msgs = jinja_value::list();
    jinja_value m = jinja_value::dict();
    m.set("role", "user");
    m.set("content", "hi");
    msgs.push_back(m);
    ctx.set("messages", msgs);
    for (int i = 0; i < 3; ++i) {
        ctx.set("n", jinja_value(i));
        EXPECT_EQ(t.render(ctx), "[user:hi]" + std::to_string(i));
    }
}

TEST(Jinja, ValuesPrintLikePython) {
    jinja_value d = jinja_value::dict();
    d.set("a",
          jinja_value(jinja_list{jinja_value(1), jinja_value(2.5), jinja_value("x'y"), jinja_value::none()}));
    d.set("b", jinja_value(true));
    EXPECT_EQ(jinja_str(d), "{'a': [1, 2.5, \"x'y\", None], 'b': True}");
    EXPECT_EQ(jinja_tojson(d), "{\"a\": [1, 2.5, \"x'y\", null], \"b\": true}");
    EXPECT_EQ(jinja_tojson(jinja_value("é\n\x01")), "\"é\\n\\u0001\"");
    EXPECT_EQ(jinja_str(jinja_value(1e16)), "1e+16");
    EXPECT_EQ(jinja_str(jinja_value(123456789012345.0)), "123456789012345.0");
    EXPECT_EQ(jinja_str(jinja_value(-0.0001)), "-0.0001");
    EXPECT_EQ(jinja_str(jinja_value::tuple({jinja_value(1)})), "(1,)");
    EXPECT_TRUE(jinja_equal(jinja_value(1), jinja_value(1.0)));
    EXPECT_FALSE(jinja_equal(jinja_value("1"), jinja_value(1)));
    EXPECT_FALSE(jinja_value::dict().truthy());
    EXPECT_TRUE(jinja_value(" ").truthy());
}

// A failure names the line and column of the template.
TEST(Jinja, ErrorsNameLineAndColumn) {
    const auto message = [](const std::string &src) {
        try {
            jinja_render(src, jinja_value::dict());
        } catch (const jinja_error &e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_EQ(message("ab\n  {{ 'x' | frobnicate }}"), "line 2, column 12: unknown filter 'frobnicate'");
    EXPECT_EQ(message("{{ x is frob }}"), "line 1, column 6: unknown test 'frob'");
    EXPECT_NE(message("\n\n{% if true %}open").find("line 3"), std::string::npos);
    EXPECT_NE(message("{% if true %}open").find("missing {% endif %}"), std::string::npos);
    EXPECT_NE(message("text {{ 1 + 2").find("unterminated '{{'"), std::string::npos);
    EXPECT_NE(message("{% for x in y %}").find("missing {% endfor %}"), std::string::npos);
    EXPECT_NE(message("{# open comment").find("unterminated comment"), std::string::npos);
    EXPECT_NE(message("{{ 'abc }}").find("unterminated string"), std::string::npos);
    EXPECT_NE(message("{% include 'x' %}").find("unsupported statement 'include'"), std::string::npos);
    EXPECT_EQ(message("x\n{{ a.b }}"), "line 2, column 5: 'a' is undefined");
    EXPECT_EQ(message("{{ 1 +\n none }}"),
              "line 1, column 6: unsupported operand type(s) for +: 'int' and 'NoneType'");
    EXPECT_EQ(message("{{ a \xe2\x82\xac b }}"), "line 1, column 6: unexpected character byte 0xe2");
    EXPECT_EQ(message("{{ a ! b }}"), "line 1, column 6: unexpected character '!'");
    EXPECT_EQ(message("{{ none() }}"), "line 1, column 8: 'NoneType' object is not callable");

    try {
        jinja_render("\n  {{ raise_exception('roles must alternate') }}", jinja_value::dict());
        FAIL() << "no error";
    } catch (const jinja_error &e) {
        EXPECT_TRUE(e.raised());
        EXPECT_STREQ(e.what(), "roles must alternate");
        EXPECT_EQ(e.line(), 2);
    }
}

// Hostile templates fail with a clear message, fast, without exhausting the stack or memory.
TEST(Jinja, HostileTemplatesFailFast) {
    const auto start = std::chrono::steady_clock::now();
    const auto expect_error = [](const std::string &src, const std::string &needle) {
        SCOPED_TRACE(src.substr(0, 80));
        try {
            jinja_render(src, jinja_value::dict());
            ADD_FAILURE() << "rendered without error";
        } catch (const jinja_error &e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    // unbounded macro recursion, and recursion that branches
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "macro calls nest deeper than");
    expect_error("{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(0) }}",
                 "macro calls nest deeper than");
    // (over the step budget, or over the time budget on a slow machine or a sanitizer build)
    expect_error(
        "{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}",
        "render exceeds");
    // huge ranges and loops
    expect_error("{% for i in range(10**9) %}x{% endfor %}", "range() of more than");
    expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                 "render exceeds");
    // output and string growth
    expect_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "rendered text exceeds");
    expect_error(
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "exceeds");
    expect_error("{{ 'x' * 10**12 }}", "exceeds");
    expect_error("{{ [1] * 10**9 }}", "list exceeds");
    expect_error("{{ 10 ** 10 ** 10 }}", "overflow");
    // deep nesting in the source and in values
    expect_error("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}", "nests deeper");
    expect_error("{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}", "nests deeper");
    std::string chain = "{{ 1";
    for (int i = 0; i < 100000; ++i) chain += " + 1";
    expect_error(chain + " }}", "nests deeper");
    expect_error("{{ " + std::string(50000, '{') + std::string(50000, '}') + " }}", "nests deeper");
    std::string ifs;
    for (int i = 0; i < 10000; ++i) ifs += "{% if 1 %}";
    expect_error(ifs, "nests deeper");
    expect_error(
        "{% set ns = namespace(v=[]) %}{% for i in range(100000) %}{% set ns.v = [ns.v] %}{% endfor %}",
        "value nests deeper");
    expect_error("{{ '{{' ~ x }", "unterminated");
    // many large values kept at once
    expect_error(
        "{% set ns = namespace(all=[], s='x' * 4000000) %}{% for i in range(100000) %}"
        "{% set ns.all = ns.all + [ns.s ~ i] %}{% endfor %}",
        "render allocates more than");
    // a value that holds itself is refused (printing or freeing it would never end)
    expect_error("{% set ns = namespace() %}{% set ns.me = ns %}", "value nests deeper");
    expect_error("{% set l = [] %}{% do l.append(l) %}", "value nests deeper");
    expect_error("{% set d = {} %}{% do d.update({'d': d}) %}", "value nests deeper");
    // large but legal work stays fast (unique is not quadratic)
    EXPECT_EQ(jinja_render("{{ (range(100000) | list + range(100000) | list) | unique | list | length }}",
                           jinja_value::dict()),
              "100000");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 30.0);
}

TEST(Jinja, ChatHelperPassesTheVariables) {
    const jinja_template t(
        "{{ bos_token }}{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}"
        "{% if tools is defined %}tools={{ tools | length }};{% endif %}{% if add_generation_prompt %}>{% "
        "endif %}"
        "{{ eos_token }}{{ extra_var }}");
    jinja_chat_params p;
    jinja_value m = jinja_value::dict();
    m.set("role", "user");
    m.set("content", "hi");
    p.messages.push_back(m);
    p.bos_token = "<s>";
    p.eos_token = "</s>";
    p.add_generation_prompt = true;
    p.extra = jinja_value::dict();
    p.extra.set("extra_var", "!");
    EXPECT_EQ(jinja_render_chat(t, p), "<s>user=hi;></s>!");
    p.tools = jinja_value::list();
    p.tools.push_back(jinja_value::dict());
    EXPECT_EQ(jinja_render_chat(t, p), "<s>user=hi;tools=1;></s>!");
}

}  // namespace
}  // namespace weft
