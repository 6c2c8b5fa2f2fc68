// tools/weft/speculative_options.h — the speculative decoding options `weft run`, `weft chat` and
// `weft serve` share, with the established engine's names (--draft-model, --draft-max, --draft-min,
// --draft-p-min, --lookup-ngram).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "weft/core/error.h"
#include "weft/file_arguments.h"
#include "weft/model/model.h"
#include "weft/serving/speculative.h"

namespace weft::tool {

struct speculative_options {
    std::string draft_path;
    serving::speculative_params params;
    std::unique_ptr<model> draft;  // loaded by load_draft

    // The draft model (when --draft-model was given) loaded and every value checked; throws
    // weft::error naming a bad value, an unreadable file or a vocabulary unlike the target's.
    void load_draft(const model &target, const char *command) {
        serving::check_speculative_params(params);
        if (draft_path.empty()) return;
        if (params.lookup_ngram > 0) throw error("--lookup-ngram and --draft-model exclude each other");
        draft = model::load(draft_path);
        serving::check_draft_vocab(target.vocab(), draft->vocab(), draft_path);
        params.draft = draft.get();
        std::fprintf(stderr, "weft %s: draft model %s: %s\n", command, draft_path.c_str(),
                     draft->describe().c_str());
    }
};

inline void add_speculative_options(CLI::App &app, speculative_options &o) {
    app.add_option(
           "--draft-model", o.draft_path,
           "a smaller model with the same vocabulary that drafts tokens for the model to verify in one "
           "batch (speculative decoding: the output is what decoding without it gives)")
        ->check(weft::tool::input_file());
    app.add_option("--draft-max,--draft-n,--draft", o.params.n_max, "draft tokens per step at most")
        ->capture_default_str()
        ->check(CLI::Range(0, 256));
    app.add_option("--draft-min,--draft-n-min", o.params.n_min,
                   "fewer draft tokens than this are not verified")
        ->capture_default_str()
        ->check(CLI::Range(0, 256));
    app.add_option("--draft-p-min", o.params.p_min,
                   "the draft model stops drafting at a token it finds less likely than this")
        ->capture_default_str()
        ->check(CLI::Range(0.0f, 1.0f));
    app.add_option("--lookup-ngram", o.params.lookup_ngram,
                   "prompt lookup without a draft model: draft the tokens that followed the latest earlier "
                   "occurrence of the last N tokens (for text that copies its input: code, summaries)")
        ->capture_default_str()
        ->check(CLI::Range(0, 64));
}

}  // namespace weft::tool
