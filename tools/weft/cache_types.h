// tools/weft/cache_types.h — the KV cache type options of the commands that decode: -ctk/--cache-type-k,
// -ctv/--cache-type-v, and --kv-type for both.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "weft/core/error.h"
#include "weft/core/ops.h"
#include "weft/runtime/context.h"
#include "weft/runtime/kv_cache.h"

namespace weft::tool {

struct cache_type_options {
    std::string k, v, both;  // as given; empty: not given

    // -ctk / -ctv override --kv-type; f16 when nothing is given.
    dtype type_k() const { return kv_cache_type_from_name(pick(k)); }
    dtype type_v() const { return kv_cache_type_from_name(pick(v)); }
    void apply(inference_params &ip) const {
        ip.type_k = type_k();
        ip.type_v = type_v();
    }

  private:
    std::string pick(const std::string &one) const {
        return !one.empty() ? one : !both.empty() ? both : "f16";
    }
};

// A name outside the cache types fails the parse with the message listing them.
inline void add_cache_type_options(CLI::App &app, cache_type_options &o) {
    const CLI::Validator valid(
        [](std::string &name) -> std::string {
            try {
                kv_cache_type_from_name(name);
                return {};
            } catch (const error &e) {
                return e.what();
            }
        },
        "TYPE");
    const std::string names = attention_kv_type_names();
    app.add_option("--cache-type-k", o.k, "KV cache type of K, also -ctk: " + names + " (default f16)")
        ->check(valid);
    app.add_option("--cache-type-v", o.v, "KV cache type of V, also -ctv: " + names + " (default f16)")
        ->check(valid);
    app.add_option("--kv-type", o.both, "KV cache type of both K and V (-ctk and -ctv override it)")
        ->check(valid);
}

}  // namespace weft::tool
