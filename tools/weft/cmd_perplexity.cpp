// tools/weft/cmd_perplexity.cpp — `weft perplexity -m MODEL -f TEXT`: perplexity over consecutive
// chunks of a text, scored as the reference engine's perplexity tool scores them, so that the
// numbers compare.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "weft/cache_types.h"
#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/core/safe_file.h"
#include "weft/device_options.h"
#include "weft/file_arguments.h"
#include "weft/lora_options.h"
#include "weft/model/model.h"
#include "weft/ranks.h"
#include "weft/runtime/context.h"

namespace weft::tool {
namespace {

// log p(tok) under softmax(logits): the maximum subtracted, the exponentials summed in double.
double log_softmax_at(const float *logits, int32_t n_vocab, token tok) {
    const float max_logit = *std::max_element(logits, logits + n_vocab);
    double sum_exp = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
    return double(logits[tok] - max_logit) - std::log(sum_exp);
}

// Every log-probability of a row.
void log_softmax(const float *logits, int32_t n_vocab, std::vector<float> &out) {
    const float max_logit = *std::max_element(logits, logits + n_vocab);
    double sum_exp = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
    const double log_sum = std::log(sum_exp);
    out.resize(size_t(n_vocab));
    for (int32_t i = 0; i < n_vocab; ++i) out[size_t(i)] = float(double(logits[i] - max_logit) - log_sum);
}

// The base model's log-probabilities of every scored position (--kl-divergence-base writes them,
// --kl-divergence reads them): a header (magic, version, n_ctx, n_vocab, chunks, the text's
// tokens), then per position the row's minimum and step as floats and n_vocab 16-bit codes
// (log p = min + code * step: about 1e-3 apart over a row spanning 60 nats).
constexpr char kld_magic[8] = {'W', 'E', 'F', 'T', 'K', 'L', 'D', '1'};

void write_row(output_file &out, const std::vector<float> &logp) {
    const float lo = std::max(*std::min_element(logp.begin(), logp.end()), -60.0f);
    const float hi = *std::max_element(logp.begin(), logp.end());
    const float step = hi > lo ? (hi - lo) / 65535.0f : 1.0f;
    std::vector<uint16_t> codes(logp.size());
    for (size_t i = 0; i < logp.size(); ++i)
        codes[i] = uint16_t(std::lround(std::clamp((logp[i] - lo) / step, 0.0f, 65535.0f)));
    out.write(&lo, sizeof lo);
    out.write(&step, sizeof step);
    out.write(codes.data(), codes.size() * sizeof(uint16_t));
}

// A --kl-divergence file: weft's own (above), or the reference engine's (`llama-perplexity
// --kl-divergence-base`): "_logits_", n_ctx, n_vocab and the number of chunks (int32), the chunks'
// tokens (int32), then per scored position 2 * ((n_vocab + 1) / 2) + 4 uint16: its step and its
// lowest log-probability (two floats), then n_vocab codes (log p = lowest + code * step; it clips
// the row 16 nats under the top token, and code 0 marks the clipped ones, left out of the sums).
class kld_base_reader {
  public:
    kld_base_reader(const std::string &path, uint32_t n_ctx, int32_t n_vocab,
                    const std::vector<token> &tokens)
        : path_(path) {
        require_regular_file(path);
        in_.open(path, std::ios::binary);
        char magic[8] = {};
        in_.read(magic, sizeof magic);
        std::vector<token> base_tokens;
        uint32_t file_ctx = 0, file_vocab = 0;
        if (in_ && std::string(magic, 8) == "_logits_") {
            int32_t head[3] = {};
            in_.read(reinterpret_cast<char *>(head), sizeof head);
            if (!in_ || head[0] <= 0 || head[1] <= 0 || head[2] <= 0 ||
                int64_t(head[0]) * head[2] > (1 << 28))
                throw error(path + ": a reference --kl-divergence-base file with a damaged header");
            reference_ = true;
            file_ctx = uint32_t(head[0]);
            file_vocab = uint32_t(head[1]);
            chunks_ = head[2];
            if (size_t(head[0]) * size_t(head[2]) > tokens.size())
                throw error(path + ": made from another text");
            base_tokens.resize(size_t(head[0]) * size_t(head[2]));
        } else {
            uint32_t head[4] = {};
            uint64_t n_tok = 0;
            in_.read(reinterpret_cast<char *>(head), sizeof head);
            in_.read(reinterpret_cast<char *>(&n_tok), sizeof n_tok);
            if (!in_ || std::string(magic, 8) != std::string(kld_magic, 8) || head[0] != 1)
                throw error(path +
                            ": neither a weft --kl-divergence-base file (version 1) nor the reference "
                            "engine's");
            if (n_tok != tokens.size()) throw error(path + ": made from another text");
            file_ctx = head[1];
            file_vocab = head[2];
            chunks_ = int(head[3]);
            base_tokens.resize(n_tok);
        }
        if (file_ctx != n_ctx || file_vocab != uint32_t(n_vocab))
            throw error(path + ": made with -c " + std::to_string(file_ctx) + " and a vocabulary of " +
                        std::to_string(file_vocab) + "; this run has -c " + std::to_string(n_ctx) + " and " +
                        std::to_string(n_vocab));
        in_.read(reinterpret_cast<char *>(base_tokens.data()),
                 std::streamsize(base_tokens.size() * sizeof(token)));
        if (!in_ || base_tokens.size() > tokens.size() ||
            !std::equal(base_tokens.begin(), base_tokens.end(), tokens.begin()))
            throw error(path + ": made from another text (or tokenized otherwise)");
        codes_.resize(reference_ ? size_t(2 * ((n_vocab + 1) / 2) + 4) : size_t(n_vocab));
    }

    int chunks() const { return chunks_; }

    // The next row's log-probabilities; `floor`: values at or below it were clipped (-INF: none).
    void read_row(std::vector<float> &logp, float &floor) {
        float lo = 0, step = 0;
        if (!reference_) {
            in_.read(reinterpret_cast<char *>(&lo), sizeof lo);
            in_.read(reinterpret_cast<char *>(&step), sizeof step);
        }
        in_.read(reinterpret_cast<char *>(codes_.data()), std::streamsize(codes_.size() * sizeof(uint16_t)));
        if (!in_) throw error(path_ + ": truncated (fewer scored positions than its header promises)");
        const uint16_t *codes = codes_.data();
        floor = -std::numeric_limits<float>::infinity();
        if (reference_) {
            std::memcpy(&step, codes, sizeof step);
            std::memcpy(&lo, codes + 2, sizeof lo);
            codes += 4;
            floor = lo;
        }
        for (size_t i = 0; i < logp.size(); ++i) logp[i] = lo + float(codes[i]) * step;
    }

  private:
    std::string path_;
    std::ifstream in_;
    bool reference_ = false;
    int chunks_ = 0;
    std::vector<uint16_t> codes_;
};

// Statistics of --kl-divergence: per scored position the KL divergence of the model from the
// base, whether their most likely tokens agree, and the change of the actual token's probability.
struct kld_stats {
    std::vector<double> kl;
    size_t same_top = 0;
    double dp_sum = 0, dp2_sum = 0, base_nll = 0;
    void add(const std::vector<float> &base, float floor, const std::vector<float> &mine, token next) {
        double k = 0;
        for (size_t i = 0; i < base.size(); ++i)
            if (base[i] > floor) k += std::exp(double(base[i])) * (double(base[i]) - double(mine[i]));
        kl.push_back(std::max(k, 0.0));
        const auto top = [](const std::vector<float> &v) {
            return std::max_element(v.begin(), v.end()) - v.begin();
        };
        same_top += top(base) == top(mine);
        const double dp = std::exp(double(mine[size_t(next)])) - std::exp(double(base[size_t(next)]));
        dp_sum += dp;
        dp2_sum += dp * dp;
        base_nll -= double(base[size_t(next)]);
    }
};

int perplexity_main(int argc, char **argv) {
    CLI::App app{
        "Perplexity of a model on a text. The text (with BOS) is cut into consecutive chunks of\n"
        "--ctx-size tokens; each chunk is decoded from an empty cache with its first token replaced by\n"
        "BOS, and the tokens of its second half are scored (each predicted from all the tokens before it\n"
        "in the chunk): the reference engine's method, so the numbers compare. Prints the running\n"
        "estimate per chunk to stderr and the final PPL +/- its standard error to stdout.",
        "weft perplexity"};
    std::string model_path, file;
    uint32_t n_ctx = 512, n_batch = 2048;
    int n_chunks = -1, n_threads = 2;
    bool json = false;
    cache_type_options cache_types;
    app.add_option("-m,--model", model_path, "model file (GGUF)")
        ->required()
        ->check(weft::tool::input_file());
    app.add_option("-f,--file", file, "the text")->required()->check(weft::tool::input_file());
    app.add_option("-c,--ctx-size", n_ctx, "tokens per chunk")
        ->capture_default_str()
        ->check(CLI::Range(8u, 1u << 20));
    app.add_option("-b,--batch-size", n_batch,
                   "tokens per decode call (a chunk is split into batches of this size)")
        ->capture_default_str()
        ->check(CLI::Range(1u, 1u << 20));
    app.add_option("--chunks", n_chunks, "score at most this many chunks (-1: all)")->capture_default_str();
    app.add_option("-t,--threads", n_threads, "threads")->capture_default_str()->check(CLI::Range(1, 512));
    app.add_flag("--json", json,
                 "print the result as JSON (ppl, error, chunks, tokens scored, per-chunk estimates)");
    std::string kld_base, kld_file;
    app.add_option("--kl-divergence-base", kld_base,
                   "write every scored position's log-probabilities to this file (from the base model, F32 "
                   "or F16 say), for --kl-divergence; n_vocab x 2 bytes per position");
    app.add_option("--kl-divergence", kld_file,
                   "compare with a --kl-divergence-base file made from the same text and -c (weft's, or "
                   "the reference engine's llama-perplexity --kl-divergence-base): mean KL divergence, how "
                   "often the most likely token agrees, and the change of the actual token's probability")
        ->check(weft::tool::input_file());
    add_cache_type_options(app, cache_types);
    weft::tool::rank_options ranks;
    weft::tool::add_rank_options(app, ranks);
    weft::tool::lora_options loras;
    weft::tool::add_lora_options(app, loras);
    weft::tool::device_options devices;
    weft::tool::add_device_options(app, devices);
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;
    if (!kld_base.empty() && !kld_file.empty())
        throw error("--kl-divergence-base and --kl-divergence: one or the other");

    const std::string text = read_input_file(file);
    auto model = devices.load(model_params{}, [&](const model_params &p) {
        return weft::tool::load_stage_model(model_path, p, ranks);
    });
    if (model->hparams().encoder)
        throw error(model_path + ": an embedding model has no next-token probabilities");
    const weft::vocab &vocab = model->vocab();
    std::vector<token> tokens = vocab.tokenize(text, true, false);
    const size_t n_ctx_s = n_ctx;
    if (tokens.size() < 2 * n_ctx_s)
        throw error(file + ": " + std::to_string(tokens.size()) + " tokens; perplexity with a context of " +
                    std::to_string(n_ctx) + " needs at least " + std::to_string(2 * n_ctx_s));
    int n_chunk = int(tokens.size() / n_ctx_s);
    if (n_chunks >= 0) n_chunk = std::min(n_chunk, n_chunks);

    inference_params ip;
    ip.n_ctx = n_ctx;
    ip.n_batch = std::min(n_batch, n_ctx);
    ip.n_ubatch = std::min<uint32_t>(ip.n_batch, 512);
    ip.n_threads = ip.n_threads_batch = n_threads;
    devices.apply(ip);
    if (model->offload_device()) weft::tool::report_placement(*model, ip, "perplexity");
    cache_types.apply(ip);
    loras.apply(*model, ip, "perplexity");
    if (weft::tool::follow_rank_zero(*model, ip)) return 0;  // a rank > 0 of mpirun: its blocks only
    inference_context ctx(*model, ip);
    const int32_t n_vocab = ctx.n_vocab();
    const bool bos_first = vocab.add_bos() && vocab.bos() != token_null;

    std::fprintf(stderr, "weft perplexity: %zu tokens, %d chunks of %u, scoring the second half of each\n",
                 tokens.size(), n_chunk, n_ctx);
    const size_t first = n_ctx_s / 2;  // the positions scored: first .. n_ctx - 2 predict the next token

    // the base file: written through a temporary file renamed once complete; or read and checked
    std::unique_ptr<output_file> kld_out;
    std::unique_ptr<kld_base_reader> kld_in;
    if (!kld_base.empty()) {
        kld_out = std::make_unique<output_file>(kld_base);
        const uint32_t head[4] = {1, n_ctx, uint32_t(n_vocab), uint32_t(n_chunk)};
        const uint64_t n_tok = tokens.size();
        kld_out->write(kld_magic, sizeof kld_magic);
        kld_out->write(head, sizeof head);
        kld_out->write(&n_tok, sizeof n_tok);
        kld_out->write(tokens.data(), n_tok * sizeof(token));
    }
    if (!kld_file.empty()) {
        kld_in = std::make_unique<kld_base_reader>(kld_file, n_ctx, n_vocab, tokens);
        n_chunk = std::min(n_chunk, kld_in->chunks());
    }
    kld_stats kld;
    std::vector<float> mine_logp, base_logp(static_cast<size_t>(n_vocab));
    double nll = 0, nll2 = 0;
    size_t count = 0;
    std::vector<double> estimates;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n_chunk; ++i) {
        const size_t start = size_t(i) * n_ctx_s;
        ctx.kv_clear();
        for (size_t b0 = 0; b0 < n_ctx_s; b0 += ip.n_batch) {
            const size_t b1 = std::min(n_ctx_s, b0 + ip.n_batch);
            batch b;
            for (size_t k = b0; k < b1; ++k) {
                const token t = k == 0 && bos_first ? vocab.bos() : tokens[start + k];
                b.add(t, llm_pos(k), {0}, k >= first);
            }
            if (const int rc = ctx.decode(b); rc != decode_ok)
                throw error("chunk " + std::to_string(i + 1) + ": decoding failed: " + ctx.last_error());
            for (size_t k = std::max(b0, first); k < b1 && k + 1 < n_ctx_s; ++k) {
                const float *logits = ctx.get_logits_ith(int32_t(k - b0));
                const token next = tokens[start + k + 1];
                const double v = -log_softmax_at(logits, n_vocab, next);
                if (kld_out || kld_in) log_softmax(logits, n_vocab, mine_logp);
                if (kld_out) write_row(*kld_out, mine_logp);
                if (kld_in) {
                    float floor = 0;
                    kld_in->read_row(base_logp, floor);
                    kld.add(base_logp, floor, mine_logp, next);
                }
                nll += v;
                nll2 += v * v;
                ++count;
            }
        }
        estimates.push_back(std::exp(nll / double(count)));
        std::fprintf(stderr, "[%d]%.4f,", i + 1, estimates.back());
        if (i == 0) {
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::fprintf(stderr, " (%.2f s per chunk, about %.0f s in all) ", s, s * n_chunk);
        }
        std::fflush(stderr);
    }
    std::fprintf(stderr, "\n");
    const double mean = nll / double(count);
    const double ppl = std::exp(mean);
    const double var = nll2 / double(count) - mean * mean;
    const double err = var > 0 && count > 1 ? std::sqrt(var / double(count - 1)) * ppl : 0.0;
    if (kld_out) {
        kld_out->commit();
        std::fprintf(stderr, "weft perplexity: wrote the log-probabilities of %zu positions to %s\n", count,
                     kld_base.c_str());
    }
    nlohmann::json j = {{"ppl", ppl},
                        {"error", err},
                        {"chunks", n_chunk},
                        {"n_ctx", n_ctx},
                        {"tokens_scored", count},
                        {"estimates", estimates},
                        {"type_k", type_name(ip.type_k)},
                        {"type_v", type_name(ip.type_v)}};
    std::string kld_text;
    if (kld_in) {
        const size_t n = kld.kl.size();
        double kl_mean = 0, kl_sq = 0;
        for (double k : kld.kl) kl_mean += k, kl_sq += k * k;
        kl_mean /= double(n);
        const double kl_err =
            n > 1 ? std::sqrt(std::max(kl_sq / double(n) - kl_mean * kl_mean, 0.0) / double(n - 1)) : 0;
        std::vector<double> sorted = kld.kl;
        std::sort(sorted.begin(), sorted.end());
        const double median = sorted[n / 2], kl_max = sorted.back();
        const double same_top = 100.0 * double(kld.same_top) / double(n);
        const double dp_mean = kld.dp_sum / double(n), dp_rms = std::sqrt(kld.dp2_sum / double(n));
        const double base_ppl = std::exp(kld.base_nll / double(n));
        j["kl_divergence"] = {{"mean", kl_mean},
                              {"error", kl_err},
                              {"median", median},
                              {"max", kl_max},
                              {"same_top_percent", same_top},
                              {"delta_p_mean", dp_mean},
                              {"delta_p_rms", dp_rms},
                              {"base_ppl", base_ppl}};
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "KL divergence: mean %.6f +/- %.6f, median %.6f, max %.6f\n"
                      "same top token: %.2f%%\n"
                      "delta p of the actual token: mean %+.4f%%, RMS %.4f%%\n"
                      "base PPL %.4f, this PPL %.4f (ratio %.4f)\n",
                      kl_mean, kl_err, median, kl_max, same_top, 100 * dp_mean, 100 * dp_rms, base_ppl, ppl,
                      ppl / base_ppl);
        kld_text = buf;
    }
    if (json)
        std::printf("%s\n", j.dump().c_str());
    else
        std::printf("PPL = %.4f +/- %.5f\n%s", ppl, err, kld_text.c_str());
    return 0;
}

const bool registered_perplexity = register_command(
    {"perplexity", "perplexity over chunks of a text, comparable with the reference engine's",
     &perplexity_main});

}  // namespace
}  // namespace weft::tool
