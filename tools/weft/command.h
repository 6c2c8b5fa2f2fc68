// tools/weft/command.h — the subcommand registry of the `weft` executable.
#pragma once

#include <functional>
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

}  // namespace weft::tool
