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

}  // namespace weft::tool
