// tools/weft/cmd_quantize.cpp — `weft quantize IN OUT TYPE`: converts weights to a type or K-quant mix.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "weft/command.h"
#include "weft/file_arguments.h"
#include "weft/gguf/gguf.h"
#include "weft/quant/imatrix.h"
#include "weft/quant/quant.h"

namespace weft::tool {
namespace {

// A target the user can name: a file type of the established numbering, the type most weights
// get, and whether the per-tensor mix rules below apply.
struct recipe {
    const char *name;
    uint32_t file_type;  // general.file_type
    dtype base;
    const char *rule;  // for --help
};

// The choices of the established quantizer (llama_ftype); "Q3_K", "Q4_K" and "Q5_K" are, as there,
// aliases of their _M mixes, and "Q2_K" is itself a mix.
const recipe recipes[] = {
    {"F32", 0, dtype::f32, "every tensor f32"},
    {"F16", 1, dtype::f16, "2-D weights f16"},
    {"BF16", 32, dtype::bf16, "2-D weights bf16"},
    {"Q8_0", 7, dtype::q8_0, "q8_0; output.weight stays q8_0"},
    {"Q4_0", 2, dtype::q4_0, "q4_0; output.weight q6_K"},
    {"Q4_1", 3, dtype::q4_1, "q4_1; output.weight q6_K"},
    {"Q5_0", 8, dtype::q5_0, "q5_0; output.weight q6_K"},
    {"Q5_1", 9, dtype::q5_1, "q5_1; output.weight q6_K"},
    {"Q2_K", 10, dtype::q2_k,
     "q2_K; attn_v q3_K (q4_K when n_head/n_head_kv >= 4), ffn_down and attn_output q3_K, output q6_K"},
    {"Q3_K_S", 11, dtype::q3_k, "q3_K; output q6_K"},
    {"Q3_K_M", 12, dtype::q3_k,
     "q3_K; attn_v q5_K in the first 2 layers, q4_K after; ffn_down q5_K in the first 1/16 of the layers, "
     "q4_K after; attn_output q4_K; output q6_K"},
    {"Q3_K_L", 13, dtype::q3_k, "q3_K; attn_v, ffn_down and attn_output q5_K; output q6_K"},
    {"Q4_K_S", 14, dtype::q4_k,
     "q4_K; attn_v q5_K in the first 4 layers; ffn_down q5_K in the first 1/8 of the layers; output q6_K"},
    {"Q4_K_M", 15, dtype::q4_k, "q4_K; attn_v and ffn_down q6_K in the more-bits layers (*); output q6_K"},
    {"Q5_K_S", 16, dtype::q5_k, "q5_K; output q6_K"},
    {"Q5_K_M", 17, dtype::q5_k, "q5_K; attn_v and ffn_down q6_K in the more-bits layers (*); output q6_K"},
    {"Q6_K", 18, dtype::q6_k, "q6_K everywhere"},
    {"IQ4_NL", 25, dtype::iq4_nl,
     "iq4_nl; attn_v q5_K when n_head/n_head_kv >= 4; ffn_down q5_K in the first 1/8 of the layers "
     "(without an importance matrix); output q6_K"},
    {"IQ4_XS", 30, dtype::iq4_xs,
     "iq4_xs; attn_v q5_K when n_head/n_head_kv >= 4; ffn_down q5_K in the first 1/8 of the layers "
     "(without an importance matrix); output q6_K"},
    {"TQ1_0", 36, dtype::tq1_0, "tq1_0 (ternary); token_embd q4_K; output q6_K"},
    {"TQ2_0", 37, dtype::tq2_0, "tq2_0 (ternary); token_embd q4_K; output q6_K"},
    {"MXFP4_MOE", 38, dtype::mxfp4,
     "mxfp4 for the expert stacks (3-D weights, ne[2] > 1: ffn_*_exps); every other converted weight, "
     "token_embd and output included, q8_0"},
    // The grid i-quants; (i): needs an importance matrix, (g): q4_K for grouped queries, see below.
    {"IQ2_XXS", 19, dtype::iq2_xxs,
     "iq2_xxs (i); token_embd, attn_v (g) q2_K; ffn_down q2_K in the first 1/8 of the layers; output q5_K"},
    {"IQ2_XS", 20, dtype::iq2_xs,
     "iq2_xs (i); token_embd, attn_v (g) q2_K; ffn_down q2_K in the first 1/8 of the layers; output q5_K"},
    {"IQ2_S", 28, dtype::iq2_xs,
     "iq2_xs (i); token_embd, attn_v (g), attn_output iq3_s; ffn_down iq3_s in the first 1/8 of the layers; "
     "output q5_K"},
    {"IQ2_M", 29, dtype::iq2_s,
     "iq2_s (i); token_embd, attn_v (g), attn_output iq3_s; ffn_down iq3_s in the first 1/8 of the layers; "
     "output q5_K"},
    {"IQ3_XXS", 23, dtype::iq3_xxs,
     "iq3_xxs (i); token_embd, attn_output iq3_s; attn_q, attn_k iq2_s; attn_v q4_K when n_head/n_head_kv >= "
     "4, else iq3_xxs (iq3_s without an importance matrix, and then ffn_down q4_K in the first 1/8 of the "
     "layers, q3_K after); output q5_K"},
    {"IQ3_XS", 22, dtype::iq3_s,
     "iq3_s; attn_q, attn_k iq3_xxs (i); ffn_gate, ffn_up iq3_xxs (i) but in the first and last 1/8 of the "
     "layers; attn_v q4_K when n_head/n_head_kv >= 4; output q6_K"},
    {"IQ3_S", 26, dtype::iq3_s, "iq3_s; attn_v q4_K when n_head/n_head_kv >= 4; output q6_K"},
    {"IQ3_M", 27, dtype::iq3_s,
     "iq3_s; attn_v, attn_output, attn_qkv q4_K; ffn_down q4_K in the first 1/8 of the layers; output q6_K"},
    {"IQ1_S", 24, dtype::iq1_s,
     "iq1_s (i); token_embd, attn_v (g) q2_K; attn_output iq2_xxs; ffn_down q2_K in the first 1/8 of the "
     "layers; output q5_K"},
    {"IQ1_M", 31, dtype::iq1_m,
     "iq1_m (i); token_embd, attn_v (g) q2_K; attn_output iq2_xxs; ffn_down q2_K in the first 1/8 of the "
     "layers; output q5_K"},
};

struct alias {
    const char *name;
    const char *target;
};
const alias aliases[] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};

std::string upper(std::string s) {
    for (auto &c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

const recipe *find_recipe(std::string name) {
    name = upper(name);
    for (const auto &a : aliases)
        if (name == a.name) name = a.target;
    for (const auto &r : recipes)
        if (name == r.name) return &r;
    return nullptr;
}

// The established "use more bits" layer pattern: the first and last eighth of the layers and every
// third layer in between.
bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// Layer index from a "blk.N." prefix, or -1.
int layer_of(const std::string &name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    int n = 0;
    size_t i = 4;
    if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && n < 1000000)
        n = n * 10 + (name[i++] - '0');
    return n;
}

bool contains(const std::string &s, const char *part) {
    return s.find(part) != std::string::npos;
}

// What the mix rules need to know about the model.
struct model_shape {
    int n_layer = 0;
    int n_gqa = 1;  // n_head / n_head_kv
    int n_attention_wv = 0;
    int n_expert = 0;  // experts of the FFN (0: dense)
    bool has_output = false;
};

model_shape shape_of_model(const gguf_set &files) {
    const gguf_file &in = files.metadata();
    model_shape m;
    int max_layer = -1;
    for (const auto &t : files.tensors()) {
        max_layer = std::max(max_layer, layer_of(t.name));
        if (contains(t.name, "attn_v.weight")) ++m.n_attention_wv;
        if (t.name == "output.weight") m.has_output = true;
    }
    m.n_layer = max_layer + 1;
    if (const auto arch = in.get_string("general.architecture")) {
        if (const auto n = in.get_int(*arch + ".block_count"))
            m.n_layer = int(std::clamp<int64_t>(*n, 0, 1 << 20));
        // head counts may be per-layer arrays: take the first layer's
        const auto heads = in.get_int_array(*arch + ".attention.head_count");
        const auto heads_kv = in.get_int_array(*arch + ".attention.head_count_kv");
        if (heads && heads_kv && !heads->empty() && !heads_kv->empty() && heads_kv->front() > 0)
            m.n_gqa = int(heads->front() / heads_kv->front());
        if (const auto n = in.get_int(*arch + ".expert_count"))
            m.n_expert = int(std::clamp<int64_t>(*n, 0, 1 << 20));
    }
    return m;
}

// The established fallback when a row length is not a multiple of the chosen type's block size.
dtype fallback_for_row(dtype t, int64_t ne0) {
    if (ne0 % type_traits(t).block_size == 0) return t;
    switch (t) {
        case dtype::q2_k:
        case dtype::q3_k:
            t = dtype::q4_0;
            break;  // the established IQ4_NL is 4.5 bits too
        case dtype::iq2_xxs:
        case dtype::iq2_xs:
        case dtype::iq2_s:
        case dtype::iq3_xxs:
        case dtype::iq3_s:
        case dtype::iq1_s:
        case dtype::iq1_m:
        case dtype::iq4_xs:
            t = dtype::iq4_nl;
            break;
        case dtype::tq1_0:
        case dtype::tq2_0:
            t = dtype::q4_0;
            break;
        case dtype::q4_k:
            t = dtype::q5_0;
            break;
        case dtype::q5_k:
            t = dtype::q5_1;
            break;
        case dtype::q6_k:
            t = dtype::q8_0;
            break;
        default:
            break;
    }
    return ne0 % type_traits(t).block_size == 0 ? t : dtype::f16;
}

// The established file type numbers the mix rules below name.
namespace ftype {
constexpr uint32_t q4_0 = 2, q5_0 = 8, q2_k = 10, q3_k_s = 11, q3_k_m = 12, q3_k_l = 13, q4_k_s = 14,
                   q4_k_m = 15, q5_k_m = 17, iq2_xxs = 19, iq2_xs = 20, iq3_xs = 22, iq3_xxs = 23, iq1_s = 24,
                   iq4_nl = 25, iq3_s = 26, iq3_m = 27, iq2_s = 28, iq2_m = 29, iq4_xs = 30, iq1_m = 31,
                   mxfp4_moe = 38;
}

// Chooses each tensor's output type in file order (the attn_v counter depends on the order, as in
// the established quantizer). has_imatrix: an importance matrix is given (some rules depend on it).
class type_chooser {
  public:
    type_chooser(const recipe &r, const model_shape &m, bool pure, bool has_imatrix)
        : r_(r), m_(m), pure_(pure), has_imatrix_(has_imatrix) {}

    dtype choose(const gguf_tensor_info &t) {
        const std::string &name = t.name;
        const bool is_weight = name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
        int n_dims = 0;
        for (int d = 0; d < 4; ++d)
            if (t.ne[d] > 1) n_dims = d + 1;
        // Norms, biases and other 1-D tensors are not quantized, nor (as in the established tool)
        // the small 2-D ones that matter most: norms, MoE routers, BERT's position and token-type
        // embeddings, the convolutions of Mamba and LFM2. f16/bf16/quantized ones become f32, f32
        // and integer tensors keep their type.
        bool keep = !is_weight || n_dims < 2;
        for (const char *part : {"_norm.weight", "ffn_gate_inp.weight", "position_embd.weight",
                                 "token_types.weight", "ssm_conv1d.weight", "shortconv.conv.weight"})
            keep = keep || contains(name, part);
        if (keep) {
            const bool lossy =
                type_traits(t.type).is_quantized || t.type == dtype::f16 || t.type == dtype::bf16;
            return lossy ? dtype::f32 : t.type;
        }
        if (r_.base == dtype::f32 || r_.base == dtype::f16 || r_.base == dtype::bf16) return r_.base;
        dtype ty = pure_ ? r_.base : mixed(t);
        return fallback_for_row(ty, t.ne[0]);
    }

  private:
    bool is(std::initializer_list<uint32_t> file_types) const {
        return std::find(file_types.begin(), file_types.end(), r_.file_type) != file_types.end();
    }

    dtype mixed(const gguf_tensor_info &t) {
        using namespace ftype;
        const std::string &name = t.name;
        const dtype base = r_.base;
        // gpt-oss's mix: the experts in mxfp4, everything else q8_0 (the output and token_embd too)
        if (is({mxfp4_moe})) return t.ne[2] > 1 ? dtype::mxfp4 : dtype::q8_0;
        const bool is_output = name == "output.weight" || (!m_.has_output && name == "token_embd.weight");
        if (is_output) {
            if (t.ne[0] % 256 != 0) return dtype::q8_0;
            if (is({iq2_xxs, iq2_xs, iq3_xxs, iq1_s, iq2_s, iq2_m, iq1_m})) return dtype::q5_k;
            return base == dtype::q8_0 ? base : dtype::q6_k;
        }
        if (name == "token_embd.weight") {
            if (is({iq2_xxs, iq2_xs, iq1_s, iq1_m})) return dtype::q2_k;
            if (is({iq2_s, iq2_m, iq3_xxs})) return dtype::iq3_s;
            if (base == dtype::tq1_0 || base == dtype::tq2_0) return dtype::q4_k;
            return base;
        }
        if (is({iq2_xxs, iq2_xs, iq1_s, iq2_s, iq2_m, iq1_m})) return lowest_bits(t);
        if (contains(name, "attn_v.weight")) return attn_v(i_attention_wv_++);
        if (contains(name, "attn_k.weight")) {
            if (m_.n_expert == 8) return dtype::q8_0;
            if (is({iq3_xs})) return dtype::iq3_xxs;
            if (is({iq3_xxs})) return dtype::iq2_s;
        } else if (contains(name, "attn_q.weight")) {
            if (is({iq3_xs})) return dtype::iq3_xxs;
            if (is({iq3_xxs})) return dtype::iq2_s;
        } else if (contains(name, "ffn_down")) {
            return ffn_down(std::max(layer_of(name), 0));
        } else if (contains(name, "attn_output.weight")) {
            if (m_.n_expert == 8) {
                if (is({q2_k, iq3_xs, iq3_xxs, q3_k_s, q3_k_m, iq4_nl, q4_k_s, q4_k_m, iq3_s, iq3_m, iq4_xs}))
                    return dtype::q5_k;
            } else {
                if (is({q2_k})) return dtype::q3_k;
                if (is({iq3_xxs})) return dtype::iq3_s;
                if (is({q3_k_m, iq3_m})) return dtype::q4_k;
                if (is({q3_k_l})) return dtype::q5_k;
            }
        } else if (contains(name, "attn_qkv.weight")) {
            if (is({q3_k_m, q3_k_l, iq3_m})) return dtype::q4_k;
            if (is({q4_k_m})) return dtype::q5_k;
            if (is({q5_k_m})) return dtype::q6_k;
        } else if (contains(name, "ffn_gate") || contains(name, "ffn_up")) {
            const int i = std::max(layer_of(name), 0), n = m_.n_layer;
            if (is({iq3_xs}) && i >= n / 8 && i < 7 * n / 8) return dtype::iq3_xxs;
        }
        return base;
    }

    // The 1- and 2-bit types (IQ2_*, IQ1_*): a few sensitive tensors keep more bits.
    dtype lowest_bits(const gguf_tensor_info &t) {
        using namespace ftype;
        const std::string &name = t.name;
        const dtype more_bits = is({iq2_s, iq2_m}) ? dtype::iq3_s : dtype::q2_k;
        if (contains(name, "attn_v.weight")) {
            ++i_attention_wv_;
            return m_.n_gqa >= 4 || m_.n_expert >= 4 ? dtype::q4_k : more_bits;
        }
        if (m_.n_expert == 8 && contains(name, "attn_k.weight")) return dtype::q4_k;
        if (contains(name, "ffn_down"))
            return std::max(layer_of(name), 0) < m_.n_layer / 8 ? more_bits : r_.base;
        if (contains(name, "attn_output.weight")) {
            if (m_.n_expert == 8) return dtype::q5_k;
            if (is({iq1_s, iq1_m})) return dtype::iq2_xxs;
            if (is({iq2_s, iq2_m})) return dtype::iq3_s;
        }
        return r_.base;
    }

    // i: this attn_v's position among the model's attn_v tensors.
    dtype attn_v(int i) const {
        using namespace ftype;
        dtype ty = r_.base;
        if (is({q2_k}))
            ty = m_.n_gqa >= 4 ? dtype::q4_k : dtype::q3_k;
        else if (is({iq3_xxs}))
            ty = m_.n_gqa >= 4 ? dtype::q4_k : has_imatrix_ ? dtype::iq3_xxs : dtype::iq3_s;
        else if (is({iq3_xs, iq3_s}) && m_.n_gqa >= 4)
            ty = dtype::q4_k;
        else if (is({iq3_m}))
            ty = dtype::q4_k;
        else if (is({q3_k_m}))
            ty = i < 2 ? dtype::q5_k : dtype::q4_k;
        else if (is({q3_k_l}))
            ty = dtype::q5_k;
        else if (is({iq4_nl, iq4_xs}) && m_.n_gqa >= 4)
            ty = dtype::q5_k;
        else if (is({q4_k_m, q5_k_m}) && use_more_bits(i, m_.n_attention_wv))
            ty = dtype::q6_k;
        else if (is({q4_k_s}) && i < 4)
            ty = dtype::q5_k;
        return m_.n_expert == 8 ? dtype::q8_0 : ty;
    }

    // i: the layer.
    dtype ffn_down(int i) const {
        using namespace ftype;
        const int n = m_.n_layer;
        if (is({q2_k})) return dtype::q3_k;
        if (is({iq3_xxs}) && !has_imatrix_) return i < n / 8 ? dtype::q4_k : dtype::q3_k;
        if (is({q3_k_m})) return i < n / 16 ? dtype::q5_k : dtype::q4_k;
        if (is({iq3_m}) && (i < n / 8 || (m_.n_expert == 8 && use_more_bits(i, n)))) return dtype::q4_k;
        if (is({q3_k_l})) return dtype::q5_k;
        if (is({q4_k_m})) return use_more_bits(i, n) ? dtype::q6_k : r_.base;
        if (is({iq4_nl, iq4_xs}) && !has_imatrix_ && i < n / 8) return dtype::q5_k;
        if (is({q5_k_m}) && use_more_bits(i, n)) return dtype::q6_k;
        if (is({q4_k_s}) && i < n / 8) return dtype::q5_k;
        // with an importance matrix, the first layers of q4_0 / q5_0 take the type with a min
        if (is({q4_0, q5_0}) && has_imatrix_ && i < n / 8) return is({q4_0}) ? dtype::q4_1 : dtype::q5_1;
        return r_.base;
    }

    const recipe &r_;
    const model_shape &m_;
    bool pure_;
    bool has_imatrix_;
    int i_attention_wv_ = 0;
};

std::string shape_text(const gguf_tensor_info &t) {
    std::string s = "[";
    for (uint32_t d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
    return s + "]";
}

// Dequantizes rows of `in` to f32 and quantizes them to `to`, rows split across threads.
// importance: null, or per input column (ne0 values; ne0 x ne2 for a stack of expert matrices).
void convert_tensor(const gguf_tensor_info &t, const uint8_t *src, dtype to, uint8_t *dst, size_t dst_bytes,
                    int n_threads, const std::vector<float> *importance) {
    const int64_t ne0 = t.ne[0];
    const int64_t nrows = t.ne[1] * t.ne[2] * t.ne[3];
    const size_t src_row = row_size(t.type, ne0);
    const size_t dst_row = row_size(to, ne0);
    WEFT_ASSERT(dst_row * size_t(nrows) == dst_bytes);
    if (t.type != dtype::f32 && !has_quant_traits(t.type))
        throw error(std::string("weft cannot convert its type ") + type_name(t.type) + " to f32");
    const to_float_fn to_float = t.type == dtype::f32 ? nullptr : quant_traits_of(t.type).to_float;

    const int64_t rows_per_chunk = std::max<int64_t>(1, (1 << 16) / ne0);  // ~256 KiB of f32 per chunk
    const int n_workers = int(std::clamp<int64_t>(n_threads, 1, std::max<int64_t>(1, nrows)));
    std::exception_ptr failure;
    std::mutex failure_mutex;
    auto work = [&](int worker) {
        try {
            std::vector<float> buf(size_t(rows_per_chunk * ne0));
            const int64_t per_worker = (nrows + n_workers - 1) / n_workers;
            const int64_t r_begin = std::min(nrows, per_worker * worker);
            const int64_t r_end = std::min(nrows, r_begin + per_worker);
            for (int64_t r0 = r_begin; r0 < r_end; r0 += rows_per_chunk) {
                int64_t nr = std::min(rows_per_chunk, r_end - r0);
                // one matrix of a stack at a time: each has its own importance
                if (importance) nr = std::min(nr, (r0 / t.ne[1] + 1) * t.ne[1] - r0);
                const float *imp =
                    importance
                        ? importance->data() + (importance->size() > size_t(ne0) ? (r0 / t.ne[1]) * ne0 : 0)
                        : nullptr;
                for (int64_t r = 0; r < nr; ++r) {
                    const uint8_t *row = src + size_t(r0 + r) * src_row;
                    float *out = buf.data() + r * ne0;
                    if (to_float)
                        to_float(row, out, ne0);
                    else
                        std::memcpy(out, row, size_t(ne0) * sizeof(float));
                }
                size_t written = 0;
                try {
                    written = quantize_rows(to, buf.data(), dst + size_t(r0) * dst_row, nr, ne0, imp);
                } catch (const error &e) {  // its rows count from this chunk's first
                    throw error("rows " + std::to_string(r0) + " to " + std::to_string(r0 + nr - 1) + ": " +
                                e.what());
                }
                WEFT_ASSERT(written == size_t(nr) * dst_row);
            }
        } catch (...) {
            std::lock_guard lock(failure_mutex);
            if (!failure) failure = std::current_exception();
        }
    };
    std::vector<std::thread> threads;
    for (int w = 1; w < n_workers; ++w) threads.emplace_back(work, w);
    work(0);
    for (auto &th : threads) th.join();
    if (failure) std::rethrow_exception(failure);
}

std::string mib(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
    return buf;
}

// One progress line of a tensor (ms < 0: not converted, a dry run).
void report_tensor(size_t i, size_t n_tensors, const gguf_tensor_info &t, dtype to, size_t nbytes,
                   double ms) {
    char took[32] = "";
    if (ms >= 0) std::snprintf(took, sizeof took, " %8.1f ms", ms);
    std::fprintf(stderr, "[%4zu/%4zu] %-32s %-20s %5s -> %-7s %10s -> %10s%s\n", i + 1, n_tensors,
                 printable(t.name).c_str(), shape_text(t).c_str(), type_name(t.type), type_name(to),
                 mib(double(t.nbytes)).c_str(), mib(double(nbytes)).c_str(), took);
}

// Why tensor t cannot be made as `to` ("" when it can): the quant layer has no quantizer for the
// type; or the type is one the established tool only makes with an importance matrix (its lowest-bit
// types, token_embd and output excepted) and there is none for this tensor; or the quantizer itself
// needs one (iq2_xxs, iq2_xs, whatever the tensor).
std::string why_not_producible(const gguf_tensor_info &t, dtype to, const std::vector<float> *importance,
                               bool have_imatrix) {
    if (to == t.type) return "";
    const std::string what = "tensor '" + printable(t.name) + "' would become " + type_name(to);
    if (!has_quant_traits(to)) return what + ", which the quant layer cannot produce";
    // zero rows: quantize_rows only checks that the type can be made (nothing is read)
    static const float any_importance = 1;
    const auto check = [&](const float *imp) -> std::string {
        try {
            quantize_rows(to, nullptr, nullptr, 0, t.ne[0], imp);
        } catch (const error &e) {
            return what + ": " + e.what();
        }
        return "";
    };
    if (std::string why = check(&any_importance); !why.empty()) return why;
    const bool needs_importance = (to == dtype::iq2_xxs || to == dtype::iq2_xs || to == dtype::iq2_s ||
                                   to == dtype::iq3_xxs || to == dtype::iq1_s || to == dtype::iq1_m) &&
                                  t.name != "token_embd.weight" && t.name != "output.weight";
    if (needs_importance && !importance)
        return what + ", which needs an importance matrix" +
               (have_imatrix ? std::string(" (the one given has no entry for it)")
                             : std::string(": pass --imatrix FILE (weft imatrix makes one)"));
    return check(importance ? importance->data() : nullptr);
}

std::string help_footer() {
    std::string s = "TYPE (the established file types; case does not matter):\n";
    for (const auto &r : recipes) {
        char line[512];
        std::snprintf(line, sizeof line, "  %-8s %s\n", r.name, r.rule);
        s += line;
    }
    s += "  Q3_K, Q4_K, Q5_K are aliases of Q3_K_M, Q4_K_M, Q5_K_M.\n\n"
         "Rules common to all types:\n"
         "  - only tensors whose name ends in \"weight\" with 2 or more dimensions are converted, but for\n"
         "    norms, MoE routers (ffn_gate_inp) and BERT's position and token-type embeddings; the others\n"
         "    are written as f32 (f32 and integer ones are copied as they are);\n"
         "  - output.weight (token_embd.weight when the model has no output.weight) gets q6_K in the\n"
         "    quantized types (q5_K in IQ2_*, IQ1_* and IQ3_XXS; q8_0 stays q8_0; q8_0 too when its rows\n"
         "    are not a multiple of 256); token_embd.weight otherwise gets the base type (q4_K for the\n"
         "    ternary types, the types named above for the grid i-quants);\n"
         "  - (*) the more-bits layers are the first and last eighth and every third layer between\n"
         "    ((i - n/8) % 3 == 2), counted over the attn_v tensors / the layers;\n"
         "  - (g) attn_v gets q4_K when n_head/n_head_kv >= 4 or the model has >= 4 experts;\n"
         "  - models of 8 experts: attn_v and attn_k q8_0 (attn_k q4_K, attn_output q5_K in IQ2_*,\n"
         "    IQ1_*), attn_output q5_K in the 3- and 4-bit mixes;\n"
         "  - with --imatrix, Q4_0 and Q5_0 give the first 1/8 of the ffn_down layers q4_1 / q5_1;\n"
         "  - (i) iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq1_s and iq1_m tensors other than token_embd and\n"
         "    output need an importance matrix (--imatrix, from `weft imatrix`), as in the established\n"
         "    tool; a type weft cannot make yet is refused by name before anything is written;\n"
         "  - a row length that is not a multiple of the block size falls back: q2_K/q3_K -> q4_0,\n"
         "    q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, the 256-value i-quants -> iq4_nl,\n"
         "    tq1_0/tq2_0 -> q4_0, and f16 when that still does not divide;\n"
         "  - --pure turns the mix and the output rule off (every converted tensor gets the base type);\n"
         "  - input tensors of any type are dequantized to f32 first; a tensor whose type does not\n"
         "    change is copied byte for byte.\n"
         "general.file_type is set to the type's number and all other metadata is copied.\n";
    return s;
}

int quantize_main(int argc, char **argv) {
    CLI::App app{
        "Converts the weights of a GGUF model to another type or an established K-quant or i-quant mix.\n"
        "Writes OUT atomically (a temporary file renamed at the end); prints a line per tensor to stderr.",
        "weft quantize"};
    std::string in_path, out_path, type_arg;
    int n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
    bool pure = false;
    app.add_option("input", in_path, "input GGUF file")->required()->check(weft::tool::input_file());
    app.add_option("output", out_path, "output GGUF file")->required();
    app.add_option("type", type_arg, "target type or mix (see below)")->required();
    app.add_option("-t,--threads", n_threads, "threads used per tensor")
        ->capture_default_str()
        ->check(CLI::Range(1, 1024));
    app.add_flag("--pure", pure, "no mix: every converted tensor gets the base type (fallbacks still apply)");
    std::string imatrix_path;
    app.add_option("--imatrix", imatrix_path,
                   "importance matrix (weft imatrix, or the reference engine's legacy .imatrix file): the "
                   "i-quant and K-quant quantizers weigh each column's rounding error by it")
        ->check(weft::tool::input_file());
    bool dry_run = false;
    app.add_flag("--dry-run", dry_run,
                 "print each tensor's type and size, check that every type can be made, write nothing");
    app.footer(help_footer());
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;

    const recipe *r = find_recipe(type_arg);
    if (!r) throw error("unknown type '" + type_arg + "' (see weft quantize --help)");
    if (!has_quant_traits(r->base))
        throw error("type " + std::string(type_name(r->base)) +
                    " cannot be produced: the quant layer has no traits for it");
    require_output_not_input(out_path, {in_path, imatrix_path});

    importance_matrix imatrix;
    if (!imatrix_path.empty()) {
        imatrix = read_imatrix(imatrix_path);
        std::fprintf(stderr, "weft quantize: %zu importance entries from %s (%d chunks)\n",
                     imatrix.entries.size(), imatrix_path.c_str(), imatrix.chunks);
    }
    const auto in = gguf_set::open(in_path);  // a split set is read whole and written as one file
    const model_shape shape = shape_of_model(*in);
    type_chooser chooser(*r, shape, pure, !imatrix_path.empty());

    gguf_writer out;
    for (const auto &kv : in->metadata().kvs()) {
        if (kv.key == "general.file_type" || kv.key == "general.quantization_version") continue;
        if (gguf_is_split_key(kv.key)) continue;
        out.set_kv(kv);
    }
    // As the established quantizer: the quantization version, then the file type, after the copied keys.
    out.set_u32("general.quantization_version", 2);
    out.set_u32("general.file_type", r->file_type);
    if (!imatrix_path.empty()) {  // as the established quantizer records it
        out.set_string("quantize.imatrix.file", imatrix_path);
        if (!imatrix.dataset.empty()) out.set_string("quantize.imatrix.dataset", imatrix.dataset);
        out.set_i32("quantize.imatrix.entries_count", int32_t(imatrix.entries.size()));
        out.set_i32("quantize.imatrix.chunks_count", imatrix.chunks);
    }

    // The established quantizer's order: tensors outside the layers first, then layer by layer,
    // by name within each (its tensor map is sorted by name). It fixes the attn_v counting order
    // and lets a file be compared byte for byte with the established tool's output.
    std::vector<const gguf_tensor_info *> order;
    for (const auto &t : in->tensors()) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const gguf_tensor_info *a, const gguf_tensor_info *b) {
        const int la = layer_of(a->name), lb = layer_of(b->name);
        return la != lb ? la < lb : a->name < b->name;
    });

    const auto start = std::chrono::steady_clock::now();
    const size_t n_tensors = order.size();
    uint64_t bytes_in = 0, bytes_out = 0;
    for (size_t i = 0; i < n_tensors; ++i) {
        const gguf_tensor_info &t = *order[i];
        const dtype to = chooser.choose(t);
        const size_t nbytes = row_size(to, t.ne[0]) * size_t(t.ne[1] * t.ne[2] * t.ne[3]);
        bytes_in += t.nbytes;
        bytes_out += nbytes;
        const std::vector<float> *importance = imatrix.importance(t.name);
        if (importance && to != t.type && importance->size() != size_t(t.ne[0]) &&
            importance->size() != size_t(t.ne[0] * t.ne[2]))
            throw error(imatrix_path + ": entry '" + t.name + "' has " + std::to_string(importance->size()) +
                        " values; the tensor has " + std::to_string(t.ne[0]) + " columns");
        // Refused before anything is written (a dry run only warns).
        if (const std::string why = why_not_producible(t, to, importance, !imatrix_path.empty());
            !why.empty()) {
            if (!dry_run) throw error(std::string(r->name) + ": " + why);
            std::fprintf(stderr, "weft quantize: warning: %s\n", why.c_str());
        }
        if (dry_run) {
            report_tensor(i, n_tensors, t, to, nbytes, -1);
            continue;
        }
        std::vector<int64_t> ne(t.ne, t.ne + std::max<uint32_t>(t.n_dims, 1));
        const uint8_t *src = in->tensor_data(t);
        out.add_tensor_fill(
            t.name, to, ne,
            [&t, &in_path, src, to, n_threads, i, n_tensors, importance](uint8_t *dst, size_t nbytes) {
                const auto t0 = std::chrono::steady_clock::now();
                if (to == t.type) {
                    std::memcpy(dst, src, nbytes);
                } else {
                    try {
                        convert_tensor(t, src, to, dst, nbytes, n_threads, importance);
                    } catch (const error &e) {  // say which file and tensor the bad value is in
                        throw error(in_path + ": tensor " + weft::quoted(t.name) + ": " + e.what());
                    }
                }
                report_tensor(
                    i, n_tensors, t, to, nbytes,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
            });
    }
    if (dry_run) {
        std::fprintf(stderr, "weft quantize: dry run of %s (%s): tensors %s -> %s; nothing written\n",
                     in_path.c_str(), r->name, mib(double(bytes_in)).c_str(), mib(double(bytes_out)).c_str());
        return 0;
    }

    out.write(out_path);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "weft quantize: %s -> %s (%s): tensors %s -> %s in %.2f s\n", in_path.c_str(),
                 out_path.c_str(), r->name, mib(double(bytes_in)).c_str(), mib(double(bytes_out)).c_str(), s);
    return 0;
}

[[maybe_unused]] const bool registered_quantize = register_command(
    {"quantize", "convert a GGUF model's weights to another type or K-quant mix", &quantize_main});

}  // namespace
}  // namespace weft::tool
