// tools/weft/cmd_logits.cpp — `weft logits`: prompt logits and greedy tokens (fixture JSON).
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/device_options.h"
#include "weft/file_arguments.h"
#include "weft/lora_options.h"
#include "weft/model/model.h"
#include "weft/ranks.h"
#include "weft/runtime/context.h"

namespace {

int32_t argmax_row(const float *row, int32_t n) {
    return int32_t(std::max_element(row, row + n) - row);
}

std::string hex_of(const std::string &bytes) {
    static const char digits[] = "0123456789abcdef";
    std::string s;
    for (unsigned char c : bytes) {
        s += digits[c >> 4];
        s += digits[c & 15];
    }
    return s;
}

// JSON string literal; invalid UTF-8 (a lone byte token) becomes U+FFFD rather than an exception.
std::string json_quoted(const std::string &s) {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void print_ids(const std::vector<weft::token> &ids) {
    std::printf("[");
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? ",%d" : "%d", ids[i]);
    std::printf("]");
}

int logits_main(int argc, char **argv) {
    CLI::App app{
        "Evaluate PROMPT (tokenized with BOS, special tokens parsed) and print the logits at every "
        "prompt position and the greedy continuation of N tokens. --json prints the shape of the "
        "reference fixtures: prompt, prompt_tokens, n_vocab, prompt_logits, greedy, greedy_text_hex.",
        "weft logits"};
    std::string model_path, prompt;
    int n_greedy = 16, n_threads = 2;
    uint32_t n_ctx = 0;
    bool json = false;
    app.add_option("-m,--model", model_path, "model file (GGUF)")
        ->required()
        ->check(weft::tool::input_file());
    app.add_option("-p,--prompt", prompt, "prompt text (empty: BOS alone)");
    app.add_option("-n,--n-predict", n_greedy, "greedy tokens after the prompt")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 16));
    app.add_option("-t,--threads", n_threads, "threads")->capture_default_str()->check(CLI::Range(1, 512));
    app.add_option("-c,--ctx-size", n_ctx, "context size (0: prompt + N, rounded up)")
        ->check(CLI::Range(0u, 1u << 24));
    app.add_flag("--json", json, "print the reference-fixture JSON instead of a summary");
    weft::tool::rank_options ranks;
    weft::tool::add_rank_options(app, ranks);
    weft::tool::lora_options loras;
    weft::tool::add_lora_options(app, loras);
    weft::tool::device_options devices;
    weft::tool::add_device_options(app, devices);
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;

    auto model = devices.load(weft::model_params{}, [&](const weft::model_params &p) {
        return weft::tool::load_stage_model(model_path, p, ranks);
    });
    const weft::vocab &vocab = model->vocab();
    std::vector<weft::token> prompt_tokens = vocab.tokenize(prompt, true, true);
    if (prompt_tokens.empty()) {
        if (vocab.bos() == weft::token_null)
            throw weft::error("the prompt is empty and the vocabulary has no BOS token");
        prompt_tokens.push_back(vocab.bos());
    }

    weft::inference_params ip;
    const uint32_t needed = uint32_t(prompt_tokens.size()) + uint32_t(n_greedy) + 1;
    ip.n_ctx = n_ctx ? n_ctx : std::max<uint32_t>(256, (needed + 255) / 256 * 256);
    if (ip.n_ctx < needed)
        throw weft::error("the prompt (" + std::to_string(prompt_tokens.size()) + " tokens) and " +
                          std::to_string(n_greedy) + " greedy tokens do not fit a context of " +
                          std::to_string(ip.n_ctx));
    ip.n_batch = std::max<uint32_t>(ip.n_ctx, 1);
    ip.n_threads = ip.n_threads_batch = n_threads;
    devices.apply(ip);
    if (model->offload_device()) weft::tool::report_placement(*model, ip, "logits");
    loras.apply(*model, ip, "logits");
    if (weft::tool::follow_rank_zero(*model, ip)) return 0;  // a rank > 0 of mpirun: its blocks only
    weft::inference_context ctx(*model, ip);
    const int32_t n_vocab = ctx.n_vocab();

    weft::batch prompt_batch;
    for (size_t i = 0; i < prompt_tokens.size(); ++i)
        prompt_batch.add(prompt_tokens[i], weft::llm_pos(i), {0}, true);
    if (int rc = ctx.decode(prompt_batch); rc != weft::decode_ok)
        throw weft::error("decoding the prompt failed (" + std::to_string(rc) + "): " + ctx.last_error());
    std::vector<std::vector<float>> prompt_logits;
    for (size_t i = 0; i < prompt_tokens.size(); ++i) {
        const float *row = ctx.get_logits_ith(int32_t(i));
        prompt_logits.emplace_back(row, row + n_vocab);
    }

    std::vector<weft::token> greedy;
    std::string greedy_text;
    const float *last = prompt_logits.back().data();
    for (int i = 0; i < n_greedy; ++i) {
        const weft::token t = argmax_row(last, n_vocab);
        if (vocab.is_eog(t)) break;
        greedy.push_back(t);
        greedy_text += vocab.token_to_piece(t, false);
        if (i + 1 == n_greedy) break;
        if (int rc = ctx.decode(weft::batch::from_tokens({t})); rc != weft::decode_ok)
            throw weft::error("decoding failed (" + std::to_string(rc) + "): " + ctx.last_error());
        last = ctx.get_logits_ith(-1);
    }

    if (json) {
        std::printf("{\"prompt\": %s,\n\"prompt_tokens\": ", json_quoted(prompt).c_str());
        print_ids(prompt_tokens);
        std::printf(",\n\"n_vocab\": %d,\n\"prompt_logits\": [\n", n_vocab);
        for (size_t r = 0; r < prompt_logits.size(); ++r) {
            std::printf(" [");
            for (int32_t i = 0; i < n_vocab; ++i)
                std::printf(i ? ",%g" : "%g", double(prompt_logits[r][size_t(i)]));
            std::printf(r + 1 < prompt_logits.size() ? "],\n" : "]\n");
        }
        std::printf("],\n\"greedy\": ");
        print_ids(greedy);
        std::printf(",\n\"greedy_text_hex\": \"%s\"}\n", hex_of(greedy_text).c_str());
        return 0;
    }
    std::printf("prompt: %zu tokens, n_vocab %d\n", prompt_tokens.size(), n_vocab);
    for (size_t r = 0; r < prompt_tokens.size(); ++r) {
        const float *row = prompt_logits[r].data();
        const int32_t best = argmax_row(row, n_vocab);
        std::printf("  pos %3zu token %6d %-16s -> argmax %6d (%.4f) %s\n", r, prompt_tokens[r],
                    json_quoted(vocab.token_to_piece(prompt_tokens[r], true)).c_str(), best,
                    double(row[best]), json_quoted(vocab.token_to_piece(best, true)).c_str());
    }
    std::printf("greedy: ");
    print_ids(greedy);
    std::printf("\ntext: %s\n", json_quoted(greedy_text).c_str());
    return 0;
}

const bool registered_logits = weft::tool::register_command(
    {"logits", "prompt logits and greedy continuation (reference-fixture JSON with --json)", &logits_main});

}  // namespace
