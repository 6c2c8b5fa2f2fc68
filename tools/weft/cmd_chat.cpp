// tools/weft/cmd_chat.cpp — `weft chat`: a conversation kept in the KV cache, one decode per new text.
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "weft/cache_types.h"
#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/device_options.h"
#include "weft/file_arguments.h"
#include "weft/grammar/grammar.h"
#include "weft/grammar_options.h"
#include "weft/lora_options.h"
#include "weft/model/model.h"
#include "weft/numa_options.h"
#include "weft/runtime/context.h"
#include "weft/sampling/sampling.h"
#include "weft/sampling_options.h"
#include "weft/serving/conversation.h"
#include "weft/serving/engine.h"
#include "weft/speculative_options.h"
#include "weft/template/chat_template.h"
#include "weft/template/reasoning.h"

namespace weft::tool {
namespace {

struct chat_options {
    std::string model_path;
    std::string system_prompt;
    std::string chat_template;  // a family name or Jinja text; empty: the model's own
    int32_t n_predict = 512;    // tokens per reply; < 0: until end of generation or a full context
    int32_t n_threads = 0;      // 0: the hardware's, at most 4 (as `weft run`)
    uint32_t n_ctx = 0;         // 0: the model's training context, at most 4096
    uint32_t n_batch = 512;
    bool verbose = false;
    std::string reasoning_format = "auto";  // where the reply's thoughts go (weft/template/reasoning.h)
    bool no_context_shift = false;
    int32_t n_keep = -1;  // tokens a context shift keeps after the BOS; -1: through the system message
    std::string save_path, load_path;
    tool::sampling_options sampling;
    cache_type_options cache_types;
    device_options devices;
    speculative_options speculative;
    lora_options loras;
};

// Set by SIGINT (interactive sessions only): stops the reply being generated; at the "> " prompt
// the interrupted read ends the chat.
volatile std::sig_atomic_t interrupted = 0;

void on_sigint(int) {
    interrupted = 1;
}

class context_full : public error {
  public:
    using error::error;
};

// Runs the conversation through the engine's one slot. kv_text_ is the formatted conversation as
// tokenized so far, kept in pieces (a turn's new prompt text, then one piece per generated token)
// with the tokens that spell them; each turn sends the tokens of the pieces its formatted prompt
// still starts with plus the new text's, and the engine reuses the cache cells of the prefix it
// shares with what the slot holds. A template that rewrites the reply (trims it, say) so drops
// only the pieces that changed.
//
// Context shift: when the slot's context fills (during a reply, or before a turn whose prompt would
// not fit), the first keep_ tokens stay and the oldest tokens after them go. The slot then holds
// tokens_[0, keep_) and tokens_[keep_ + dropped_, end): one run is ever dropped, since the kept start
// never changes. tokens_ and the text pieces stay whole; held() is what is sent.
class chat_session {
  public:
    chat_session(const model &m, serving::engine &eng, const sampling_params &sampling,
                 const serving::template_choice &tmpl, const chat_options &opt)
        : model_(m), engine_(eng), sampling_(sampling), template_(tmpl), opt_(opt) {
        if (!opt.system_prompt.empty()) messages_.push_back({"system", opt.system_prompt});
    }

    // One user turn: formats the conversation, generates the reply through the engine, streams it
    // to stdout. Throws context_full when the conversation outgrows the context.
    void turn(const std::string &user_text) {
        messages_.push_back({"user", user_text});
        std::vector<text_span> contents;  // the messages' text: never control tokens
        const std::string prompt = template_.format(messages_, true, contents);
        keep_shared_prefix(prompt);
        const std::string new_text = prompt.substr(kv_text_.size());
        std::vector<text_span> literal;  // the contents' ranges within new_text
        for (const text_span &s : contents)
            if (s.offset + s.length > kv_text_.size()) {
                const size_t begin = std::max(s.offset, kv_text_.size());
                literal.push_back({begin - kv_text_.size(), s.offset + s.length - begin});
            }
        const bool first = tokens_.empty();
        const std::vector<token> new_tokens = model_.vocab().tokenize(new_text, first, true, literal);
        if (new_tokens.empty())
            throw error("turn " + std::to_string(n_turns_ + 1) + ": the formatted prompt adds no tokens");
        if (first) choose_keep(prompt, contents, new_tokens, literal);
        tokens_.insert(tokens_.end(), new_tokens.begin(), new_tokens.end());
        kv_text_ += new_text;
        pieces_.push_back({kv_text_.size(), tokens_.size()});
        make_room();

        const int32_t held_before = engine_.stats().slots[0].n_cached;
        serving::request r;
        r.prompt = held();
        r.n_keep = int32_t(keep_);
        r.max_tokens = opt_.n_predict;
        r.sampling = sampling_;
        if (sampling_.seed != sampler_seed_random) r.sampling.seed = sampling_.seed + uint32_t(n_turns_);
        r.slot = 0;
        // the reply's thoughts go to stderr, dimmed on a terminal, marked "[thinking]" otherwise;
        // the answer to stdout
        const std::string &tmpl = template_.jinja.empty() ? template_.name() : template_.jinja;
        reasoning_splitter splitter(reasoning_style_of(tmpl, prompt),
                                    *reasoning_format_from_name(opt_.reasoning_format));
        bool thinking = false;
        const bool dim = isatty(fileno(stderr)) != 0;
        auto show = [&](const reasoning_split &piece) {
            if (!piece.reasoning.empty()) {
                if (!thinking) std::fputs(dim ? "\x1b[2m" : "[thinking] ", stderr);
                thinking = true;
                std::fwrite(piece.reasoning.data(), 1, piece.reasoning.size(), stderr);
                std::fflush(stderr);
            }
            if ((!piece.content.empty() || !piece.tool_calls.empty()) && thinking) {
                std::fputs(dim ? "\x1b[0m\n" : "\n[/thinking]\n", stderr);
                thinking = false;
            }
            std::fwrite(piece.content.data(), 1, piece.content.size(), stdout);
            for (const reasoning_tool_call &c : piece.tool_calls)
                std::fprintf(stdout, "[tool call] %s(%s)\n", c.name.c_str(), c.arguments.c_str());
            std::fflush(stdout);
        };
        const serving::completion done = engine_.generate(std::move(r), [&](const serving::event &e) {
            show(splitter.feed(e.text));
            if (!interrupted) return true;
            interrupted = 0;
            return false;
        });
        show(splitter.finish());
        if (thinking) std::fputs(dim ? "\x1b[0m\n" : "\n[/thinking]\n", stderr);
        std::fputc('\n', stdout);
        std::fflush(stdout);
        if (done.finish == serving::finish_reason::error) throw error("generation failed: " + done.error);
        dropped_ += size_t(done.n_discarded);  // [keep_, keep_ + n_discarded) of what was held and said

        // the conversation keeps control tokens as text, so re-tokenizing it gives them back
        const vocab &v = model_.vocab();
        std::string reply;
        for (const serving::generated_token &g : done.tokens) {
            const std::string piece = v.token_to_piece(g.id, true);
            reply += piece;
            kv_text_ += piece;
            tokens_.push_back(g.id);
            pieces_.push_back({kv_text_.size(), tokens_.size()});
        }
        messages_.push_back({"assistant", reply});
        ++n_turns_;
        const int32_t held = engine_.stats().slots[0].n_cached;
        if (opt_.verbose) {
            const int n_generated = int(done.tokens.size());
            std::fprintf(stderr,
                         "weft chat: turn %d: reused %d cached tokens, rolled back %d, decoded %d new prompt "
                         "tokens (%.1f ms), generated %d tokens (%.1f tok/s), context %d of %u, %zu tokens "
                         "dropped by context shifts\n",
                         n_turns_, done.n_cached, std::max(0, held_before - done.n_cached),
                         done.n_prompt - done.n_cached, done.prompt_ms, n_generated,
                         done.generate_ms > 0 ? 1000.0 * (n_generated - 1) / done.generate_ms : 0.0, held,
                         engine_.n_ctx_slot(), dropped_);
        }
        const bool limit = opt_.n_predict >= 0 && int32_t(done.tokens.size()) >= opt_.n_predict;
        if (done.finish == serving::finish_reason::length && !limit)
            throw context_full("the conversation reached the context size of " +
                               std::to_string(engine_.n_ctx_slot()) +
                               " tokens; start a new chat with a larger -c/--ctx-size");
    }

    // The session as JSON (messages, text, tokens, pieces, the shift state), for --save.
    nlohmann::json to_json() const {
        nlohmann::json j;
        j["format"] = "weft-chat-1";
        for (const chat_message &m : messages_)
            j["messages"].push_back({{"role", m.role}, {"content", m.content}});
        j["text"] = kv_text_;
        j["tokens"] = tokens_;
        for (const kv_piece &p : pieces_) j["pieces"].push_back({p.text_end, p.token_end});
        j["keep"] = keep_;
        j["dropped"] = dropped_;
        j["turns"] = n_turns_;
        return j;
    }
    // Restores a saved session (--load); throws weft::error when it is not one or is inconsistent.
    void from_json(const std::string &text, const std::string &path) {
        try {
            const nlohmann::json j = nlohmann::json::parse(text);
            if (j.value("format", "") != "weft-chat-1") throw error("not a weft chat session");
            messages_.clear();
            for (const auto &m : j.at("messages"))
                messages_.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
            kv_text_ = j.at("text").get<std::string>();
            tokens_ = j.at("tokens").get<std::vector<token>>();
            pieces_.clear();
            for (const auto &p : j.at("pieces"))
                pieces_.push_back({p.at(0).get<size_t>(), p.at(1).get<size_t>()});
            keep_ = j.at("keep").get<size_t>();
            dropped_ = j.at("dropped").get<size_t>();
            n_turns_ = j.at("turns").get<int>();
            for (const kv_piece &p : pieces_)
                if (p.text_end > kv_text_.size() || p.token_end > tokens_.size())
                    throw error("a text piece points past the conversation");
            if (keep_ + dropped_ > tokens_.size())
                throw error("the dropped tokens are past the conversation");
        } catch (const nlohmann::json::exception &e) {
            throw error("chat session " + path + ": " + e.what());
        } catch (const error &e) {
            throw error("chat session " + path + ": " + e.what());
        }
    }
    int n_turns() const { return n_turns_; }

  private:
    struct kv_piece {
        size_t text_end;   // kv_text_ up to here ...
        size_t token_end;  // ... is spelled by tokens_[0, token_end)
    };

    // The tokens the slot holds: the kept start and what follows the dropped run.
    std::vector<token> held() const {
        std::vector<token> t(tokens_.begin(),
                             tokens_.begin() + std::ptrdiff_t(std::min(keep_, tokens_.size())));
        if (keep_ + dropped_ < tokens_.size())
            t.insert(t.end(), tokens_.begin() + std::ptrdiff_t(keep_ + dropped_), tokens_.end());
        return t;
    }

    // The kept start, from the first turn's tokens: the BOS, then --keep tokens, or (-1) everything
    // through the system message; capped as the engine caps it.
    void choose_keep(const std::string &prompt, const std::vector<text_span> &contents,
                     const std::vector<token> &first_tokens, const std::vector<text_span> &literal) {
        const vocab &v = model_.vocab();
        const size_t n_bos = v.bos() != token_null && first_tokens.front() == v.bos() ? 1 : 0;
        size_t keep = n_bos + size_t(std::max(0, opt_.n_keep));
        if (opt_.n_keep < 0 && !messages_.empty() && messages_[0].role == "system" && !contents.empty()) {
            const size_t end = contents[0].offset + contents[0].length;
            std::vector<text_span> inside;
            for (const text_span &s : literal)
                if (s.offset < end) inside.push_back({s.offset, std::min(s.length, end - s.offset)});
            keep = v.tokenize(prompt.substr(0, end), true, true, inside).size();
        }
        keep_ = size_t(engine_.shift_keep(int32_t(std::min(keep, first_tokens.size()))));
    }

    // Before a turn whose prompt would not fit: drop the oldest half of the held tokens after the
    // kept start, as often as needed, in the slot too (its cells are moved, not decoded again).
    // Only earlier turns' tokens go: the new text is sent whole.
    void make_room() {
        const size_t limit = engine_.n_ctx_slot();
        for (size_t n_held = held().size(); n_held >= limit; n_held = held().size()) {
            const size_t old_after_keep = turn_start_ > keep_ + dropped_ ? turn_start_ - keep_ - dropped_ : 0;
            if (opt_.no_context_shift || old_after_keep == 0)
                throw context_full("the conversation needs " + std::to_string(n_held + 1) +
                                   " tokens but the context holds " + std::to_string(limit) +
                                   (opt_.no_context_shift ? "" : " (the new message alone does not fit)") +
                                   "; start a new chat with a larger -c/--ctx-size");
            const size_t n_discard = std::clamp<size_t>((n_held - keep_) / 2, 1, old_after_keep);
            engine_.shift_slot(0, int32_t(keep_), int32_t(n_discard));
            dropped_ += n_discard;
        }
    }

    // Drops the pieces that the new prompt does not start with.
    void keep_shared_prefix(const std::string &prompt) {
        const auto mismatch = std::mismatch(kv_text_.begin(), kv_text_.end(), prompt.begin(), prompt.end());
        const size_t shared = size_t(mismatch.first - kv_text_.begin());
        if (shared != kv_text_.size()) {
            while (!pieces_.empty() && pieces_.back().text_end > shared) pieces_.pop_back();
            kv_text_.resize(pieces_.empty() ? 0 : pieces_.back().text_end);
            tokens_.resize(pieces_.empty() ? 0 : pieces_.back().token_end);
            // rolled back into the dropped run: everything after the kept start is gone
            if (tokens_.size() < keep_ + dropped_)
                dropped_ = tokens_.size() > keep_ ? tokens_.size() - keep_ : 0;
        }
        turn_start_ = tokens_.size();
    }

    const model &model_;
    serving::engine &engine_;
    sampling_params sampling_;
    const serving::template_choice &template_;
    const chat_options &opt_;
    std::vector<chat_message> messages_;
    std::string kv_text_;
    std::vector<token> tokens_;
    std::vector<kv_piece> pieces_;
    int n_turns_ = 0;
    size_t keep_ = 0;        // tokens at the start that context shifts keep
    size_t dropped_ = 0;     // tokens after them that context shifts dropped
    size_t turn_start_ = 0;  // tokens_ before this turn's new text
};

int chat_main(int argc, char **argv) {
    CLI::App app{
        "Chats with a model: each line read from stdin is a user turn; the reply is streamed to stdout.\n"
        "The conversation is formatted with the model's chat template (tokenizer.chat_template, or\n"
        "--chat-template) and kept in the KV cache, so each turn decodes only the text it adds.\n"
        "End with EOF (Ctrl-D); Ctrl-C stops a reply. Logs go to stderr.\n"
        "A reasoning model's thoughts (<think>...</think>, gpt-oss's analysis channel) are shown apart\n"
        "on stderr: dimmed on a terminal, between [thinking] and [/thinking] otherwise; the answer\n"
        "alone goes to stdout (--reasoning-format none: the reply as generated, all on stdout).",
        "weft chat"};
    chat_options opt;
    app.add_option("-m,--model", opt.model_path, "GGUF model file")
        ->required()
        ->check(weft::tool::input_file());
    app.add_option("--system", opt.system_prompt, "system message that opens the conversation");
    app.add_option(
        "--chat-template", opt.chat_template,
        "template family (chatml, llama3, llama2, mistral-v7, phi3, zephyr, gemma ...) or Jinja text, "
        "instead of the model's");
    app.add_option("-n,--n-predict", opt.n_predict, "most tokens per reply (-1: until end of generation)")
        ->capture_default_str();
    app.add_option("-c,--ctx-size", opt.n_ctx, "context size in tokens (0: the model's, at most 4096)")
        ->capture_default_str()
        ->check(CLI::Range(0u, 1u << 24));
    app.add_option("-b,--batch-size", opt.n_batch, "most prompt tokens per decode call")
        ->capture_default_str()
        ->check(CLI::Range(1u, 1u << 20));
    app.add_option("-t,--threads", opt.n_threads, "threads (0: the hardware's, at most 4)")
        ->capture_default_str()
        ->check(CLI::Range(0, 512));
    tool::add_sampling_options(app, opt.sampling);
    grammar_options constrain;
    add_grammar_options(app, constrain);  // each reply follows the grammar
    add_speculative_options(app, opt.speculative);
    add_lora_options(app, opt.loras);
    app.add_option("--keep", opt.n_keep,
                   "tokens at the conversation's start that a context shift keeps, after the BOS (-1: "
                   "through the system message; at most half the context)")
        ->capture_default_str()
        ->check(CLI::Range(-1, 1 << 24));
    app.add_flag("--no-context-shift", opt.no_context_shift,
                 "end the chat with an error when the context is full instead of dropping the oldest turns' "
                 "tokens after --keep and going on");
    app.add_option("--save", opt.save_path,
                   "when the chat ends, write the conversation and its KV cache to this file");
    app.add_option("--load", opt.load_path,
                   "continue the conversation saved in this file (by --save, with the same model)")
        ->check(weft::tool::input_file());
    add_cache_type_options(app, opt.cache_types);
    add_device_options(app, opt.devices);
    std::string numa;
    add_numa_option(app, numa);
    app.add_option("--reasoning-format", opt.reasoning_format,
                   "none: the reply as generated; deepseek / auto: thoughts shown apart on stderr; "
                   "deepseek-legacy: apart, and the answer keeps them with their tags")
        ->capture_default_str()
        ->check(CLI::IsMember({"none", "deepseek", "deepseek-legacy", "auto"}));
    app.add_flag("-v,--verbose", opt.verbose, "log model, template, seed and per-turn cache reuse to stderr");
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;
    apply_numa_option(numa, opt.n_threads);

    tool::finish_sampling_options(opt.sampling);
    opt.sampling.params.grammar = resolve_grammar(constrain);
    sampling_params &s = opt.sampling.params;

    const auto model = opt.devices.load(
        model_params{}, [&](const model_params &p) { return model::load(opt.model_path, p); });
    const serving::template_choice chosen = serving::choose_chat_template(*model, opt.chat_template);
    if (!chosen.fallback.empty())
        std::fprintf(stderr, "weft chat: warning: %s (choose one with --chat-template)\n",
                     chosen.fallback.c_str());
    const std::string &template_source = chosen.source;

    inference_params ip = serving::conversation_params(*model, opt.n_ctx, opt.n_batch, opt.n_threads);
    opt.cache_types.apply(ip);
    opt.devices.apply(ip);
    if (opt.verbose || model->offload_device()) report_placement(*model, ip, "chat");
    opt.loras.apply(*model, ip, "chat");
    opt.speculative.load_draft(*model, "chat");
    serving::engine_params ep;
    ep.n_slots = 1;
    ep.context = ip;
    ep.context_shift = !opt.no_context_shift;
    ep.speculative = opt.speculative.params;
    serving::engine eng(*model, ep);
    const inference_context &ctx = eng.context();

    if (s.penalty_last_n < 0) s.penalty_last_n = int32_t(ctx.n_ctx());
    const auto chain = make_sampler_chain(s, model->vocab());

    const bool interactive = isatty(STDIN_FILENO) != 0;
    if (opt.verbose || interactive) {
        std::fprintf(stderr, "weft chat: %s\n", model->describe().c_str());
        std::fprintf(stderr, "weft chat: template %s (%s), context %u tokens, %d threads, sampling %s",
                     chosen.name().c_str(), template_source.c_str(), ctx.n_ctx(), ip.n_threads,
                     chain->describe().c_str());
        if (const auto seed = chain->seed()) std::fprintf(stderr, ", seed %u", *seed);
        std::fprintf(stderr, "\n%s",
                     interactive ? "weft chat: one line per turn; Ctrl-C stops a reply, Ctrl-D ends\n" : "");
    }

    if (interactive) {
        // no SA_RESTART: Ctrl-C at the prompt interrupts the read, which ends the chat
        struct sigaction action = {};
        action.sa_handler = on_sigint;
        sigemptyset(&action.sa_mask);
        sigaction(SIGINT, &action, nullptr);
    }

    chat_session session(*model, eng, s, chosen, opt);
    if (!opt.load_path.empty()) {
        session.from_json(eng.load_slot(0, opt.load_path), opt.load_path);
        if (opt.verbose || interactive)
            std::fprintf(stderr, "weft chat: continuing %s: %d turns, %d tokens cached\n",
                         opt.load_path.c_str(), session.n_turns(), eng.stats().slots[0].n_cached);
    }
    auto save = [&] {
        if (opt.save_path.empty()) return;
        eng.save_slot(0, opt.save_path, session.to_json().dump());
        if (opt.verbose)
            std::fprintf(stderr, "weft chat: saved the conversation to %s\n", opt.save_path.c_str());
    };
    std::string line;
    while (true) {
        if (interactive) std::fputs("> ", stderr);
        if (!std::getline(std::cin, line)) break;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        try {
            session.turn(line);
        } catch (const context_full &e) {
            std::fprintf(stderr, "weft chat: context full: %s\n", e.what());
            save();
            return 1;
        }
    }
    save();
    if (interactive) std::fputc('\n', stderr);
    if (opt.verbose) {
        const inference_perf p = ctx.perf();
        std::fprintf(
            stderr,
            "weft chat: prompt %lld tokens in %.1f ms, generation %lld tokens in %.1f ms, graph reuses "
            "%lld of %lld\n",
            (long long)p.n_p_eval, p.t_p_eval_ms, (long long)p.n_eval, p.t_eval_ms,
            (long long)p.n_graph_reuses, (long long)(p.n_graph_reuses + p.n_graph_builds));
    }
    return 0;
}

[[maybe_unused]] const bool registered_chat = register_command(
    {"chat", "talk with a model, turn by turn, keeping the conversation in the KV cache", &chat_main});

}  // namespace
}  // namespace weft::tool
