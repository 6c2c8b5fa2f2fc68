// tools/weft/main.cpp — `weft <command> ...`: dispatches to the registered subcommands.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iterator>
#include <string>
#include <vector>

#include "weft/command.h"
#include "weft/core/error.h"
#include "weft/ranks.h"

namespace weft::tool {

namespace {
std::vector<command> &registry() {
    static std::vector<command> r;
    return r;
}
}  // namespace

bool register_command(command c) {
    registry().push_back(std::move(c));
    return true;
}

const std::vector<command> &commands() {
    return registry();
}

}  // namespace weft::tool

namespace {

void print_usage(FILE *out) {
    auto cmds = weft::tool::commands();
    std::sort(cmds.begin(), cmds.end(), [](const auto &a, const auto &b) { return a.name < b.name; });
    std::fprintf(
        out,
        "weft — run large language models from GGUF files\n\nusage: weft <command> [options]\n\ncommands:\n");
    for (const auto &c : cmds) std::fprintf(out, "  %-12s %s\n", c.name.c_str(), c.summary.c_str());
    std::fprintf(out, "\n`weft <command> --help` describes each command.\n");
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
        !std::strcmp(argv[1], "help")) {
        print_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 1 : 0;
    }
    if (!std::strcmp(argv[1], "--version")) {
        std::printf("weft 0.1.0\n");
        return 0;
    }
    const std::string name = argv[1];
    // under mpirun, only the commands that split a model between the ranks run (the others would
    // run whole once per rank, each printing its own output)
    static const char *const pipelined[] = {"run", "serve", "bench", "perplexity", "logits"};
    if (weft::tool::launched_as_several_ranks() &&
        std::none_of(std::begin(pipelined), std::end(pipelined), [&](const char *p) { return name == p; })) {
        std::fprintf(stderr,
                     "weft %s: error: started by mpirun as one of several ranks, but only run, serve, bench, "
                     "perplexity and logits split a model between ranks\n",
                     name.c_str());
        return 1;
    }
    for (const auto &c : weft::tool::commands()) {
        if (c.name != name) continue;
        std::string argv0 = "weft " + name;
        std::vector<char *> args;
        args.push_back(argv0.data());
        for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
        args.push_back(nullptr);
        try {
            const int rc = c.main(int(args.size() - 1), args.data());
            weft::tool::finish_ranks();
            return rc;
        } catch (const std::exception &e) {
            std::fprintf(stderr, "weft %s: error: %s\n", name.c_str(), e.what());
            weft::tool::end_job_after_error(1);  // in a pipeline across ranks: every rank ends
            return 1;
        }
    }
    std::fprintf(stderr, "weft: unknown command '%s'\n\n", name.c_str());
    print_usage(stderr);
    return 1;
}
