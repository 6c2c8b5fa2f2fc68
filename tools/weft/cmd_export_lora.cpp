// tools/weft/cmd_export_lora.cpp — `weft export-lora`: LoRA adapters merged into a new model file.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/file_arguments.h"
#include "weft/lora_options.h"
#include "weft/model/lora.h"
#include "weft/model/model.h"

namespace {

int export_lora_main(int argc, char **argv) {
    CLI::App app{
        "Merge LoRA adapters into a model: every adapted weight W becomes W + scale·(alpha/r)·B·A, computed "
        "in float and stored in W's type (quantized weights are quantized again); everything else is "
        "copied. The output is written to a temporary file and renamed, so a failure leaves nothing "
        "half-written.",
        "weft export-lora"};
    std::string model_path, out;
    weft::tool::lora_options loras;
    app.add_option("-m,--model", model_path, "the base model (GGUF)")
        ->required()
        ->check(weft::tool::input_file());
    weft::tool::add_lora_options(app, loras);
    app.add_option("-o,--output", out, "the merged model to write")->required();
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;
    if (loras.empty())
        throw weft::error("name at least one adapter: --lora FILE or --lora-scaled FILE SCALE");
    std::vector<std::string> inputs = loras.files;
    inputs.push_back(model_path);
    for (size_t i = 0; i < loras.scaled.size(); i += 2) inputs.push_back(loras.scaled[i]);
    weft::tool::require_output_not_input(out, inputs);

    weft::model_params mp;
    mp.vocab_only = true;  // the adapters are checked against the file's tensors; the weights are read below
    const auto base = weft::model::load(model_path, mp);
    loras.load(*base, "export-lora");
    const int64_t merged = weft::lora_merge_write(model_path, loras.uses, out);
    std::fprintf(stderr, "weft export-lora: wrote %s: %lld weights merged\n", out.c_str(), (long long)merged);
    return 0;
}

const bool registered_export_lora = weft::tool::register_command(
    {"export-lora", "merge LoRA adapters into a new model file", &export_lora_main});

}  // namespace
