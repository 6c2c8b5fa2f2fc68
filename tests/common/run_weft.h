// tests/common/run_weft.h — runs the built `weft` executable as a user would, capturing its output.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace weft::test {

struct run_result {
    int status = -1;  // exit status (-1: did not exit normally)
    std::string out;  // stdout
    std::string err;  // stderr
};

inline std::string shell_quote(const std::string &s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// The whole file as bytes ("" when it cannot be read).
inline std::string read_text_file(const std::filesystem::path &p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Runs a shell command line (quoted paths, redirections and `;` allowed); stdin is `input` when
// given, /dev/null otherwise; stdout and stderr go through temporary files.
inline run_result run_shell(const std::string &line, const std::string *input = nullptr) {
    static std::atomic<int> counter{0};
    const auto dir = std::filesystem::temp_directory_path() /
                     ("weft-cli-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(dir);
    std::string stdin_path = "/dev/null";
    if (input != nullptr) {
        stdin_path = (dir / "in").string();
        std::ofstream(stdin_path, std::ios::binary) << *input;
    }
    // the default stdin comes first, so a redirection inside the line overrides it
    const std::string cmd = "{ " + line + "\n} < " + shell_quote(stdin_path) + " > " +
                            shell_quote((dir / "out").string()) + " 2> " +
                            shell_quote((dir / "err").string());
    run_result r;
    const int raw = std::system(cmd.c_str());
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.out = read_text_file(dir / "out");
    r.err = read_text_file(dir / "err");
    std::filesystem::remove_all(dir);
    return r;
}

// `LAUNCHER weft ARGS` (ARGS shell text; LAUNCHER e.g. "mpirun -np 2", empty for none).
inline run_result run_weft_launched(const std::string &launcher, const std::string &args,
                                    const std::string *input = nullptr) {
    return run_shell(launcher + " " + shell_quote(WEFT_BINARY) + " " + args, input);
}

// `weft ARGS`.
inline run_result run_weft_shell(const std::string &args, const std::string *input = nullptr) {
    return run_weft_launched("", args, input);
}

// The same with one argument per element, each quoted.
inline run_result run_weft(const std::vector<std::string> &args) {
    std::string line;
    for (const auto &a : args) line += (line.empty() ? "" : " ") + shell_quote(a);
    return run_weft_shell(line);
}

}  // namespace weft::test
