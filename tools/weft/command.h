// tools/weft/command.h — the subcommand registry of the `weft` executable.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace weft::tool {

struct command {
    std::string name;     // "run"
    std::string summary;  // one line for `weft --help`
    // argv[0] is "weft <name>"; returns the exit status. Errors thrown as weft::error are caught
    // by main, printed to stderr ("weft <name>: error: ...") and exit 1.
    std::function<int(int argc, char **argv)> main;
};

// Each cmd_*.cpp registers its command at static-initialization time:
//   static const bool registered = weft::tool::register_command({"inspect", "...", &inspect_main});
bool register_command(command c);
const std::vector<command> &commands();

// The arguments of a command for CLI11, with the established multi-letter short spellings (-ub,
// -tb, -np, -ctk, -ctv, -md, -ngl, -dev, which CLI11 cannot declare) rewritten to their long forms. CLI11's
// vector form takes the arguments reversed, and this returns them so.
inline std::vector<std::string> cli_args(int argc, char **argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    for (auto &a : args) {
        if (a == "-ub")
            a = "--ubatch-size";
        else if (a == "-tb")
            a = "--threads-batch";
        else if (a == "-np")
            a = "--parallel";
        else if (a == "-ctk")
            a = "--cache-type-k";
        else if (a == "-ctv")
            a = "--cache-type-v";
        else if (a == "-md")
            a = "--draft-model";
        else if (a == "-ngl")
            a = "--n-gpu-layers";
        else if (a == "-dev")
            a = "--device";
    }
    return {args.rbegin(), args.rend()};
}

// WEFT_PARSE_ONLY=1 in the environment (any value but empty or "0"): every command stops once its
// arguments are parsed and checked, with exit status 0, before it loads, reads or writes anything;
// input file arguments are not looked at, so a placeholder such as M.gguf passes. The docs_commands
// test runs every `./build/weft` command of README.md and docs/*.md this way.
inline bool parse_only() {
    const char *value = std::getenv("WEFT_PARSE_ONLY");
    return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

// Every command's parse of its arguments (with cli_args' spellings). Returns the exit status when
// the command ends here — `--help` (0), a bad argument (CLI11's message and status), parse-only
// mode (0) — and nullopt when it goes on:
//   if (const auto status = weft::tool::parse_arguments(app, argc, argv)) return *status;
inline std::optional<int> parse_arguments(CLI::App &app, int argc, char **argv) {
    try {
        app.parse(cli_args(argc, argv));
    } catch (const CLI::ParseError &e) {
        return app.exit(e);
    }
    if (parse_only()) return 0;
    return std::nullopt;
}

}  // namespace weft::tool
