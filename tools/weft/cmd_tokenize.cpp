// tools/weft/cmd_tokenize.cpp — `weft tokenize -m FILE.gguf [-p TEXT | -f FILE | stdin]`: text to token ids.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/core/safe_file.h"
#include "weft/file_arguments.h"
#include "weft/gguf/gguf.h"
#include "weft/vocab/vocab.h"

namespace weft::tool {
namespace {

// The piece as a single-quoted C-style literal, so whitespace and invalid bytes stay visible.
std::string quoted(const std::string &piece) {
    std::string s = "'";
    for (const unsigned char c : piece) {
        switch (c) {
            case '\n':
                s += "\\n";
                break;
            case '\t':
                s += "\\t";
                break;
            case '\r':
                s += "\\r";
                break;
            case '\\':
                s += "\\\\";
                break;
            case '\'':
                s += "\\'";
                break;
            default:
                if (c < 0x20 || c == 0x7F) {
                    char hex[8];
                    std::snprintf(hex, sizeof hex, "\\x%02x", c);
                    s += hex;
                } else {
                    s += char(c);  // UTF-8 passes through (a partial character is the terminal's business)
                }
        }
    }
    return s + "'";
}

int tokenize_main(int argc, char **argv) {
    CLI::App app{
        "Tokenize text with the vocabulary of a GGUF file (a vocabulary-only file is enough).\n"
        "Prints one line per token (id and piece), or with --ids only the list of ids.",
        "weft tokenize"};
    std::string model, prompt, file;
    bool no_bos = false, parse_special = false, ids_only = false;
    app.add_option("-m,--model", model, "GGUF file holding the vocabulary")
        ->required()
        ->check(weft::tool::input_file());
    auto *prompt_opt = app.add_option("-p,--prompt", prompt, "text to tokenize (default: read stdin)");
    app.add_option("-f,--file", file, "read the text from this file")
        ->check(weft::tool::input_file())
        ->excludes(prompt_opt);
    app.add_flag("--no-bos", no_bos, "add no BOS/EOS (special tokens the vocabulary would add)");
    app.add_flag("--parse-special", parse_special,
                 "match control tokens written in the text (e.g. <|im_end|>)");
    app.add_flag("--ids", ids_only, "print only the ids, as a list: [1, 15043, 3186]");
    if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;

    std::string text;
    if (!file.empty()) {
        text = read_input_file(file);
    } else if (app.count("--prompt")) {
        text = prompt;
    } else {
        text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    }

    const auto gguf = gguf_file::open(model, {.use_mmap = true, .load_data = false});
    const auto v = vocab::load(*gguf);
    const std::vector<token> ids = v->tokenize(text, !no_bos, parse_special);

    if (ids_only) {
        std::string line = "[";
        for (size_t i = 0; i < ids.size(); ++i) line += (i ? ", " : "") + std::to_string(ids[i]);
        std::printf("%s]\n", line.c_str());
    } else {
        for (const token t : ids) std::printf("%6d %s\n", t, quoted(v->token_to_piece(t, true)).c_str());
    }
    std::fprintf(stderr, "%zu tokens from %zu bytes\n", ids.size(), text.size());
    return 0;
}

const bool registered_tokenize =
    register_command({"tokenize", "text to token ids with a model's vocabulary", &tokenize_main});

}  // namespace
}  // namespace weft::tool
