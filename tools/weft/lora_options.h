// tools/weft/lora_options.h — the LoRA options the generating and scoring commands share, with the
// established engine's names: --lora FILE and --lora-scaled FILE SCALE, both repeatable.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/file_arguments.h"
#include "weft/model/lora.h"
#include "weft/model/model.h"
#include "weft/ranks.h"
#include "weft/runtime/context.h"

namespace weft::tool {

struct lora_options {
    std::vector<std::string> files;   // --lora FILE (scale 1)
    std::vector<std::string> scaled;  // --lora-scaled FILE SCALE, flattened
    std::vector<std::unique_ptr<lora_adapter>> adapters;
    std::vector<lora_use> uses;  // what the context applies (loaded by load)

    bool empty() const { return files.empty() && scaled.empty(); }

    // Reads every adapter for `base` (a clear error for a bad one), fills `uses` in the order given
    // (the --lora files first, then the --lora-scaled ones) and sets them on ip.
    void apply(const model &base, inference_params &ip, const char *command) {
        if (empty()) return;
        if (n_ranks() > 1) throw error("--lora: adapters are not applied across mpirun ranks yet");
        load(base, command);
        ip.loras = uses;
    }
    void load(const model &base, const char *command) {
        auto add = [&](const std::string &path, float scale) {
            adapters.push_back(lora_adapter::load(path, base));
            uses.push_back({adapters.back().get(), scale});
            std::fprintf(stderr, "weft %s: LoRA adapter %s: %zu matrices, alpha %g, scale %g\n", command,
                         path.c_str(), adapters.back()->pairs().size(), double(adapters.back()->alpha()),
                         double(scale));
        };
        for (const std::string &f : files) add(f, 1.0f);
        for (size_t i = 0; i + 1 < scaled.size(); i += 2) require_input_file(scaled[i]);
        for (size_t i = 0; i + 1 < scaled.size(); i += 2) {
            const std::string what = "--lora-scaled " + scaled[i] + " " + scaled[i + 1];
            char *end = nullptr;
            const double s = std::strtod(scaled[i + 1].c_str(), &end);
            if (end == scaled[i + 1].c_str() || *end != '\0')
                throw error(what + ": the scale is not a number");
            check_lora_scale(s, what);
            add(scaled[i], float(s));
        }
    }
};

inline void add_lora_options(CLI::App &app, lora_options &o) {
    app.add_option("--lora", o.files, "apply a LoRA adapter (GGUF) at run time, scale 1 (repeatable)")
        ->check(weft::tool::input_file());
    app.add_option("--lora-scaled", o.scaled,
                   "apply a LoRA adapter with this scale: --lora-scaled FILE SCALE (repeatable)")
        ->type_size(2);  // two values each time, any number of times (expected(2) refused a second one)
}

}  // namespace weft::tool
