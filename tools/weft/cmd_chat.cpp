// tools/weft/cmd_chat.cpp — `weft chat`: a conversation kept in the KV cache, one decode per new text.
#include <unistd.h>
#include <CLI/CLI.hpp>

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

#include "weft/command.h"
#include "weft/conversation.h"
#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/chat_template.h"
#include "weft/runtime/context.h"
#include "weft/runtime/sampling.h"

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
    int64_t seed = -1;  // -1: random
    sampling_params sampling;
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

// Runs the conversation. The cache holds kv_text_: the formatted conversation as decoded so far.
// It grows in pieces (a turn's new prompt text, then one piece per generated token) whose cache
// end position is recorded, so a turn whose formatted prompt no longer starts with kv_text_ (a
// template that trims the reply, say) rolls the cache back to the last piece both still share
// instead of starting over.
class chat_session {
  public:
    chat_session(const model &m, inference_context &ctx, sampler_chain &chain, chat_template_kind kind,
                 const chat_options &opt)
        : model_(m), ctx_(ctx), chain_(chain), kind_(kind), opt_(opt) {
        if (!opt.system_prompt.empty()) messages_.push_back({"system", opt.system_prompt});
    }

    // One user turn: formats the conversation, decodes what the cache lacks, streams the reply to
    // stdout. Throws context_full when the conversation outgrows the context.
    void turn(const std::string &user_text) {
        messages_.push_back({"user", user_text});
        const std::string prompt = apply_chat_template(kind_, messages_, true);
        const auto t_start = std::chrono::steady_clock::now();
        const size_t n_rolled_back = keep_shared_prefix(prompt);
        const llm_pos n_reused = n_past_;
        const std::string new_text = prompt.substr(kv_text_.size());
        const std::vector<token> new_tokens = model_.vocab().tokenize(new_text, n_past_ == 0, true);
        if (new_tokens.empty())
            throw error("turn " + std::to_string(n_turns_ + 1) + ": the formatted prompt adds no tokens");
        decode_prompt(new_tokens);
        kv_text_ += new_text;
        pieces_.push_back({kv_text_.size(), n_past_});
        const auto t_prompt = std::chrono::steady_clock::now();

        const std::string reply = generate();
        messages_.push_back({"assistant", reply});
        ++n_turns_;
        if (opt_.verbose) {
            const auto t_end = std::chrono::steady_clock::now();
            const double prompt_ms = std::chrono::duration<double, std::milli>(t_prompt - t_start).count();
            const double gen_ms = std::chrono::duration<double, std::milli>(t_end - t_prompt).count();
            std::fprintf(
                stderr,
                "weft chat: turn %d: reused %d cached tokens, rolled back %zu, decoded %zu new prompt "
                "tokens (%.1f ms), generated %d tokens (%.1f tok/s), context %d of %u\n",
                n_turns_, int(n_reused), n_rolled_back, new_tokens.size(), prompt_ms, n_generated_,
                gen_ms > 0 ? 1000.0 * n_generated_ / gen_ms : 0.0, int(n_past_), ctx_.n_ctx());
        }
    }

  private:
    struct kv_piece {
        size_t text_end;  // kv_text_ up to here ...
        llm_pos pos_end;  // ... is held by cache positions [0, pos_end)
    };

    // Drops cached pieces that the new prompt does not start with; returns the cache positions freed.
    size_t keep_shared_prefix(const std::string &prompt) {
        const auto mismatch = std::mismatch(kv_text_.begin(), kv_text_.end(), prompt.begin(), prompt.end());
        const size_t shared = size_t(mismatch.first - kv_text_.begin());
        if (shared == kv_text_.size()) return 0;
        while (!pieces_.empty() && pieces_.back().text_end > shared) pieces_.pop_back();
        const llm_pos keep = pieces_.empty() ? 0 : pieces_.back().pos_end;
        const size_t freed = size_t(n_past_ - keep);
        if (ctx_.kv_seq_rm(0, keep, -1)) {
            kv_text_.resize(pieces_.empty() ? 0 : pieces_.back().text_end);
            n_past_ = keep;
            return freed;
        }
        // the cache could not drop a tail: start over from an empty one
        ctx_.kv_clear();
        kv_text_.clear();
        pieces_.clear();
        const size_t all = size_t(n_past_);
        n_past_ = 0;
        return all;
    }

    void ensure_room(size_t n_new) const {
        if (size_t(n_past_) + n_new > ctx_.n_ctx())
            throw context_full("the conversation needs " + std::to_string(size_t(n_past_) + n_new) +
                               " tokens but the context holds " + std::to_string(ctx_.n_ctx()) +
                               "; start a new chat with a larger -c/--ctx-size");
    }

    void decode_checked(const batch &b) {
        const int rc = ctx_.decode(b);
        if (rc == decode_no_kv_space)
            throw context_full("the KV cache has no room for " + std::to_string(b.n_tokens()) +
                               " more tokens at position " + std::to_string(n_past_) +
                               "; start a new chat with a larger -c/--ctx-size");
        if (rc != decode_ok)
            throw error("decode failed at position " + std::to_string(n_past_) + " (code " +
                        std::to_string(rc) + "): " + ctx_.last_error());
        n_past_ += b.n_tokens();
        WEFT_ASSERT(ctx_.kv_seq_pos_max(0) + 1 == n_past_);  // the cache holds exactly [0, n_past_)
    }

    // In chunks of n_batch; the last token's logits are what generation starts from. The prompt
    // tokens also go into the sampler's history, so repetition penalties see the conversation.
    void decode_prompt(const std::vector<token> &tokens) {
        ensure_room(tokens.size());
        const size_t chunk = std::max<size_t>(1, ctx_.n_batch());
        for (size_t begin = 0; begin < tokens.size(); begin += chunk) {
            const size_t n = std::min(chunk, tokens.size() - begin);
            decode_checked(batch::from_tokens(std::span<const token>(tokens.data() + begin, n)));
        }
        for (token t : tokens) chain_.accept(t);
    }

    // Samples until end of generation or n_predict tokens, printing each piece as it comes. The
    // last token sampled when the limit is hit is not decoded: it stays out of kv_text_, so the
    // next turn's prompt difference carries it.
    std::string generate() {
        const vocab &v = model_.vocab();
        std::string reply;
        n_generated_ = 0;
        while (opt_.n_predict < 0 || n_generated_ < opt_.n_predict) {
            if (interrupted) {
                interrupted = 0;
                break;
            }
            const token t = chain_.sample(ctx_.get_logits_ith(-1), ctx_.n_vocab());
            if (v.is_eog(t)) break;
            const std::string display = v.token_to_piece(t, false);
            std::fwrite(display.data(), 1, display.size(), stdout);
            std::fflush(stdout);
            // the conversation keeps control tokens as text, so re-tokenizing it gives them back
            const std::string piece = v.token_to_piece(t, true);
            reply += piece;
            ++n_generated_;
            if (opt_.n_predict >= 0 && n_generated_ >= opt_.n_predict) break;
            if (size_t(n_past_) + 1 > ctx_.n_ctx()) {
                std::fputc('\n', stdout);
                ensure_room(1);  // throws context_full with the numbers
            }
            decode_checked(batch::from_tokens({t}));
            kv_text_ += piece;
            pieces_.push_back({kv_text_.size(), n_past_});
        }
        std::fputc('\n', stdout);
        std::fflush(stdout);
        return reply;
    }

    const model &model_;
    inference_context &ctx_;
    sampler_chain &chain_;
    chat_template_kind kind_;
    const chat_options &opt_;
    std::vector<chat_message> messages_;
    std::string kv_text_;
    std::vector<kv_piece> pieces_;
    llm_pos n_past_ = 0;
    int n_turns_ = 0;
    int n_generated_ = 0;
};

int chat_main(int argc, char **argv) {
    CLI::App app{
        "Chats with a model: each line read from stdin is a user turn; the reply is streamed to stdout.\n"
        "The conversation is formatted with the model's chat template (tokenizer.chat_template, or\n"
        "--chat-template) and kept in the KV cache, so each turn decodes only the text it adds.\n"
        "End with EOF (Ctrl-D); Ctrl-C stops a reply. Logs go to stderr.",
        "weft chat"};
    chat_options opt;
    sampling_params &s = opt.sampling;
    app.add_option("-m,--model", opt.model_path, "GGUF model file")->required();
    app.add_option("--system", opt.system_prompt, "system message that opens the conversation");
    app.add_option(
        "--chat-template", opt.chat_template,
        "template family (chatml, llama3, llama2, mistral-v7, phi3, zephyr, gemma ...) or Jinja text, "
        "instead of the model's");
    app.add_option("-n,--n-predict", opt.n_predict, "most tokens per reply (-1: until end of generation)")
        ->capture_default_str();
    app.add_option("-c,--ctx-size", opt.n_ctx, "context size in tokens (0: the model's, at most 4096)")
        ->capture_default_str();
    app.add_option("-b,--batch-size", opt.n_batch, "most prompt tokens per decode call")
        ->capture_default_str()
        ->check(CLI::Range(1u, 1u << 20));
    app.add_option("-t,--threads", opt.n_threads, "threads (0: the hardware's, at most 4)")
        ->capture_default_str();
    app.add_option("--temp", s.temp, "temperature (<= 0: greedy)")->capture_default_str();
    app.add_option("--top-k", s.top_k, "keep the k most likely tokens (<= 0: off)")->capture_default_str();
    app.add_option("--top-p", s.top_p, "nucleus: keep the most likely tokens up to this mass (1: off)")
        ->capture_default_str();
    app.add_option("--min-p", s.min_p,
                   "drop tokens below this fraction of the best one's probability (0: off)")
        ->capture_default_str();
    app.add_option("--typical", s.typical_p, "locally typical sampling mass (1: off)")->capture_default_str();
    app.add_option("--repeat-penalty", s.penalty_repeat, "penalty for repeated tokens (1: off)")
        ->capture_default_str();
    app.add_option("--repeat-last-n", s.penalty_last_n,
                   "tokens the penalties look back at (0: off, -1: context)")
        ->capture_default_str();
    app.add_option("--frequency-penalty", s.penalty_freq, "subtracted per occurrence (0: off)")
        ->capture_default_str();
    app.add_option("--presence-penalty", s.penalty_present, "subtracted once if present (0: off)")
        ->capture_default_str();
    app.add_option("-s,--seed", opt.seed, "sampling seed (-1: random)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(-1), int64_t(UINT32_MAX)));
    app.add_flag("-v,--verbose", opt.verbose, "log model, template, seed and per-turn cache reuse to stderr");
    CLI11_PARSE(app, argc, argv);

    if (opt.seed >= 0) s.seed = uint32_t(opt.seed);

    const auto model = model::load(opt.model_path);
    const tool::template_choice chosen = tool::choose_chat_template(*model, opt.chat_template);
    if (!chosen.fallback.empty())
        std::fprintf(stderr, "weft chat: warning: %s (choose one with --chat-template)\n",
                     chosen.fallback.c_str());
    const chat_template_kind kind = chosen.kind;
    const std::string &template_source = chosen.source;

    const inference_params ip = tool::conversation_params(*model, opt.n_ctx, opt.n_batch, opt.n_threads);
    inference_context ctx(*model, ip);

    if (s.penalty_last_n < 0) s.penalty_last_n = int32_t(ctx.n_ctx());
    const auto chain = make_sampler_chain(s);

    const bool interactive = isatty(STDIN_FILENO) != 0;
    if (opt.verbose || interactive) {
        std::fprintf(stderr, "weft chat: %s\n", model->describe().c_str());
        std::fprintf(stderr, "weft chat: template %s (%s), context %u tokens, %d threads, sampling %s",
                     chat_template_name(kind), template_source.c_str(), ctx.n_ctx(), ip.n_threads,
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

    chat_session session(*model, ctx, *chain, kind, opt);
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
            return 1;
        }
    }
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

[[maybe_unused]] const bool registered = register_command(
    {"chat", "talk with a model, turn by turn, keeping the conversation in the KV cache", &chat_main});

}  // namespace
}  // namespace weft::tool
