// tests/hostile/test_gguf_mutations.cpp — the GGUF mutation corpus (gguf_mutator.h) run through
// `weft inspect`, `run`, `tokenize` and `quantize`, each case in its own process under a timeout.
// Every run is a success, a clean error (non-zero exit, an error message on stderr), a crash (a
// signal or a sanitizer report) or a hang (the timeout); the counts are printed and any crash or
// hang fails the test. The failing files are kept under $TMPDIR/weft-mutations-failed.
//
// Bases: the built-in stories260K (models/), a q8_0 model from `weft synth`, a small byte-level BPE
// vocabulary written by gguf_writer, and, when ../shared is there, a few fixture models.
// Each command takes a share of the cases (see `selected`). Three sizes: WEFT_MUTATION_SIZE=small (the
// default of the test suite: a sixteenth of each share), standard (each share whole: `ctest -L fuzz`,
// whose entries set WEFT_MUTATION_DEFAULT_SIZE=standard) and full (every case through every command;
// WEFT_MUTATION_FULL=1 too). WEFT_MUTATION_TIMEOUT sets the per-case timeout in seconds (default 30);
// WEFT_MUTATION_FILTER=TEXT keeps only the cases whose name contains TEXT.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/fixtures.h"
#include "common/run_weft.h"
#include "gguf/gguf_test_util.h"
#include "hostile/gguf_mutator.h"

namespace weft::test {
namespace {

namespace fs = std::filesystem;

struct base_file {
    std::string name;
    std::vector<uint8_t> bytes;
};

// A byte-level BPE vocabulary (printable ASCII, 'Ġ' for the space, a few merges) with no tensors.
std::vector<uint8_t> bpe_vocab_file(const temp_dir &dir) {
    std::vector<std::string> tokens = {"<|endoftext|>", "\xc4\xa0"};  // Ġ
    for (char c = '!'; c <= '~'; ++c) tokens.emplace_back(1, c);
    const std::vector<std::string> merges = {"h e", "l l",  "he ll", "hell o", "\xc4\xa0 w",
                                             "o r", "w or", "wor l", "worl d"};
    for (const auto &m : merges) tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
    std::vector<int32_t> types(tokens.size(), 1);
    types[0] = 3;  // control
    gguf_writer w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "default");
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_array("tokenizer.ggml.token_type", gguf_type::i32, types.data(), types.size());
    w.set_string_array("tokenizer.ggml.merges", merges);
    w.set_u32("tokenizer.ggml.bos_token_id", 0);
    w.set_u32("tokenizer.ggml.eos_token_id", 0);
    w.write(dir.file("bpe.gguf"));
    return read_file_bytes(dir.file("bpe.gguf"));
}

std::vector<base_file> base_files(const temp_dir &dir) {
    std::vector<base_file> bases;
    bases.push_back(
        {"stories260K", read_file_bytes(std::string(WEFT_SOURCE_DIR) + "/models/stories260K.gguf")});
    const std::string synth = dir.file("synth.gguf");
    const run_result r =
        run_weft({"synth", synth, "--arch", "llama", "--embd", "64", "--layers", "2", "--heads", "4",
                  "--kv-heads", "2", "--ff", "96", "--vocab", "300", "--type", "q8_0"});
    EXPECT_EQ(r.status, 0) << r.err;
    bases.push_back({"synth-q8_0", read_file_bytes(synth)});
    bases.push_back({"bpe-vocab", bpe_vocab_file(dir)});
    if (have_fixtures()) {
        // shape arithmetic of their own: multi-head latent attention, experts
        for (const char *f : {"models/tiny-deepseek2-Q8_0.gguf", "models/tiny-llama-moe-Q8_0.gguf"})
            if (fs::exists(fixture(f)))
                bases.push_back({fs::path(f).stem().string(), read_file_bytes(fixture(f))});
    }
    return bases;
}

std::vector<mutation_case> corpus(const temp_dir &dir) {
    std::vector<mutation_case> all;
    uint64_t seed = 20240601;
    for (const base_file &b : base_files(dir)) {
        if (b.bytes.empty()) continue;
        auto cases = gguf_mutator(b.name, b.bytes, seed++).generate();
        std::move(cases.begin(), cases.end(), std::back_inserter(all));
    }
    return all;
}

enum class outcome { success, clean_error, crash, hang };
const char *outcome_name(outcome o) {
    switch (o) {
        case outcome::success:
            return "success";
        case outcome::clean_error:
            return "clean error";
        case outcome::crash:
            return "crash";
        case outcome::hang:
            return "hang";
    }
    return "?";
}

constexpr bool built_with_asan() {
#if defined(__SANITIZE_ADDRESS__)
    return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return true;
#endif
#endif
    return false;
}

struct verdict {
    outcome kind = outcome::success;
    std::string detail;  // the signal, the sanitizer report, the last lines of stderr
};

// Runs `weft ARGS` in its own process: stdout to /dev/null, stderr to `err_file`, killed after
// `timeout`. Without ASan, the address space is capped so that a hostile size that reaches the
// allocator fails in that process instead of swapping the machine.
verdict run_one(const std::vector<std::string> &args, const std::string &err_file,
                std::chrono::seconds timeout) {
    std::vector<std::string> argv_text = {WEFT_BINARY};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char *> argv;
    for (auto &a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
        const int null_fd = ::open("/dev/null", O_RDWR);
        const int err_fd = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ::dup2(null_fd, 0);
        ::dup2(null_fd, 1);
        ::dup2(err_fd, 2);
        const rlimit no_core{0, 0};
        ::setrlimit(RLIMIT_CORE, &no_core);
        if (!built_with_asan()) {
            const rlimit address_space{rlim_t(8) << 30, rlim_t(8) << 30};
            ::setrlimit(RLIMIT_AS, &address_space);
        }
        ::execv(argv[0], argv.data());
        const std::string why = std::string("cannot execute ") + argv[0] + ": " + std::strerror(errno) + "\n";
        [[maybe_unused]] const auto written = ::write(2, why.data(), why.size());
        ::_exit(127);
    }
    verdict v;
    if (pid < 0) {
        v.kind = outcome::crash;
        v.detail = "fork failed";
        return v;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    // most cases end within a few milliseconds: poll often (a longer pause would idle the suite)
    auto pause = std::chrono::microseconds(200);
    while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            v.kind = outcome::hang;
            v.detail = "still running after " + std::to_string(timeout.count()) + " s";
            return v;
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
    const std::string err = read_text_file(err_file);
    const std::string tail = err.size() > 1500 ? "..." + err.substr(err.size() - 1500) : err;
    for (const char *report :
         {"AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer"}) {
        if (err.find(report) != std::string::npos) {
            v.kind = outcome::crash;
            v.detail = "sanitizer report: " + tail;
            return v;
        }
    }
    if (WIFSIGNALED(status)) {
        v.kind = outcome::crash;
        v.detail = std::string("signal ") + ::strsignal(WTERMSIG(status)) + ": " + tail;
    } else if (WEXITSTATUS(status) == 0) {
        v.kind = outcome::success;
    } else if (err.find("error") != std::string::npos) {
        v.kind = outcome::clean_error;
    } else {
        // a failure that does not say what failed counts against weft as a crash would
        v.kind = outcome::crash;
        v.detail = "exit " + std::to_string(WEXITSTATUS(status)) + " without an error message: " + tail;
    }
    return v;
}

std::chrono::seconds case_timeout() {
    const char *env = std::getenv("WEFT_MUTATION_TIMEOUT");
    return std::chrono::seconds(env ? std::max(1, std::atoi(env)) : 30);
}

enum class corpus_size { small, standard, full };

corpus_size run_size() {
    if (const char *full = std::getenv("WEFT_MUTATION_FULL"); full && std::string(full) == "1")
        return corpus_size::full;
    const char *env = std::getenv("WEFT_MUTATION_SIZE");
    if (!env) env = std::getenv("WEFT_MUTATION_DEFAULT_SIZE");
    const std::string size = env ? env : "small";
    if (size == "full") return corpus_size::full;
    if (size == "standard") return corpus_size::standard;
    return corpus_size::small;
}

bool full_run() {
    return run_size() == corpus_size::full;
}

// Which cases a command takes. Structural cases (truncations, patched fields, bit flips) mostly
// stop in the reader, which every command shares: inspect takes them all, the others every fourth.
// Semantic cases reach the model and the vocabulary: run takes them all, tokenize every second,
// inspect and quantize every fourth.
bool selected(const std::string &command, size_t index, const mutation_case &c) {
    if (const char *only = std::getenv("WEFT_MUTATION_FILTER"))  // to rerun the cases named so
        if (c.name.find(only) == std::string::npos) return false;
    if (full_run()) return true;
    const bool structural = c.group != "semantic";
    if (command == "inspect") return structural || index % 4 == 0;
    if (command == "run") return !structural || index % 4 == 1;
    if (command == "tokenize") return structural ? index % 4 == 2 : index % 2 == 0;
    return index % 4 == 3;  // quantize
}

std::vector<std::string> command_args(const std::string &command, const std::string &file,
                                      const std::string &out) {
    if (command == "inspect") return {"inspect", file};
    if (command == "run")
        return {"run",    "-m", file, "-p", "Hello world",     "-n", "4",
                "--temp", "0",  "-t", "1",  "--threads-batch", "1"};
    if (command == "tokenize")
        return {"tokenize", "-m", file, "-p", "hello world <|endoftext|> \xc3\xbc 123"};
    return {"quantize", file, out, "Q8_0", "-t", "1"};
}

// Runs the selected cases through one command and fails on any crash or hang.
void run_corpus_through(const std::string &command) {
    temp_dir dir;
    const std::vector<mutation_case> cases = corpus(dir);
    const std::string file = dir.file("case.gguf"), out = dir.file("out.gguf"), err = dir.file("stderr");
    const fs::path keep = fs::temp_directory_path() / "weft-mutations-failed";
    std::map<outcome, size_t> counts;
    std::map<std::string, std::map<outcome, size_t>> by_group;
    std::vector<std::string> failures;
    const auto t0 = std::chrono::steady_clock::now();
    const bool small = run_size() == corpus_size::small;
    size_t n_selected = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        if (!selected(command, i, cases[i])) continue;
        if (small && n_selected++ % 16 != 0) continue;  // the suite's size: every sixteenth of the share
        const std::vector<uint8_t> bytes = cases[i].bytes();
        write_file_bytes(file, bytes);
        const verdict v = run_one(command_args(command, file, out), err, case_timeout());
        ++counts[v.kind];
        ++by_group[cases[i].group][v.kind];
        fs::remove(out);
        if (v.kind == outcome::crash || v.kind == outcome::hang) {
            fs::create_directories(keep);
            const std::string kept = (keep / (command + "-" + std::to_string(i) + ".gguf")).string();
            write_file_bytes(kept, bytes);
            failures.push_back(std::string(outcome_name(v.kind)) + ": " + cases[i].name + " (" + kept +
                               ")\n  " + v.detail);
        }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    size_t total = 0;
    for (const auto &[k, n] : counts) total += n;
    auto print_counts = [](std::map<outcome, size_t> &c) {
        for (outcome o : {outcome::clean_error, outcome::success, outcome::crash, outcome::hang})
            std::printf("%s %s %zu", o == outcome::clean_error ? "" : ",", outcome_name(o), c[o]);
        std::printf("\n");
    };
    std::printf("weft %s over %zu mutated files (%s) in %.1f s:", command.c_str(), total,
                small ? "the suite's sixteenth; ctest -L fuzz runs them all" : "the whole share", seconds);
    print_counts(counts);
    for (auto &[group, c] : by_group) {
        std::printf("  %-9s", group.c_str());
        print_counts(c);
    }
    for (const auto &f : failures) std::printf("%s\n", f.c_str());
    EXPECT_TRUE(failures.empty()) << failures.size() << " crashes or hangs; the files are in " << keep;
}

TEST(GgufMutations, CorpusIsLargeAndDistinct) {
    temp_dir dir;
    const std::vector<mutation_case> cases = corpus(dir);
    std::unordered_set<std::string> names;
    std::unordered_set<size_t> contents;
    std::map<std::string, size_t> per_group, per_base;
    size_t repo_cases = 0;
    for (const auto &c : cases) {
        EXPECT_TRUE(names.insert(c.name).second) << c.name;
        const std::vector<uint8_t> b = c.bytes();
        contents.insert(std::hash<std::string_view>{}(
            std::string_view(reinterpret_cast<const char *>(b.data()), b.size())));
        ++per_group[c.group];
        ++per_base[c.name.substr(0, c.name.find('/'))];
        repo_cases += c.name.rfind("tiny-", 0) != 0;
    }
    for (const auto &[group, n] : per_group) std::printf("%s: %zu cases\n", group.c_str(), n);
    for (const auto &[base, n] : per_base) std::printf("%s: %zu cases\n", base.c_str(), n);
    std::printf("%zu cases, %zu distinct files, %zu from the bases every clone has\n", cases.size(),
                contents.size(), repo_cases);
    EXPECT_GE(repo_cases, 500u);
    // a few mutations can coincide (a patch that writes the value already there); nearly all differ
    EXPECT_GE(contents.size(), cases.size() * 95 / 100);
}

// A NaN in a weight cannot be quantized: the error names the file, the tensor and the row (it used
// to give a row number counted from its chunk, and neither the file nor the tensor).
TEST(HostileValues, QuantizingANaNNamesTheFileTensorAndRow) {
    temp_dir dir;
    gguf_image g = gguf_image::decode(
        read_file_bytes(std::string(WEFT_SOURCE_DIR) + "/models/stories260K.gguf"), "stories260K");
    const auto t = std::find_if(g.tensors.begin(), g.tensors.end(),
                                [](const gguf_tensor_info &i) { return i.name == "token_embd.weight"; });
    ASSERT_NE(t, g.tensors.end());
    ASSERT_EQ(t->type, dtype::f32);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(g.data.data() + t->offset + (3 * size_t(t->ne[0]) + 5) * sizeof(float), &nan, sizeof nan);
    const std::string in = dir.file("nan.gguf");
    write_file_bytes(in, encode(g).bytes);
    const run_result r = run_weft({"quantize", in, dir.file("out.gguf"), "Q8_0", "-t", "1"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find(in + ": tensor 'token_embd.weight': rows 0 to "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("row 3, column 5: value nan is not finite"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir.file("out.gguf")));
}

TEST(GgufMutations, Inspect) {
    run_corpus_through("inspect");
}
TEST(GgufMutations, Run) {
    run_corpus_through("run");
}
TEST(GgufMutations, Tokenize) {
    run_corpus_through("tokenize");
}
TEST(GgufMutations, Quantize) {
    run_corpus_through("quantize");
}

}  // namespace
}  // namespace weft::test
