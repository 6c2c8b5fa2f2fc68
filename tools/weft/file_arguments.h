// tools/weft/file_arguments.h — the file arguments of every command, checked one way. An input must
// be a regular file: a FIFO, a device or a directory is refused when the arguments are read, before
// anything opens it (opening a FIFO for reading waits for a writer: `quantize --imatrix FIFO` used to
// hang). An output may not be one of the inputs: they are compared by device and inode, so another
// spelling of the path, a hard link or a symbolic link to an input is caught as well.
#pragma once

#include <sys/stat.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "weft/command.h"
#include "weft/core/error.h"

namespace weft::tool {

// "" when `path` names a regular file (symbolic links followed), else what is wrong with it.
// absent_ok: a path that does not exist is fine too (an input that a command may also create).
inline std::string input_file_problem(const std::string &path, bool absent_ok = false) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT && absent_ok) return {};
        return path + ": cannot read: " + std::strerror(errno);
    }
    if (!S_ISREG(st.st_mode))
        return path + ": not a regular file (a FIFO, device or directory); weft reads only regular files";
    return {};
}

// Throws weft::error unless `path` names a regular file (input_file_problem).
inline void require_input_file(const std::string &path) {
    if (const std::string why = input_file_problem(path); !why.empty()) throw error(why);
}

// The CLI11 check of every input file option (each value of a repeatable one); in parse-only mode
// (parse_only()) no file is looked at.
inline CLI::Validator input_file(bool absent_ok = false) {
    return CLI::Validator(
        [absent_ok](std::string &path) {
            return parse_only() ? std::string() : input_file_problem(path, absent_ok);
        },
        "FILE", "a regular file");
}

// Throws weft::error when `output` exists and is the same file as one of `inputs` (the same device
// and inode): writing it would replace the input it is made from.
inline void require_output_not_input(const std::string &output, const std::vector<std::string> &inputs) {
    struct stat out {};
    if (::stat(output.c_str(), &out) != 0) return;  // it does not exist yet
    for (const std::string &in : inputs) {
        struct stat st {};
        if (::stat(in.c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino)
            throw error("the output " + output + " is the input " + in +
                        " (the same file); writing it would replace its own input");
    }
}

}  // namespace weft::tool
