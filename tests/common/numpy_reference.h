// tests/common/numpy_reference.h — the NumPy reference forward passes (tests/reference/*.py): finding a
// python3 that has NumPy, running a reference script, and the normalized error of a result against it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace weft::test {

// A python3 command that imports numpy: python3 on the PATH, else Debian's /usr/bin/python3 (the PATH's
// may be another installation without Debian's packages); "" when neither has it.
inline const std::string &python_with_numpy() {
    static const std::string found = [] {
        for (const char *candidate : {"python3", "/usr/bin/python3"}) {
            const std::string probe = std::string(candidate) + " -c 'import numpy' >/dev/null 2>&1";
            if (std::system(probe.c_str()) == 0) return std::string(candidate);
        }
        return std::string();
    }();
    return found;
}

#define WEFT_SKIP_WITHOUT_NUMPY()                                                                           \
    if (::weft::test::python_with_numpy().empty())                                                          \
    GTEST_SKIP() << "no python3 with NumPy (Debian: python3-numpy, installed by scripts/install-deps.sh); " \
                    "the NumPy reference tests need it"

inline std::string reference_script(const std::string &name) {
    return (std::filesystem::path(WEFT_SOURCE_DIR) / "tests" / "reference" / name).string();
}

// Runs `python3 tests/reference/<script> <args...> OUT` and returns OUT's float64 values ([] and a test
// failure when the script fails).
inline std::vector<double> run_reference(const std::string &script, const std::vector<std::string> &args) {
    const std::filesystem::path out =
        std::filesystem::temp_directory_path() /
        ("weft-numpy-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()) + ".bin");
    std::string cmd = python_with_numpy() + " '" + reference_script(script) + "'";
    for (const std::string &a : args) cmd += " '" + a + "'";
    cmd += " '" + out.string() + "'";
    if (std::system(cmd.c_str()) != 0) {
        ADD_FAILURE() << "the NumPy reference failed: " << cmd;
        return {};
    }
    std::ifstream in(out, std::ios::binary);
    std::vector<double> values(std::filesystem::file_size(out) / sizeof(double));
    in.read(reinterpret_cast<char *>(values.data()), std::streamsize(values.size() * sizeof(double)));
    std::filesystem::remove(out);
    return values;
}

// The reference logits of a float model for tokens: n_tokens rows of n_vocab, position-major. GELU
// through the reference engine's f16 table, or in float (gelu_table false: see cpu_set_gelu_table).
inline std::vector<double> reference_logits(const std::string &model_path, const std::vector<int32_t> &tokens,
                                            bool gelu_table = true) {
    std::string list;
    for (const int32_t t : tokens) list += (list.empty() ? "" : ",") + std::to_string(t);
    return run_reference("forward.py", {model_path, list, gelu_table ? "gelu=table" : "gelu=float"});
}

// Σ (got - want)² / Σ want² over n values.
inline double nmse(const float *got, const double *want, size_t n) {
    double err = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; ++i) {
        err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        norm += want[i] * want[i];
    }
    return norm > 0.0 ? err / norm : err;
}

}  // namespace weft::test
