// src/model/hparams.cpp — Llama-family hyper-parameters from arch-prefixed GGUF keys, with defaults.
#include "weft/model/hparams.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "weft/core/checked.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"

namespace weft {

namespace {

class hparam_reader {
  public:
    hparam_reader(const gguf_file &f, const std::string &arch) : f_(f), prefix_(arch + ".") {}

    std::string key(const std::string &suffix) const { return prefix_ + suffix; }

    [[noreturn]] void fail(const std::string &suffix, const std::string &what) const {
        throw error(f_.path() + ": " + key(suffix) + ": " + what);
    }

    int64_t required_int(const std::string &suffix) const {
        auto v = f_.get_int(key(suffix));
        if (!v) fail(suffix, "missing (required)");
        return *v;
    }
    int64_t int_or(const std::string &suffix, int64_t def) const {
        return f_.get_int(key(suffix)).value_or(def);
    }
    float float_or(const std::string &suffix, float def) const {
        auto v = f_.get_float(key(suffix));
        return v ? float(*v) : def;
    }

    // a * b for a size derived from two keys: an error naming both when it overflows int64.
    int64_t product(const std::string &suffix_a, int64_t a, const std::string &suffix_b, int64_t b) const {
        return checked_mul(a, b, f_.path() + ": " + key(suffix_a) + " x " + key(suffix_b));
    }

    // A per-layer value: a scalar applies to every layer, an array must have one entry per layer.
    std::vector<int64_t> per_layer(const std::string &suffix, int64_t n_layer,
                                   std::optional<int64_t> def) const {
        auto v = f_.get_int_array(key(suffix));
        if (!v) {
            if (!def) fail(suffix, "missing (required)");
            return std::vector<int64_t>(size_t(n_layer), *def);
        }
        if (v->size() == 1) return std::vector<int64_t>(size_t(n_layer), v->front());
        if (int64_t(v->size()) != n_layer)
            fail(suffix, "has " + std::to_string(v->size()) + " entries, expected 1 or one per layer (" +
                             std::to_string(n_layer) + ")");
        return *v;
    }

  private:
    const gguf_file &f_;
    std::string prefix_;
};

void read_expert_hparams(const hparam_reader &r, model_hparams &hp) {
    hp.n_expert = r.int_or("expert_count", 0);
    hp.n_expert_used = r.int_or("expert_used_count", 0);
    hp.n_ff_exp = r.int_or("expert_feed_forward_length", 0);
    hp.n_ff_shexp = r.int_or("expert_shared_feed_forward_length", 0);
    if (hp.n_expert < 0 || hp.n_expert > 4096)
        r.fail("expert_count", "must be in [0, 4096], is " + std::to_string(hp.n_expert));
    if (hp.n_expert == 0 && hp.n_expert_used != 0)
        r.fail("expert_used_count",
               "is " + std::to_string(hp.n_expert_used) + " but the model has no experts");
    if (hp.n_expert > 0 && (hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert))
        r.fail("expert_used_count", "must be in [1, expert_count = " + std::to_string(hp.n_expert) +
                                        "], is " + std::to_string(hp.n_expert_used));
    if (hp.n_ff_exp < 0)
        r.fail("expert_feed_forward_length", "must not be negative, is " + std::to_string(hp.n_ff_exp));
    if (hp.n_ff_shexp < 0)
        r.fail("expert_shared_feed_forward_length",
               "must not be negative, is " + std::to_string(hp.n_ff_shexp));
}

// A state-space model's keys (mamba, mamba2, and the hybrids' recurrent layers): true when the file has
// any <arch>.ssm size, then all of them are required.
bool read_ssm_hparams(const hparam_reader &r, model_hparams &hp) {
    const char *sizes[] = {"ssm.state_size", "ssm.conv_kernel", "ssm.inner_size", "ssm.time_step_rank"};
    if (std::none_of(std::begin(sizes), std::end(sizes), [&](const char *k) { return r.int_or(k, -1) >= 0; }))
        return false;
    hp.ssm_d_state = r.required_int("ssm.state_size");
    hp.ssm_d_conv = r.required_int("ssm.conv_kernel");
    hp.ssm_d_inner = r.required_int("ssm.inner_size");
    hp.ssm_dt_rank = r.required_int("ssm.time_step_rank");
    for (const auto &[suffix, value, limit] : {std::tuple{"ssm.state_size", hp.ssm_d_state, int64_t(1) << 16},
                                               {"ssm.conv_kernel", hp.ssm_d_conv, int64_t(1) << 10},
                                               {"ssm.inner_size", hp.ssm_d_inner, int64_t(1) << 24},
                                               {"ssm.time_step_rank", hp.ssm_dt_rank, int64_t(1) << 20}})
        if (value < 1 || value > limit)
            r.fail(suffix, "must be in [1, " + std::to_string(limit) + "], is " + std::to_string(value));
    hp.ssm_n_group = r.int_or("ssm.group_count", 0);  // Mamba-2's groups of heads sharing B and C
    if (hp.ssm_n_group < 0 || hp.ssm_n_group > hp.ssm_d_inner)
        r.fail("ssm.group_count", "must be in [0, ssm.inner_size], is " + std::to_string(hp.ssm_n_group));
    return true;
}

}  // namespace

model_hparams read_hparams(const gguf_file &f, const std::string &arch) {
    hparam_reader r(f, arch);
    model_hparams hp;
    hp.arch = arch;

    hp.n_embd = r.required_int("embedding_length");
    hp.n_layer = r.required_int("block_count");
    if (hp.n_embd <= 0) r.fail("embedding_length", "must be positive, is " + std::to_string(hp.n_embd));
    if (hp.n_layer <= 0 || hp.n_layer > 4096)
        r.fail("block_count", "must be in [1, 4096], is " + std::to_string(hp.n_layer));
    hp.n_ctx_train = r.int_or("context_length", 2048);
    if (hp.n_ctx_train <= 0)
        r.fail("context_length", "must be positive, is " + std::to_string(hp.n_ctx_train));

    // A recurrent model (mamba, mamba2) has no attention: the ssm keys replace the attention, FFN and
    // rope keys (the reference's files hold zeros there). A hybrid has both.
    const std::vector<int64_t> heads = r.per_layer("attention.head_count", hp.n_layer, 0);
    if (read_ssm_hparams(r, hp) &&
        std::all_of(heads.begin(), heads.end(), [](int64_t h) { return h == 0; })) {
        hp.n_head_arr.assign(size_t(hp.n_layer), 0);
        hp.n_head_kv_arr.assign(size_t(hp.n_layer), 0);
        hp.n_ff_arr.assign(size_t(hp.n_layer), 0);
        hp.norm_rms_eps = r.float_or("attention.layer_norm_rms_epsilon", 1e-5f);
        hp.n_vocab = r.int_or("vocab_size", 0);
        return hp;
    }

    hp.n_head_arr = r.per_layer("attention.head_count", hp.n_layer, std::nullopt);
    hp.n_head_kv_arr = r.per_layer("attention.head_count_kv", hp.n_layer, hp.n_head_arr.front());
    hp.n_ff_arr = r.per_layer("feed_forward_length", hp.n_layer, std::nullopt);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const int64_t nh = hp.n_head(il), nkv = hp.n_head_kv(il);
        if (nh <= 0)
            r.fail("attention.head_count",
                   "layer " + std::to_string(il) + " has " + std::to_string(nh) + " heads");
        // 0 KV heads: a recurrent layer of a hybrid model (its architecture marks it so; model::load
        // refuses it anywhere else)
        if (nkv < 0 || (nkv > 0 && nh % nkv != 0))
            r.fail("attention.head_count_kv", "layer " + std::to_string(il) + ": " + std::to_string(nkv) +
                                                  " KV heads do not divide " + std::to_string(nh) + " heads");
        if (hp.n_ff(il) <= 0)
            r.fail("feed_forward_length", "layer " + std::to_string(il) + " is not positive");
    }

    const int64_t n_head0 = hp.n_head(0);
    const int64_t default_head = hp.n_embd % n_head0 == 0 ? hp.n_embd / n_head0 : 0;
    hp.n_embd_head_k = r.int_or("attention.key_length", default_head);
    hp.n_embd_head_v = r.int_or("attention.value_length", default_head);
    if (hp.n_embd_head_k <= 0 || hp.n_embd_head_v <= 0)
        r.fail("attention.head_count", "embedding_length " + std::to_string(hp.n_embd) +
                                           " is not a multiple of " + std::to_string(n_head0) +
                                           " heads and no key_length/value_length is given");
    // The sizes the architectures derive from these (a layer's Q, K, V and output widths) must fit
    // in int64 before any shape is computed from them.
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        r.product("attention.key_length", hp.n_embd_head_k, "attention.head_count", hp.n_head(il));
        r.product("attention.value_length", hp.n_embd_head_v, "attention.head_count", hp.n_head(il));
    }
    hp.n_rot = r.int_or("rope.dimension_count", hp.n_embd_head_k);
    if (hp.n_rot <= 0 || hp.n_rot > hp.n_embd_head_k || hp.n_rot % 2 != 0)
        r.fail("rope.dimension_count", std::to_string(hp.n_rot) + " must be even and in [2, head size " +
                                           std::to_string(hp.n_embd_head_k) + "]");

    hp.norm_rms_eps = r.float_or("attention.layer_norm_rms_epsilon", 1e-5f);
    hp.norm_eps = r.float_or("attention.layer_norm_epsilon", 1e-5f);
    hp.rope_freq_base = r.float_or("rope.freq_base", 10000.0f);

    // Rope scaling: rope.scaling.type with rope.scaling.factor, or the older rope.scale_linear.
    float factor = r.float_or("rope.scaling.factor", 0.0f);
    const float scale_linear = r.float_or("rope.scale_linear", 0.0f);
    std::string type = f.get_string(r.key("rope.scaling.type")).value_or("");
    if (type.empty()) type = (factor > 0.0f || scale_linear > 0.0f) ? "linear" : "none";
    if (factor <= 0.0f) factor = scale_linear > 0.0f ? scale_linear : 1.0f;
    if (type == "none") {
        hp.rope_scaling = rope_scaling_kind::none;
    } else if (type == "linear") {
        hp.rope_scaling = rope_scaling_kind::linear;
        hp.rope_freq_scale = 1.0f / factor;
    } else if (type == "yarn") {
        hp.rope_scaling = rope_scaling_kind::yarn;
        hp.rope_freq_scale = 1.0f / factor;
        hp.yarn_ext_factor = 1.0f;
        hp.yarn_attn_factor = r.float_or("rope.scaling.attn_factor", 1.0f);
        hp.yarn_beta_fast = r.float_or("rope.scaling.yarn_beta_fast", 32.0f);
        hp.yarn_beta_slow = r.float_or("rope.scaling.yarn_beta_slow", 1.0f);
    } else {
        r.fail("rope.scaling.type", "'" + type + "' is not supported (none, linear, yarn)");
    }
    hp.n_ctx_orig = r.int_or("rope.scaling.original_context_length", hp.n_ctx_train);
    read_expert_hparams(r, hp);
    hp.n_vocab = r.int_or("vocab_size", 0);  // usually absent: the vocabulary decides

    hp.causal_attn = f.get_bool(r.key("attention.causal")).value_or(true);
    hp.pooling_type = int32_t(r.int_or("pooling_type", 0));
    if (hp.pooling_type < 0 || hp.pooling_type > model_hparams::pooling_rank)
        r.fail("pooling_type",
               std::to_string(hp.pooling_type) + " is not supported (0 none, 1 mean, 2 cls, 3 last, 4 rank)");
    if (const auto *labels = f.get_string_array(r.key("classifier.output_labels"))) {
        if (labels->empty())
            r.fail("classifier.output_labels", "is empty (a classifier has at least one output)");
        hp.n_cls_out = int64_t(labels->size());
    }
    hp.n_swa = r.int_or("attention.sliding_window", 0);
    if (hp.n_swa < 0)
        r.fail("attention.sliding_window", "must not be negative, is " + std::to_string(hp.n_swa));
    hp.attn_softcap = read_hparam_float(f, hp, "attn_logit_softcapping", 0.0f);
    hp.final_softcap = read_hparam_float(f, hp, "final_logit_softcapping", 0.0f);
    if (hp.attn_softcap < 0.0f || hp.final_softcap < 0.0f)
        throw error(f.path() + ": " + arch + ": soft caps must not be negative");
    return hp;
}

float read_hparam_float(const gguf_file &f, const model_hparams &hp, const char *suffix,
                        std::optional<float> def) {
    const std::string key = hp.arch + "." + suffix;
    const auto v = f.get_float(key);
    if (!v) {
        if (!def) throw error(f.path() + ": " + key + ": missing (required)");
        return *def;
    }
    if (!std::isfinite(*v)) throw error(f.path() + ": " + key + ": must be finite, is " + std::to_string(*v));
    return float(*v);
}

float model_hparams::attn_temperature(int64_t pos) const {
    if (attn_temp_scale == 0.0f) return 1.0f;
    const float steps = std::floor((float(pos) + attn_temp_offset) / float(attn_temp_floor));
    return float(std::log(double(steps) + 1.0) * double(attn_temp_scale) + 1.0);
}

}  // namespace weft
