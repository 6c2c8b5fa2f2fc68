// src/vision/clip.cpp — the CLIP vision encoder and the LLaVA projectors: loading, graph, encoding.
#include "weft/vision/clip.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "model/tensor_loader.h"
#include "weft/core/backend.h"
#include "weft/core/context.h"
#include "weft/core/graph.h"
#include "weft/core/ops.h"
#include "weft/core/scheduler.h"
#include "weft/gguf/gguf.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"

namespace weft::vision {

namespace {

struct clip_layer {
    tensor *ln1_w = nullptr, *ln1_b = nullptr;
    tensor *q_w = nullptr, *q_b = nullptr, *k_w = nullptr, *k_b = nullptr, *v_w = nullptr, *v_b = nullptr;
    tensor *o_w = nullptr, *o_b = nullptr;
    tensor *ln2_w = nullptr, *ln2_b = nullptr;
    tensor *up_w = nullptr, *up_b = nullptr, *down_w = nullptr, *down_b = nullptr;
};

const char *projector_names = "mlp, mlp_norm, ldpv2";

// ldpv2's 2 x 2 average pool over the n_side x n_side patch grid as a product: f32 [n_patches, n_pooled]
// (ggml order), 1/4 where patch p falls in pooled cell q.
std::vector<float> pool_matrix(int64_t n_side) {
    const int64_t half = n_side / 2, n_patches = n_side * n_side;
    std::vector<float> m(size_t(n_patches * half * half), 0.0f);
    for (int64_t y = 0; y < n_side; ++y)
        for (int64_t x = 0; x < n_side; ++x)
            m[size_t(((y / 2) * half + x / 2) * n_patches + y * n_side + x)] = 0.25f;
    return m;
}

// ldpv2's depthwise 3 x 3 convolution (padding 1) gathers, for tap k = ky * 3 + kx, each cell's neighbour
// (x + kx - 1, y + ky - 1) or zero: one 0/1 matrix per tap, side by side: f32 [n_cells, 9 * n_cells].
std::vector<float> shift_matrix(int64_t side) {
    const int64_t n = side * side;
    std::vector<float> m(size_t(n * 9 * n), 0.0f);
    for (int64_t k = 0; k < 9; ++k)
        for (int64_t y = 0; y < side; ++y)
            for (int64_t x = 0; x < side; ++x) {
                const int64_t sx = x + k % 3 - 1, sy = y + k / 3 - 1;
                if (sx >= 0 && sx < side && sy >= 0 && sy < side)
                    m[size_t((k * n + y * side + x) * n + sy * side + sx)] = 1.0f;
            }
    return m;
}

}  // namespace

struct clip_weights {
    mapped_tensors mapped;
    tensor *patch_w = nullptr;                          // [patch, patch, 3, n_embd]
    tensor *patch_b = nullptr;                          // [n_embd] (optional)
    tensor *class_embd = nullptr;                       // [n_embd] (optional)
    tensor *pos_embd = nullptr;                         // [n_embd, n_pos]
    tensor *pre_ln_w = nullptr, *pre_ln_b = nullptr;    // [n_embd] (optional)
    tensor *post_ln_w = nullptr, *post_ln_b = nullptr;  // [n_embd] (optional)
    std::vector<clip_layer> layers;                     // the n_layer_run computed
    // projector: mlp uses mm[0] and mm[2]; mlp_norm mm[0], mm[1] (norm), mm[3], mm[4] (norm); ldpv2
    // mm[0] and mm[2] (mm.model.mlp.N) and the PEG's depthwise kernel [3, 3, C] and bias
    std::array<tensor *, 5> mm_w{}, mm_b{};
    tensor *peg_w = nullptr, *peg_b = nullptr;
    size_t n_bytes = 0;
};

clip_model::clip_model() = default;
clip_model::~clip_model() = default;

std::unique_ptr<clip_model> clip_model::load(const std::string &path) {
    std::unique_ptr<clip_model> m(new clip_model());
    m->path_ = path;
    m->file_ = gguf_set::open(path);
    const gguf_set &files = *m->file_;
    const gguf_file &f = files.metadata();
    auto fail = [&](const std::string &what) -> error { return error(path + ": " + what); };
    const auto arch = f.get_string("general.architecture");
    if (arch != "clip")
        throw fail("general.architecture is " + (arch ? weft::quoted(*arch) : std::string("absent")) +
                   ", not 'clip': not an mmproj file (the vision projector of a multimodal model)");
    if (f.get_bool("clip.has_vision_encoder") == false)
        throw fail("clip.has_vision_encoder is false: the file has no vision encoder (an audio projector?)");
    auto required_int = [&](const char *key) {
        const auto v = f.get_int(key);
        if (!v) throw fail(std::string("missing key '") + key + "'");
        if (*v <= 0 || *v > (int64_t(1) << 20))
            throw fail(std::string("'") + key + "' is " + std::to_string(*v) + ", out of range");
        return *v;
    };
    clip_hparams &hp = m->hp_;
    hp.projector_name = f.get_string("clip.projector_type").value_or("mlp");
    if (hp.projector_name == "mlp")
        hp.projector = projector_kind::mlp;
    else if (hp.projector_name == "mlp_norm")
        hp.projector = projector_kind::mlp_norm;
    else if (hp.projector_name == "ldpv2")
        hp.projector = projector_kind::ldpv2;
    else
        throw fail("projector type " + weft::quoted(hp.projector_name) +
                   " (clip.projector_type) is not one weft runs; " + "weft runs " + projector_names);
    hp.image_size = required_int("clip.vision.image_size");
    hp.patch_size = required_int("clip.vision.patch_size");
    hp.n_embd = required_int("clip.vision.embedding_length");
    hp.n_ff = required_int("clip.vision.feed_forward_length");
    hp.n_head = required_int("clip.vision.attention.head_count");
    hp.n_layer = required_int("clip.vision.block_count");
    if (auto eps = f.get_float("clip.vision.attention.layer_norm_epsilon")) hp.eps = float(*eps);
    if (!(hp.eps > 0.0f) || !std::isfinite(hp.eps))
        throw fail("the layer norm epsilon is not a positive number");
    if (hp.image_size % hp.patch_size != 0)
        throw fail("image_size " + std::to_string(hp.image_size) + " is not a multiple of patch_size " +
                   std::to_string(hp.patch_size));
    if (hp.n_embd % hp.n_head != 0)
        throw fail("embedding_length " + std::to_string(hp.n_embd) + " is not a multiple of head_count " +
                   std::to_string(hp.n_head));
    for (const auto &[key, out] : {std::pair{"clip.vision.image_mean", &hp.image_mean},
                                   std::pair{"clip.vision.image_std", &hp.image_std}}) {
        const auto v = f.get_float_array(key);
        if (!v || v->size() != 3) throw fail(std::string("'") + key + "' must be an array of 3 floats");
        for (size_t c = 0; c < 3; ++c) (*out)[c] = (*v)[c];
    }
    for (float s : hp.image_std)
        if (!(s > 0.0f) || !std::isfinite(s))
            throw fail("clip.vision.image_std holds a value that is not positive");
    for (float s : hp.image_mean)
        if (!std::isfinite(s)) throw fail("clip.vision.image_mean holds a value that is not finite");
    if (f.get_bool("clip.use_gelu").value_or(false))
        hp.activation = clip_activation::gelu;
    else if (f.get_bool("clip.use_silu").value_or(false))
        hp.activation = clip_activation::silu;
    // LLaVA takes the second-to-last layer's output: the reference computes n_layer - 1 blocks unless
    // the file names the feature layer (one value: the hidden state after that many blocks)
    hp.n_layer_run = hp.n_layer - 1;
    if (const auto fl = f.get_int_array("clip.vision.feature_layer")) {
        if (fl->size() != 1)
            throw fail("clip.vision.feature_layer lists " + std::to_string(fl->size()) +
                       " layers; weft takes the features of one layer (stacked layers are not supported)");
        if ((*fl)[0] < 1 || (*fl)[0] > hp.n_layer)
            throw fail("clip.vision.feature_layer " + std::to_string((*fl)[0]) + " is not in [1, " +
                       std::to_string(hp.n_layer) + "]");
        hp.n_layer_run = (*fl)[0];
    }

    // weights
    m->w_ = std::make_unique<clip_weights>();
    clip_weights &w = *m->w_;
    w.mapped = map_tensors(files);
    tensor_loader tl(files, *w.mapped.ctx, w.mapped.buffers);
    const int64_t n_embd = hp.n_embd, p = hp.patch_size;
    const int64_t n_pos = hp.n_patches() + (tl.has("v.class_embd") ? 1 : 0);
    w.patch_w = tl.create("v.patch_embd.weight", {p, p, 3, n_embd});
    w.patch_b = tl.create_optional("v.patch_embd.bias", {n_embd});
    w.class_embd = tl.create_optional("v.class_embd", {n_embd});
    w.pos_embd = tl.create("v.position_embd.weight", {n_embd, n_pos});
    w.pre_ln_w = tl.create_optional("v.pre_ln.weight", {n_embd});
    w.pre_ln_b = w.pre_ln_w ? tl.create("v.pre_ln.bias", {n_embd}) : nullptr;
    w.post_ln_w = tl.create_optional("v.post_ln.weight", {n_embd});
    w.post_ln_b = w.post_ln_w ? tl.create("v.post_ln.bias", {n_embd}) : nullptr;
    auto name = [](int64_t il, const char *what, const char *suffix) {
        return "v.blk." + std::to_string(il) + "." + what + "." + suffix;
    };
    for (int64_t il = 0; il < hp.n_layer_run; ++il) {
        clip_layer l;
        auto pair = [&](const char *what, tensor *&wt, tensor *&bias, std::initializer_list<int64_t> ne,
                        int64_t n_out) {
            wt = tl.create(name(il, what, "weight"), ne);
            bias = tl.create(name(il, what, "bias"), {n_out});
        };
        pair("ln1", l.ln1_w, l.ln1_b, {n_embd}, n_embd);
        pair("attn_q", l.q_w, l.q_b, {n_embd, n_embd}, n_embd);
        pair("attn_k", l.k_w, l.k_b, {n_embd, n_embd}, n_embd);
        pair("attn_v", l.v_w, l.v_b, {n_embd, n_embd}, n_embd);
        pair("attn_out", l.o_w, l.o_b, {n_embd, n_embd}, n_embd);
        pair("ln2", l.ln2_w, l.ln2_b, {n_embd}, n_embd);
        pair("ffn_up", l.up_w, l.up_b, {n_embd, hp.n_ff}, hp.n_ff);
        pair("ffn_down", l.down_w, l.down_b, {hp.n_ff, n_embd}, n_embd);
        w.layers.push_back(l);
    }
    // the projector's matrices: each one's input width is the previous one's output
    const std::string mm_prefix = hp.projector == projector_kind::ldpv2 ? "mm.model.mlp." : "mm.";
    auto matrix = [&](int i, int64_t n_in) {
        const std::string base = mm_prefix + std::to_string(i) + ".";
        const gguf_tensor_info *info = files.find_tensor(base + "weight");
        if (!info)
            throw fail("missing tensor '" + base + "weight' of the " + hp.projector_name + " projector");
        const int64_t n_out = info->ne[1];
        w.mm_w[size_t(i)] = tl.create(base + "weight", {n_in, n_out});
        w.mm_b[size_t(i)] = tl.create(base + "bias", {n_out});
        return n_out;
    };
    auto norm_of = [&](int i, int64_t n) {
        const std::string base = "mm." + std::to_string(i) + ".";
        w.mm_w[size_t(i)] = tl.create(base + "weight", {n});
        w.mm_b[size_t(i)] = tl.create(base + "bias", {n});
    };
    if (hp.projector == projector_kind::mlp) {
        hp.n_output_embd = matrix(2, matrix(0, n_embd));
    } else if (hp.projector == projector_kind::ldpv2) {
        if (hp.n_patches_side() % 2 != 0)
            throw fail("the ldpv2 projector pools 2 x 2 patches: " + std::to_string(hp.n_patches_side()) +
                       " patches on a side is odd");
        const int64_t c = hp.n_output_embd = matrix(2, matrix(0, n_embd));
        // the depthwise kernel: [3, 3, C, 1] as the reference's converter writes it, or [3, 3, 1, C]
        const gguf_tensor_info *info = files.find_tensor("mm.model.peg.0.weight");
        const bool channels_last = info && info->ne[2] == 1 && info->ne[3] == c;
        w.peg_w = channels_last ? tl.create("mm.model.peg.0.weight", {3, 3, 1, c})
                                : tl.create("mm.model.peg.0.weight", {3, 3, c});
        w.peg_b = tl.create("mm.model.peg.0.bias", {c});
    } else {
        const int64_t hidden = matrix(0, n_embd);
        norm_of(1, hidden);
        hp.n_output_embd = matrix(3, hidden);
        norm_of(4, hp.n_output_embd);
    }
    for (const tensor *t : w.mapped.ctx->tensors()) w.n_bytes += t->nbytes();
    return m;
}

std::string clip_model::describe() const {
    const clip_hparams &hp = hp_;
    char buf[512];
    std::snprintf(
        buf, sizeof buf,
        "clip %s, image %lld (patch %lld, %lld tokens), %lld layers (%lld run), n_embd %lld, %lld heads, "
        "n_ff %lld, %s, output %lld, %s, %.1f MiB",
        hp.projector_name.c_str(), (long long)hp.image_size, (long long)hp.patch_size,
        (long long)n_image_tokens(), (long long)hp.n_layer, (long long)hp.n_layer_run, (long long)hp.n_embd,
        (long long)hp.n_head, (long long)hp.n_ff,
        hp.activation == clip_activation::gelu   ? "gelu"
        : hp.activation == clip_activation::silu ? "silu"
                                                 : "quick-gelu",
        (long long)hp.n_output_embd, type_name(w_->patch_w->type), double(w_->n_bytes) / 1048576.0);
    return buf;
}

void clip_model::check_text_model(const model &m) const {
    if (m.hparams().n_embd != hp_.n_output_embd)
        throw error(path_ + ": the projector's output width is " + std::to_string(hp_.n_output_embd) +
                    ", but " + m.path() + " has n_embd " + std::to_string(m.hparams().n_embd) +
                    ": this mmproj belongs to another text model");
}

std::vector<float> clip_model::preprocess(const rgb_image &img) const {
    std::array<uint8_t, 3> fill{};
    for (size_t c = 0; c < 3; ++c)
        fill[c] = uint8_t(std::clamp(std::nearbyint(hp_.image_mean[c] * 255.0f), 0.0f, 255.0f));
    const int32_t side = int32_t(hp_.image_size);
    return image_normalize(image_pad_and_resize(img, fill, side), hp_.image_mean, hp_.image_std);
}

namespace {

// Records the graph of one image into a no_alloc arena.
class clip_graph {
  public:
    clip_graph(context &ctx, const clip_hparams &hp, const clip_weights &w) : ctx_(ctx), hp_(hp), w_(w) {}

    // inputs: patches f32 [patch * patch * 3, n_patches] (each patch's pixels in the kernel's order),
    // positions i32 [n_pos]; returns f32 [n_output_embd, n_patches].
    tensor *build(tensor *patches, tensor *positions) {
        const int64_t n_embd = hp_.n_embd;
        tensor *kernel = reshape_2d(ctx_, w_.patch_w, patches->ne[0], n_embd);
        tensor *x = named(linear(patches, kernel, w_.patch_b), "patch_embd");
        if (w_.class_embd) {
            tensor *cls = reshape_2d(
                ctx_,
                w_.class_embd->type == dtype::f32 ? w_.class_embd : cast(ctx_, w_.class_embd, dtype::f32),
                n_embd, 1);
            x = concat(ctx_, cls, x, 1);  // the class token first, as CLIP was trained
        }
        x = named(add(ctx_, x, get_rows(ctx_, w_.pos_embd, positions)), "inp_pos_embd");
        if (w_.pre_ln_w) x = named(layer_norm(x, w_.pre_ln_w, w_.pre_ln_b), "pre_ln");
        for (int64_t il = 0; il < int64_t(w_.layers.size()); ++il) {
            const clip_layer &l = w_.layers[size_t(il)];
            x = named(add(ctx_, x, attention_block(named(layer_norm(x, l.ln1_w, l.ln1_b), "ln1", il), l, il)),
                      "ffn_inp", il);
            tensor *cur = named(layer_norm(x, l.ln2_w, l.ln2_b), "ln2", il);
            cur = linear(activation(linear(cur, l.up_w, l.up_b)), l.down_w, l.down_b);
            x = named(add(ctx_, x, named(cur, "ffn_out", il)), "layer_out", il);
        }
        if (w_.post_ln_w) x = named(layer_norm(x, w_.post_ln_w, w_.post_ln_b), "post_ln");
        if (w_.class_embd)  // the patches' rows: the class token's is not an image token
            x = view_2d(ctx_, x, n_embd, x->ne[1] - 1, x->nb[1], x->nb[1]);
        if (hp_.projector == projector_kind::mlp) {
            x = linear(gelu_exact(linear(x, w_.mm_w[0], w_.mm_b[0])), w_.mm_w[2], w_.mm_b[2]);
        } else if (hp_.projector == projector_kind::ldpv2) {
            x = linear(gelu_exact(linear(x, w_.mm_w[0], w_.mm_b[0])), w_.mm_w[2], w_.mm_b[2]);
            x = peg(x);
        } else {
            x = gelu_exact(layer_norm(linear(x, w_.mm_w[0], w_.mm_b[0]), w_.mm_w[1], w_.mm_b[1]));
            x = layer_norm(linear(x, w_.mm_w[3], w_.mm_b[3]), w_.mm_w[4], w_.mm_b[4]);
        }
        return named(x, "image_embd");
    }

    // ldpv2's inputs: the pooling and shift matrices (pool_matrix, shift_matrix)
    tensor *pool = nullptr, *shift = nullptr;

  private:
    // x [C, n_patches] -> pooled 2 x 2 [C, n_pooled], plus its depthwise 3 x 3 convolution and bias
    // (MobileVLM V2's PEG). The pool and the convolution's gathers are products with constant 0/1 and
    // 1/4 matrices, so they need no ops of their own.
    tensor *peg(tensor *x) {
        const int64_t c = x->ne[0], n_pooled = hp_.n_patches() / 4;
        pool = input(dtype::f32, {hp_.n_patches(), n_pooled}, "inp_pool");
        shift = input(dtype::f32, {n_pooled, 9 * n_pooled}, "inp_peg_shift");
        tensor *pooled = named(mul_mat(ctx_, cont(ctx_, transpose(ctx_, x)), pool), "pooled");
        tensor *taps = mul_mat(ctx_, cont(ctx_, transpose(ctx_, pooled)), shift);        // [C, 9 * n_pooled]
        tensor *kernel = cont(ctx_, transpose(ctx_, reshape_2d(ctx_, w_.peg_w, 9, c)));  // [C, 9]
        tensor *out = add(ctx_, pooled, w_.peg_b);
        for (int64_t k = 0; k < 9; ++k) {
            tensor *tap = view_2d(ctx_, taps, c, n_pooled, taps->nb[1], size_t(k * n_pooled) * taps->nb[1]);
            out = add(ctx_, out, mul(ctx_, tap, view_1d(ctx_, kernel, c, size_t(k) * kernel->nb[1])));
        }
        return named(out, "peg");
    }
    tensor *input(dtype t, std::initializer_list<int64_t> ne, const char *name) {
        tensor *x = ctx_.new_tensor(t, ne);
        x->set_name(name);
        x->flags |= tensor_flag_input;
        return x;
    }
    tensor *named(tensor *t, const char *base, int64_t il = -1) {
        t->set_name(il >= 0 ? std::string(base) + "-" + std::to_string(il) : std::string(base));
        return t;
    }
    tensor *linear(tensor *x, tensor *w, tensor *b) {
        tensor *cur = mul_mat(ctx_, w, x);
        return b ? add(ctx_, cur, b) : cur;
    }
    tensor *layer_norm(tensor *x, tensor *w, tensor *b) {
        return add(ctx_, mul(ctx_, norm(ctx_, x, hp_.eps), w), b);
    }
    // GELU of the tanh form in f32, 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))), from exact ops: the
    // gelu op follows the reference's f16 table (errors near 1e-3), which an encoder need not copy.
    tensor *gelu_exact(tensor *x) {
        constexpr float sqrt_2_over_pi = 0.7978845608028654f;
        tensor *x3 = mul(ctx_, mul(ctx_, x, x), x);
        tensor *inner = scale(ctx_, add(ctx_, x, scale(ctx_, x3, 0.044715f)), sqrt_2_over_pi);
        return scale(ctx_, add(ctx_, x, mul(ctx_, x, weft::tanh(ctx_, inner))), 0.5f);
    }
    tensor *activation(tensor *x) {
        switch (hp_.activation) {
            case clip_activation::gelu:
                return gelu_exact(x);
            case clip_activation::silu:
                return silu(ctx_, x);
            case clip_activation::quick_gelu:
                break;
        }
        return mul(ctx_, x, sigmoid(ctx_, scale(ctx_, x, 1.702f)));  // x σ(1.702 x)
    }
    // Self-attention over every position, no mask: x [n_embd, n_pos] -> [n_embd, n_pos].
    tensor *attention_block(tensor *x, const clip_layer &l, int64_t il) {
        const int64_t n_pos = x->ne[1], d = hp_.n_embd / hp_.n_head;
        auto heads = [&](tensor *w, tensor *b, const char *nm) {  // [d, n_pos, n_head]
            tensor *t = reshape_3d(ctx_, linear(x, w, b), d, hp_.n_head, n_pos);
            return named(cont(ctx_, permute(ctx_, t, 0, 2, 1, 3)), nm, il);
        };
        tensor *q = heads(l.q_w, l.q_b, "Qcur"), *k = heads(l.k_w, l.k_b, "Kcur");
        tensor *v = reshape_3d(ctx_, linear(x, l.v_w, l.v_b), d, hp_.n_head, n_pos);
        v = named(cont(ctx_, permute(ctx_, v, 1, 2, 0, 3)), "Vcur_t", il);  // [n_pos, d, n_head]
        tensor *kq = soft_max(ctx_, mul_mat(ctx_, k, q), nullptr, 1.0f / std::sqrt(float(d)));
        tensor *kqv = mul_mat(ctx_, v, named(kq, "kq_soft_max", il));  // [d, n_pos, n_head]
        tensor *merged = reshape_2d(ctx_, cont(ctx_, permute(ctx_, kqv, 0, 2, 1, 3)), hp_.n_embd, n_pos);
        return named(linear(merged, l.o_w, l.o_b), "attn_out", il);
    }

    context &ctx_;
    const clip_hparams &hp_;
    const clip_weights &w_;
};

}  // namespace

std::vector<float> clip_model::encode(std::span<const float> pixels, int n_threads) const {
    const clip_hparams &hp = hp_;
    const int64_t side = hp.image_size, p = hp.patch_size, n_side = hp.n_patches_side();
    const int64_t n_patches = hp.n_patches(), patch_len = p * p * 3;
    if (pixels.size() != size_t(3 * side * side))
        throw error(path_ + ": encode takes 3 x " + std::to_string(side) + " x " + std::to_string(side) +
                    " preprocessed values, got " + std::to_string(pixels.size()));
    // each patch's pixels in the order of the kernel's elements: x fastest, then y, then the channel
    std::vector<float> patch_data(size_t(patch_len * n_patches));
    for (int64_t py = 0; py < n_side; ++py)
        for (int64_t px = 0; px < n_side; ++px) {
            float *dst = patch_data.data() + size_t((py * n_side + px) * patch_len);
            for (int64_t c = 0; c < 3; ++c)
                for (int64_t ky = 0; ky < p; ++ky)
                    for (int64_t kx = 0; kx < p; ++kx)
                        dst[(c * p + ky) * p + kx] =
                            pixels[size_t((c * side + py * p + ky) * side + px * p + kx)];
        }
    const int64_t n_pos = n_patches + (w_->class_embd ? 1 : 0);
    std::vector<int32_t> pos(static_cast<size_t>(n_pos));
    for (int64_t i = 0; i < n_pos; ++i) pos[size_t(i)] = int32_t(i);

    const size_t n_tensors = 64 + 48 * w_->layers.size();
    context_params cp;
    cp.mem_size = context_overhead(n_tensors);
    cp.no_alloc = true;
    context ctx(cp);
    graph g(std::max(default_graph_size, 2 * n_tensors));
    clip_graph builder(ctx, hp, *w_);
    tensor *patches = ctx.new_tensor(dtype::f32, {patch_len, n_patches});
    patches->set_name("inp_patches");
    patches->flags |= tensor_flag_input;
    tensor *positions = ctx.new_tensor(dtype::i32, {n_pos});
    positions->set_name("inp_positions");
    positions->flags |= tensor_flag_input;
    tensor *out = builder.build(patches, positions);
    out->flags |= tensor_flag_output;
    build_forward_expand(g, out);

    std::unique_ptr<backend> be = select_device("").make_backend(std::max(1, n_threads));
    scheduler sched({be.get()});
    sched.alloc_graph(g);
    auto write = [](tensor *t, const void *src, size_t n) {
        WEFT_ASSERT(t->data && n == t->nbytes());
        if (t->buffer && !t->buffer->is_host())
            t->buffer->set_tensor(*t, src, 0, n);
        else
            std::memcpy(t->data, src, n);
    };
    write(patches, patch_data.data(), patch_data.size() * sizeof(float));
    write(positions, pos.data(), pos.size() * sizeof(int32_t));
    if (builder.pool) {
        const std::vector<float> pool = pool_matrix(n_side), shift = shift_matrix(n_side / 2);
        write(builder.pool, pool.data(), pool.size() * sizeof(float));
        write(builder.shift, shift.data(), shift.size() * sizeof(float));
    }
    if (sched.compute(g) != compute_status::ok) throw error(path_ + ": computing the image encoder failed");
    std::vector<float> result(size_t(n_image_tokens() * hp.n_output_embd));
    WEFT_ASSERT(out->nbytes() == result.size() * sizeof(float));
    if (out->buffer && !out->buffer->is_host())
        out->buffer->get_tensor(*out, result.data(), 0, out->nbytes());
    else
        std::memcpy(result.data(), out->data, out->nbytes());
    return result;
}

}  // namespace weft::vision
