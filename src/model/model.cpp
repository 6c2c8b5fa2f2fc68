// src/model/model.cpp — model::load: architecture, hparams, vocabulary, zero-copy weights; build_graph.
#include "weft/model/model.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <unordered_set>

#include "model/architecture.h"
#include "model/graph_helpers.h"
#include "model/tensor_loader.h"
#include "weft/backends/cpu.h"
#include "weft/core/context.h"
#include "weft/core/device.h"
#include "weft/core/graph.h"
#include "weft/gguf/gguf.h"

namespace weft {

model::model() = default;
model::~model() = default;

namespace {

const architecture_entry *find_architecture(const std::string &name) {
    for (const auto &e : architecture_registry())
        if (name == e.name) return &e;
    return nullptr;
}

// The block a weight belongs to ("blk.<il>."), -1 for the others.
int64_t block_of(const tensor &t) {
    const std::string_view name = t.name;
    return name.starts_with("blk.") ? std::strtoll(t.name + 4, nullptr, 10) : -1;
}

std::string join(const std::vector<std::string> &v) {
    std::string s;
    for (const auto &x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

// Reads one byte of every page of a host tensor, so that its pages are mapped before a step reads
// it (a tensor copied to a device is skipped).
void page_in(const tensor &t) {
    if (t.buffer && !t.buffer->is_host()) return;
    const uint8_t *p = static_cast<const uint8_t *>(t.data);
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < t.nbytes(); i += 4096) sink = sink + p[i];
    if (t.nbytes() > 0) sink = sink + p[t.nbytes() - 1];
}

}  // namespace

std::unique_ptr<model> model::load(const std::string &path, const model_params &params) {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<model> m(new model());
    m->path_ = path;
    m->vocab_only_ = params.vocab_only;

    gguf_open_options opt;
    opt.use_mmap = params.use_mmap;
    opt.load_data = !params.vocab_only;
    if (params.memory.empty())
        m->files_ = gguf_set::open(path, opt);
    else
        m->files_ =
            gguf_set::of_file(gguf_file::from_memory(params.memory.data(), params.memory.size(), path));
    const gguf_set &files = *m->files_;
    const gguf_file &f = files.metadata();

    const auto arch_name = f.get_string("general.architecture");
    if (!arch_name) throw error(path + ": general.architecture is missing");
    const architecture_entry *entry = find_architecture(*arch_name);
    if (!entry)
        throw error(path + ": unknown architecture " + weft::quoted(*arch_name) +
                    " (supported: " + join(supported_architectures()) + ")");
    m->arch_ = entry->make();

    m->vocab_ = vocab::load(f);
    if (params.vocab_only) {
        m->hparams_.arch = *arch_name;
        m->hparams_.n_vocab = m->vocab_->n_tokens();
        if (params.progress && !params.progress(1.0f)) throw load_cancelled(path + ": loading cancelled");
        m->load_ms_ =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return m;
    }

    if (files.tensors().empty())
        throw error(path +
                    ": the file holds no tensors (a vocabulary-only file?); there are no weights to run");
    model_hparams hp = read_hparams(f, *arch_name);
    const int64_t n_vocab = m->vocab_->n_tokens();
    if (hp.n_vocab != 0 && hp.n_vocab != n_vocab)
        throw error(path + ": " + *arch_name + ".vocab_size is " + std::to_string(hp.n_vocab) +
                    " but the vocabulary has " + std::to_string(n_vocab) + " tokens");
    hp.n_vocab = n_vocab;
    m->arch_->adjust_hparams(f, hp);
    // zero KV heads mark a hybrid model's recurrent layers (lfm2); anywhere else they are an error
    for (int64_t il = 0; il < hp.n_layer && !hp.n_head_kv_arr.empty(); ++il)
        if (hp.n_head_kv(il) == 0 && hp.n_head(il) != 0 && !hp.is_recurrent(il))
            throw error(path + ": " + *arch_name + ".attention.head_count_kv: layer " + std::to_string(il) +
                        " has 0 KV heads");
    m->hparams_ = hp;

    // Zero copy: one host buffer over the whole data section of each file; every weight points into
    // its file's.
    mapped_tensors mapped = map_tensors(files);
    m->weights_buffers_ = std::move(mapped.buffers);
    m->weights_ctx_ = std::move(mapped.ctx);

    // Progress: the architecture creates tensors one by one; report per created tensor.
    tensor_loader tl(files, *m->weights_ctx_, m->weights_buffers_);
    m->arch_->create_tensors(tl, m->hparams_, m->weights_);
    tl.check_all_used(*arch_name);
    const int64_t n_layer = m->hparams_.n_layer;
    const int64_t end = params.layers.end < 0 ? n_layer : params.layers.end;
    if (params.layers.begin < 0 || params.layers.begin >= end || end > n_layer)
        throw error(path + ": layers [" + std::to_string(params.layers.begin) + ", " + std::to_string(end) +
                    ") are not a range of the model's " + std::to_string(n_layer) + " blocks");
    m->layers_ = {params.layers.begin, end};
    if (params.max_weight_bytes > 0) {
        size_t need = 0;
        for (const tensor *t : m->stage_tensors()) need += t->nbytes();
        if (need > params.max_weight_bytes) {
            char sizes[96];
            std::snprintf(sizes, sizeof sizes, "%.1f MiB of weights, more than the limit of %.1f MiB",
                          double(need) / 1048576.0, double(params.max_weight_bytes) / 1048576.0);
            throw error(path + ": blocks [" + std::to_string(m->layers_.begin) + ", " + std::to_string(end) +
                        ") of " + std::to_string(n_layer) + " need " + sizes +
                        " (--max-memory); split the model across ranks: mpirun -np R weft ...");
        }
    }
    if (params.offload_device && params.n_gpu_layers > 0) m->offload(params, files);
    if (params.repack) {
        // only the matrices that nothing but mul_mat (and mul_mat_id: the experts) reads (the token
        // embedding is also read by get_rows, so a tied output matrix stays in the mapping)
        std::vector<tensor *> matrices;
        for (int64_t il = m->layers_.begin; il < m->layers_.end; ++il) {
            const layer_weights &l = m->weights_.layers[size_t(il)];
            tensor *const layer_matrices[] = {l.wq,
                                              l.wk,
                                              l.wv,
                                              l.wo,
                                              l.wqkv,
                                              l.wq_a,
                                              l.wq_b,
                                              l.wkv_a_mqa,
                                              l.wkv_b,
                                              l.ffn_gate,
                                              l.ffn_up,
                                              l.ffn_down,
                                              l.ffn_gate_inp,
                                              l.ffn_gate_exps,
                                              l.ffn_up_exps,
                                              l.ffn_gate_up_exps,
                                              l.ffn_down_exps,
                                              l.ffn_gate_shexp,
                                              l.ffn_up_shexp,
                                              l.ffn_down_shexp,
                                              l.ssm_in,
                                              l.ssm_x,
                                              l.ssm_out,
                                              l.wqkv_gate,
                                              l.ssm_beta_alpha,
                                              l.ssm_beta,
                                              l.ssm_alpha,
                                              l.shortconv_in_proj,
                                              l.shortconv_out_proj,
                                              l.per_layer_inp_gate,
                                              l.per_layer_proj};
            for (tensor *t : layer_matrices)
                if (t && t->buffer && t->buffer->is_host()) matrices.push_back(t);
        }
        const tensor *output = m->weights_.output;
        if (m->last_stage() && output && output != m->weights_.tok_embd && output->buffer->is_host())
            matrices.push_back(m->weights_.output);
        // the copies in the mapping are not read again: their pages go back as soon as each is done
        m->repacked_buffer_ =
            cpu_repack_weights(matrices, [&files](const void *p, size_t n) { files.release_pages(p, n); });
    }
    if (params.progress) {
        // Touching the mapped pages is the expensive part of a load; walk them tensor by tensor
        // so the callback sees real progress and can stop it.
        const std::vector<const tensor *> ts = m->stage_tensors();
        size_t done = 0, total = 0;
        for (const tensor *t : ts) total += t->nbytes();
        for (const tensor *t : ts) {
            page_in(*t);
            done += t->nbytes();
            if (!params.progress(total ? float(double(done) / double(total)) : 1.0f))
                throw load_cancelled(path + ": loading cancelled by the progress callback");
        }
    } else if (m->first_stage()) {
        // The lookup tables are read a few rows per token, scattered: left to fault in on first use,
        // a prompt of 512 new tokens takes ~512 page faults in get_rows (100 ms of a 1.6 s BF16 pp512
        // on a 2-core VM, whose faults cost ~75 us each). Read them in once here instead, as the
        // reference does with MAP_POPULATE; the matrices are read whole by the first step anyway.
        for (const tensor *t : {m->weights_.tok_embd, m->weights_.type_embd, m->weights_.pos_embd,
                                m->weights_.per_layer_tok_embd})
            if (t) page_in(*t);
    }
    m->load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return m;
}

void model::offload(const model_params &params, const gguf_set &f) {
    device &dev = *params.offload_device;
    const int64_t n_blocks = layers_.end - layers_.begin;
    offloaded_blocks_ = std::min<int64_t>(params.n_gpu_layers, n_blocks);
    output_offloaded_ = last_stage() && params.n_gpu_layers > n_blocks;
    offload_ = &dev;
    // the groups, one buffer each: the offloaded blocks in order, then the output head
    std::vector<std::vector<tensor *>> groups(size_t(offloaded_blocks_) + 1);
    const int64_t first = layers_.end - offloaded_blocks_;
    for (tensor *t : weights_ctx_->tensors()) {
        if (t->data == nullptr) continue;
        const int64_t il = block_of(*t);
        if (il >= first && il < layers_.end)
            groups[size_t(il - first)].push_back(t);
        else if (output_offloaded_ && il < 0 && std::string_view(t->name).starts_with("output") &&
                 t != weights_.tok_embd)
            groups.back().push_back(t);
    }
    size_t moved = 0;
    for (auto &group : groups) {
        if (group.empty()) continue;
        std::vector<const void *> from;
        for (const tensor *t : group) from.push_back(t->data);
        std::unique_ptr<backend_buffer> buffer;
        try {
            buffer = alloc_placed(dev.default_buffer_type(), group);
        } catch (const error &e) {
            throw error(path_ + ": offloading " + std::to_string(offloaded_blocks_) + " blocks" +
                        (output_offloaded_ ? " and the output head" : "") + " to " + dev.name() +
                        " failed after " + std::to_string(moved >> 20) + " MiB: " + e.what() +
                        " (offload fewer layers with -ngl)");
        }
        for (size_t i = 0; i < group.size(); ++i) {
            buffer->set_tensor(*group[i], from[i], 0, group[i]->nbytes());
            f.release_pages(from[i], group[i]->nbytes());
            moved += group[i]->nbytes();
        }
        offload_buffers_.push_back(std::move(buffer));
    }
}

std::vector<const tensor *> model::stage_tensors() const {
    std::vector<const tensor *> out;
    if (!weights_ctx_) return out;
    const bool tied = weights_.output == weights_.tok_embd;
    for (const tensor *t : weights_ctx_->tensors()) {
        const std::string_view name = t->name;
        bool used = true;  // small globals (rope frequencies, token types ...) every stage may read
        if (const int64_t il = block_of(*t); il >= 0) {
            used = il >= layers_.begin && il < layers_.end;
        } else if (name.starts_with("output")) {
            used = last_stage();
        } else if (t == weights_.tok_embd) {
            used = first_stage() || (tied && last_stage());
        }
        if (used) out.push_back(t);
    }
    return out;
}

std::optional<std::string> model::chat_template() const {
    return files_->metadata().get_string("tokenizer.chat_template");
}

std::string model::name() const {
    if (auto n = files_->metadata().get_string("general.name")) return *n;
    return std::filesystem::path(path_).filename().string();
}

int64_t model::n_params() const {
    int64_t n = 0;
    if (weights_ctx_)
        for (const tensor *t : weights_ctx_->tensors()) n += t->nelements();
    return n;
}

size_t model::n_weight_bytes() const {
    size_t n = 0;
    if (weights_ctx_)
        for (const tensor *t : weights_ctx_->tensors()) n += t->nbytes();
    return n;
}

std::string model::describe() const {
    const model_hparams &hp = hparams_;
    char buf[512];
    if (vocab_only_) {
        std::snprintf(buf, sizeof buf, "%s (vocabulary only), vocab %lld", hp.arch.c_str(),
                      (long long)hp.n_vocab);
        return buf;
    }
    // the most common weight type of the blocks, e.g. "Q4_0"
    std::string type = "?";
    if (!weights_.layers.empty()) {
        const layer_weights &l = weights_.layers[0];
        if (const tensor *down = l.ffn_down ? l.ffn_down : l.ffn_down_exps) type = type_name(down->type);
        if (l.ssm_out) type = type_name(l.ssm_out->type);
    }
    if (hp.recurrent()) {
        std::snprintf(
            buf, sizeof buf,
            "%s, %lld layers, n_embd %lld, d_inner %lld, d_state %lld, d_conv %lld, dt_rank %lld, vocab "
            "%lld, %.2f M params, %s, %.1f MiB",
            hp.arch.c_str(), (long long)hp.n_layer, (long long)hp.n_embd, (long long)hp.ssm_d_inner,
            (long long)hp.ssm_d_state, (long long)hp.ssm_d_conv, (long long)hp.ssm_dt_rank,
            (long long)hp.n_vocab, double(n_params()) / 1e6, type.c_str(),
            double(n_weight_bytes()) / (1024.0 * 1024.0));
        return buf;
    }
    // "n_ff 14336" or, with experts, "8 experts (2 used) of n_ff 14336"
    char ffn[96];
    if (hp.n_expert > 0)
        std::snprintf(ffn, sizeof ffn, "%lld experts (%lld used) of n_ff %lld", (long long)hp.n_expert,
                      (long long)hp.n_expert_used, (long long)hp.n_ff_exp);
    else
        std::snprintf(ffn, sizeof ffn, "n_ff %lld", (long long)hp.n_ff(0));
    std::snprintf(buf, sizeof buf,
                  "%s, %lld layers, n_embd %lld, %lld heads (%lld KV), head size %lld, %s, vocab %lld, "
                  "%.2f M params, %s, %.1f MiB",
                  hp.arch.c_str(), (long long)hp.n_layer, (long long)hp.n_embd, (long long)hp.n_head(0),
                  (long long)hp.n_head_kv(0), (long long)hp.n_embd_head_k, ffn, (long long)hp.n_vocab,
                  double(n_params()) / 1e6, type.c_str(), double(n_weight_bytes()) / (1024.0 * 1024.0));
    return buf;
}

graph_inputs model::build_graph(context &ctx, graph &g, const graph_build_params &p) const {
    if (vocab_only_) throw error(path_ + ": the model was loaded vocabulary-only and has no weights");
    graph_builder b(hparams_, weights_, ctx, g, p, layers_);
    return arch_->build_graph(b);
}

bool model::can_shift_kv() const {
    return !vocab_only_ && arch_->k_rope_layout(hparams_).has_value();
}

k_shift_inputs model::build_k_shift(context &ctx, graph &g, std::span<const kv_layer> kv,
                                    int64_t n_cells) const {
    if (vocab_only_) throw error(path_ + ": the model was loaded vocabulary-only and has no weights");
    const std::optional<cached_k_rope> layout = arch_->k_rope_layout(hparams_);
    if (!layout)
        throw error(path_ + ": " + hparams_.arch +
                    " keys cannot move to other positions (its positions are not rotary)");
    return build_k_shift_graph(hparams_, weights_, ctx, g, kv, n_cells, *layout);
}

size_t model::graph_tensor_budget() const {
    // a mixture-of-experts FFN adds its router, picking, three expert products, the weighting and one
    // view and add per used expert; latent attention (deepseek2) its bottlenecks, splits and concats
    const int64_t per_layer = 64 + (hparams_.n_expert > 0 ? 48 + 2 * hparams_.n_expert_used : 0) +
                              (hparams_.n_lora_kv > 0 ? 32 : 0);
    return size_t(hparams_.n_layer * per_layer) + 256;
}

}  // namespace weft
