// tools/weft/sampling_options.cpp — the sampling options `weft run` and `weft chat` share.
#include "weft/sampling_options.h"

#include <cstdint>

#include "weft/core/error.h"

namespace weft::tool {

void add_sampling_options(CLI::App &app, sampling_options &o) {
    sampling_params &s = o.params;
    std::string order;
    for (const sampler_type t : s.samplers)
        order += (order.empty() ? "" : ";") + std::string(sampler_type_name(t));
    std::string letters;
    for (const sampler_type t : s.samplers) letters += sampler_type_letter(t);

    app.add_option("--temp", s.temp, "temperature; <= 0 picks the most likely token (greedy)")
        ->capture_default_str();
    app.add_option("--top-k", s.top_k, "keep the K most likely tokens (<= 0: off)")->capture_default_str();
    app.add_option("--top-p", s.top_p, "nucleus: keep the most likely tokens up to this mass (1: off)")
        ->capture_default_str();
    app.add_option("--min-p", s.min_p,
                   "drop tokens below this fraction of the best one's probability (0: off)")
        ->capture_default_str();
    app.add_option("--typical", s.typical_p, "locally typical sampling mass (1: off)")->capture_default_str();
    app.add_option("--top-n-sigma,--top-nsigma", s.top_n_sigma,
                   "drop tokens whose logit is more than N standard deviations below the best (<= 0: off)")
        ->capture_default_str();
    app.add_option("--xtc-probability", s.xtc_probability,
                   "XTC: chance per token of excluding the top choices (0: off)")
        ->capture_default_str();
    app.add_option("--xtc-threshold", s.xtc_threshold,
                   "XTC: the probability a top choice has at least (> 0.5: off)")
        ->capture_default_str();
    app.add_option("--dynatemp-range", s.dynatemp_range,
                   "dynamic temperature: within temp +- this, higher for flatter distributions (0: off)")
        ->capture_default_str();
    app.add_option("--dynatemp-exp", s.dynatemp_exponent, "dynamic temperature exponent")
        ->capture_default_str();
    app.add_option("--repeat-penalty", s.penalty_repeat, "penalty for repeated tokens (1: off)")
        ->capture_default_str();
    app.add_option("--repeat-last-n", s.penalty_last_n,
                   "tokens the penalties look back at (0: off, -1: context)")
        ->capture_default_str();
    app.add_option("--frequency-penalty", s.penalty_freq, "subtracted per occurrence (0: off)")
        ->capture_default_str();
    app.add_option("--presence-penalty", s.penalty_present, "subtracted once if present (0: off)")
        ->capture_default_str();
    app.add_option("--dry-multiplier", s.dry_multiplier,
                   "DRY: penalty for extending a repeated sequence (0: off)")
        ->capture_default_str();
    app.add_option("--dry-base", s.dry_base, "DRY: the penalty grows as base^(length - allowed length)")
        ->capture_default_str();
    app.add_option("--dry-allowed-length", s.dry_allowed_length, "DRY: repetitions this long go unpenalized")
        ->capture_default_str();
    app.add_option("--dry-penalty-last-n", s.dry_penalty_last_n,
                   "DRY: tokens looked back at (0: off, -1: context)")
        ->capture_default_str();
    app.add_option("--dry-sequence-breaker", o.dry_sequence_breakers,
                   "DRY: a string repetitions do not reach across; repeatable, replaces the defaults "
                   "(newline, ':', '\"', '*'); \"none\": no breakers")
        ->allow_extra_args(false);
    app.add_option("--mirostat", s.mirostat,
                   "mirostat 1 or 2 replaces top-k, top-p, typical and the other samplers (0: off)")
        ->capture_default_str();
    app.add_option("--mirostat-lr", s.mirostat_eta, "mirostat learning rate, eta")->capture_default_str();
    app.add_option("--mirostat-ent", s.mirostat_tau, "mirostat target entropy, tau")->capture_default_str();
    app.add_option("--samplers", o.samplers,
                   "the samplers in order, separated by ';' (default: " + order + ")");
    app.add_option("--sampling-seq,--sampler-seq", o.sampling_seq,
                   "the samplers in order as letters (default: " + letters + ")");
    app.add_option("-s,--seed", o.seed, "sampling seed (-1: random)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(-1), int64_t(UINT32_MAX)));
}

void finish_sampling_options(sampling_options &o) {
    sampling_params &s = o.params;
    if (o.seed >= 0) s.seed = uint32_t(o.seed);
    if (!o.samplers.empty() && !o.sampling_seq.empty())
        throw error("--samplers and --sampling-seq both set the sampler order: give one");
    if (!o.samplers.empty()) s.samplers = sampler_types_from_list(o.samplers);
    if (!o.sampling_seq.empty()) s.samplers = sampler_types_from_letters(o.sampling_seq);
    if (!o.dry_sequence_breakers.empty()) {
        s.dry_sequence_breakers.clear();
        for (const std::string &b : o.dry_sequence_breakers) {
            if (b == "none")
                s.dry_sequence_breakers.clear();
            else
                s.dry_sequence_breakers.push_back(b);
        }
    }
    check_sampling_params(s);
}

}  // namespace weft::tool
