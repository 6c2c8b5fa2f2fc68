// tools/weft/sampling_options.h — the sampling options `weft run` and `weft chat` share, with the
// established engine's names (--temp, --top-k ... --dry-multiplier, --mirostat, --samplers).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "weft/sampling/sampling.h"

namespace weft::tool {

// What the options write; finish_sampling_options turns it into `params`.
struct sampling_options {
    sampling_params params;
    int64_t seed = -1;                               // -1: random
    std::string samplers;                            // --samplers "penalties;top_k;temperature"
    std::string sampling_seq;                        // --sampling-seq "ekt"
    std::vector<std::string> dry_sequence_breakers;  // replace the defaults when given; "none": no breakers
};

// Declares the sampling options on app, writing into o.
void add_sampling_options(CLI::App &app, sampling_options &o);

// After parsing: applies the seed, the sampler order and the DRY sequence breakers to o.params and
// checks every parameter. Throws weft::error naming a bad value (an unknown sampler lists the valid
// ones).
void finish_sampling_options(sampling_options &o);

}  // namespace weft::tool
