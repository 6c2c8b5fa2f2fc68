// tools/weft/cmd_imatrix.cpp — `weft imatrix -m MODEL -f TEXT -o FILE`: the importance matrix of a
// model on a text (per weight matrix, the mean of the squared activations of each input column),
// for `weft quantize --imatrix`.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/core/safe_file.h"
#include "weft/core/tensor.h"
#include "weft/file_arguments.h"
#include "weft/model/model.h"
#include "weft/quant/imatrix.h"
#include "weft/runtime/context.h"

namespace weft::tool {
namespace {

// Sums of x^2 per input column of every weight matrix the graph multiplies, observed through the
// eval callback (each matrix product's activations, before it runs).
class collector {
  public:
    explicit collector(bool with_output) : with_output_(with_output) {}

    bool observe(tensor *node, bool ask) {
        const bool product = node->op == op_kind::mul_mat || node->op == op_kind::mul_mat_id;
        const tensor *w = product ? node->src[0] : nullptr;
        if (!w || !(w->flags & tensor_flag_param) || std::strstr(w->name, "weight") == nullptr) return !ask;
        if (!with_output_ && std::strcmp(w->name, "output.weight") == 0) return !ask;
        if (ask) return true;
        const tensor &x = *node->src[1];
        if (x.type != dtype::f32) return true;
        const int64_t k = x.ne[0];
        stat &s = stats_[w->name];
        if (node->op == op_kind::mul_mat) {
            s.resize(k, 1);
            for (int64_t i3 = 0; i3 < x.ne[3]; ++i3)
                for (int64_t i2 = 0; i2 < x.ne[2]; ++i2)
                    for (int64_t i1 = 0; i1 < x.ne[1]; ++i1) s.add(0, row(x, i1, i2, i3));
            return true;
        }
        // experts: each token's row goes to the experts it was routed to
        const tensor &ids = *node->src[2];
        const int64_t n_expert = w->ne[2];
        s.resize(k, n_expert);
        for (int64_t t = 0; t < ids.ne[1]; ++t)
            for (int64_t i = 0; i < ids.ne[0]; ++i) {
                int32_t e = 0;
                std::memcpy(&e, static_cast<const char *>(ids.data) + t * ids.nb[1] + i * ids.nb[0],
                            sizeof e);
                if (e >= 0 && e < n_expert) s.add(e, row(x, i % x.ne[1], t, 0));
            }
        return true;
    }

    // Marks the end of a chunk: every matrix seen in it counts one more call.
    void end_chunk() {
        for (auto &[name, s] : stats_)
            if (s.seen_in_chunk) {
                ++s.ncall;
                s.seen_in_chunk = false;
            }
    }

    importance_matrix result(int chunks, const std::string &dataset) const {
        importance_matrix m;
        m.chunks = chunks;
        m.dataset = dataset;
        for (const auto &[name, s] : stats_) {
            imatrix_entry e;
            e.ncall = s.ncall;
            const size_t per = s.sums.size() / s.counts.size();
            e.values.resize(s.sums.size());
            for (size_t i = 0; i < s.sums.size(); ++i) {
                const double n = double(s.counts[i / per]);
                // mean of x^2 times ncall, as the file stores it; 1 for an expert never routed to
                e.values[i] = n > 0 ? float(s.sums[i] / n * double(s.ncall)) : 1.0f;
            }
            m.entries.emplace(name, std::move(e));
        }
        return m;
    }

  private:
    struct stat {
        std::vector<double> sums;     // per matrix of the stack, per column
        std::vector<int64_t> counts;  // rows seen, per matrix of the stack
        int32_t ncall = 0;
        bool seen_in_chunk = false;
        int64_t k = 0;
        void resize(int64_t cols, int64_t n_mat) {
            if (sums.empty()) {
                k = cols;
                sums.assign(size_t(cols * n_mat), 0.0);
                counts.assign(size_t(n_mat), 0);
            }
            if (k != cols || int64_t(counts.size()) != n_mat)
                throw error("a weight's input width changed between products");
            seen_in_chunk = true;
        }
        void add(int64_t mat, const float *x) {
            double *sum = sums.data() + mat * k;
            for (int64_t j = 0; j < k; ++j) sum[j] += double(x[j]) * double(x[j]);
            ++counts[size_t(mat)];
        }
    };
    static const float *row(const tensor &x, int64_t i1, int64_t i2, int64_t i3) {
        return reinterpret_cast<const float *>(static_cast<const char *>(x.data) + i1 * x.nb[1] +
                                               i2 * x.nb[2] + i3 * x.nb[3]);
    }

    bool with_output_;
    std::map<std::string, stat> stats_;
};

int imatrix_main(int argc, char **argv) {
    CLI::App app{
        "The importance matrix of a model on a text: for every weight matrix, the mean of the squared\n"
        "activations each input column saw, over chunks of --ctx-size tokens (each decoded from an empty\n"
        "cache, first token BOS). Written as the reference engine's legacy imatrix file, which\n"
        "`weft quantize --imatrix` (and the reference quantizer) read.",
        "weft imatrix"};
    std::string model_path, file, out_path = "imatrix.dat";
    uint32_t n_ctx = 512;
    int n_chunks = -1, n_threads = 2;
    bool with_output = false;
    app.add_option("-m,--model", model_path, "model file (GGUF)")
        ->required()
        ->check(weft::tool::input_file());
    app.add_option("-f,--file", file, "the text")->required()->check(weft::tool::input_file());
    app.add_option("-o,--output", out_path, "the importance matrix file")->capture_default_str();
    app.add_option("-c,--ctx-size", n_ctx, "tokens per chunk")
        ->capture_default_str()
        ->check(CLI::Range(8u, 1u << 20));
    app.add_option("--chunks", n_chunks, "at most this many chunks (-1: all)")->capture_default_str();
    app.add_option("-t,--threads", n_threads, "threads")->capture_default_str()->check(CLI::Range(1, 512));
    app.add_flag("--process-output", with_output, "also collect output.weight's activations");
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;
    weft::tool::require_output_not_input(out_path, {model_path, file});

    const std::string text = read_input_file(file);
    auto model = weft::model::load(model_path);
    const weft::vocab &vocab = model->vocab();
    const std::vector<token> tokens = vocab.tokenize(text, true, false);
    if (tokens.size() < n_ctx)
        throw error(file + ": " + std::to_string(tokens.size()) + " tokens, fewer than one chunk of " +
                    std::to_string(n_ctx));
    int n_chunk = int(tokens.size() / n_ctx);
    if (n_chunks >= 0) n_chunk = std::min(n_chunk, n_chunks);

    collector c(with_output);
    inference_params ip;
    ip.n_ctx = n_ctx;
    ip.n_batch = n_ctx;
    ip.n_ubatch = std::min<uint32_t>(n_ctx, 512);
    ip.n_threads = ip.n_threads_batch = n_threads;
    ip.cb_eval = [&c](tensor *node, bool ask) { return c.observe(node, ask); };
    inference_context ctx(*model, ip);
    const bool bos_first = vocab.add_bos() && vocab.bos() != token_null;
    std::fprintf(stderr, "weft imatrix: %zu tokens, %d chunks of %u\n", tokens.size(), n_chunk, n_ctx);
    for (int i = 0; i < n_chunk; ++i) {
        ctx.kv_clear();
        batch b;
        for (uint32_t k = 0; k < n_ctx; ++k)
            b.add(k == 0 && bos_first ? vocab.bos() : tokens[size_t(i) * n_ctx + k], llm_pos(k), {0}, true);
        if (const int rc = ctx.decode(b); rc != decode_ok)
            throw error("chunk " + std::to_string(i + 1) + ": decoding failed: " + ctx.last_error());
        c.end_chunk();
        std::fprintf(stderr, "[%d/%d] ", i + 1, n_chunk);
        std::fflush(stderr);
    }
    std::fprintf(stderr, "\n");
    const importance_matrix m = c.result(n_chunk, file);
    write_imatrix(out_path, m);
    std::fprintf(stderr, "weft imatrix: %zu matrices, %d chunks -> %s\n", m.entries.size(), n_chunk,
                 out_path.c_str());
    std::printf("%s\n", out_path.c_str());
    return 0;
}

const bool registered_imatrix = register_command(
    {"imatrix", "importance matrix of a model on a text, for quantize --imatrix", &imatrix_main});

}  // namespace
}  // namespace weft::tool
