// tests/hostile/test_safe_files.cpp — outputs never clobber what is not a regular file, never leave
// temporary files behind (on errors or SIGTERM), and never write through a planted link; inputs
// that are FIFOs fail at once instead of hanging.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "common/fixtures.h"
#include "common/run_weft.h"
#include "weft/core/safe_file.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using weft::test::run_result;
using weft::test::shell_quote;

class SafeFiles : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("weft-hostile-" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string &name) const { return (dir_ / name).string(); }
    std::string fifo(const std::string &name) const {
        const std::string p = path(name);
        EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0);
        return p;
    }
    // Files in the directory whose name looks like a temporary file of ours.
    int temp_files() const {
        int n = 0;
        for (const auto &e : fs::directory_iterator(dir_))
            n += e.path().filename().string().find(".tmp") != std::string::npos;
        return n;
    }
    // `weft ARGS` under a 20 s timeout (exit status 124 when it ran out), stdin from /dev/null.
    run_result weft(const std::string &args) const {
        const std::string out = path("stdout"), err = path("stderr");
        const std::string cmd = "timeout 20 " + shell_quote(WEFT_BINARY) + " " + args + " < /dev/null > " +
                                shell_quote(out) + " 2> " + shell_quote(err);
        const int rc = std::system(cmd.c_str());
        run_result r;
        r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
        r.out = weft::test::read_text_file(out);
        r.err = weft::test::read_text_file(err);
        fs::remove(out);
        fs::remove(err);
        return r;
    }
    fs::path dir_;
};

// Padding (a GGUF's alignment) is written as skipped zeros: the bytes read back are the zeros, also
// at the end of the file, and a hostile 2 GiB of padding is a file of that length with no 2 GiB of
// writes behind it (its blocks are not counted, as far as the file system keeps holes).
TEST_F(SafeFiles, SkippedZerosReadBackAsZerosAndSetTheLength) {
    {
        weft::output_file out(path("padded"));
        out.write("ab");
        out.write_zeros(5);
        out.write("c");
        out.write_zeros(3);
        out.commit();
    }
    EXPECT_EQ(weft::read_input_file(path("padded")), std::string("ab\0\0\0\0\0c\0\0\0", 11));
    {
        weft::output_file out(path("huge"));
        out.write("x");
        out.write_zeros(size_t(1) << 31);
        out.commit();
    }
    EXPECT_EQ(fs::file_size(path("huge")), (uint64_t(1) << 31) + 1);
    struct stat st {};
    ASSERT_EQ(::stat(path("huge").c_str(), &st), 0);
    EXPECT_LT(uint64_t(st.st_blocks) * 512, uint64_t(1) << 30) << "the padding was written, not skipped";
    EXPECT_EQ(temp_files(), 0);
}

// Every writer refuses to replace a FIFO (as it would refuse a device node such as /dev/null).
TEST_F(SafeFiles, WritersRefuseToReplaceWhatIsNotARegularFile) {
    const std::string target = fifo("target");
    const std::string synth_args =
        " --arch llama --embd 64 --layers 1 --heads 4 --kv-heads 2 --ff 96 --vocab 300";
    const std::string model = path("m.gguf");
    ASSERT_EQ(weft("synth " + shell_quote(model) + synth_args).status, 0);
    for (const std::string &cmd : {"synth " + shell_quote(target) + synth_args,
                                   "quantize " + shell_quote(model) + " " + shell_quote(target) + " Q8_0",
                                   "graph --demo --dot " + shell_quote(target)}) {
        SCOPED_TRACE(cmd);
        const run_result r = weft(cmd);
        EXPECT_NE(r.status, 0);
        EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
        struct stat st {};
        ASSERT_EQ(::lstat(target.c_str(), &st), 0);
        EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
    }
    EXPECT_EQ(temp_files(), 0);
}

// A symbolic link planted at the output path is replaced by the new file; what it pointed to is
// left alone.
TEST_F(SafeFiles, APlantedLinkIsReplacedNotWrittenThrough) {
    const std::string victim = path("victim");
    { std::ofstream(victim) << "keep"; }
    const std::string out = path("out.gguf");
    fs::create_symlink(victim, out);
    const run_result r =
        weft("synth " + shell_quote(out) +
             " --arch llama --embd 64 --layers 1 --heads 4 --kv-heads 2 --ff 96 --vocab 300");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(weft::test::read_text_file(victim), "keep");
    EXPECT_FALSE(fs::is_symlink(out));
    EXPECT_TRUE(fs::is_regular_file(out));
    EXPECT_EQ(temp_files(), 0);
}

// SIGTERM while a large file is being written: no temporary file survives, no target appears.
TEST_F(SafeFiles, SigtermLeavesNoTemporaryFile) {
    const std::string out = path("big.gguf");
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::execl(WEFT_BINARY, WEFT_BINARY, "synth", out.c_str(), "--arch", "llama", "--embd", "1024",
                "--layers", "16", "--heads", "16", "--kv-heads", "4", "--ff", "2816", "--vocab", "32000",
                static_cast<char *>(nullptr));
        std::_Exit(127);
    }
    ASSERT_GT(pid, 0);
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (temp_files() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    ASSERT_EQ(temp_files(), 1) << "the writer never started";
    ::kill(pid, SIGTERM);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        GTEST_SKIP() << "the file was complete before the signal";
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    EXPECT_EQ(temp_files(), 0);
    EXPECT_FALSE(fs::exists(out));
}

// A FIFO given where a file is read fails at once with a clear message (it used to wait forever
// for a writer in open).
TEST_F(SafeFiles, FifoInputsFailAtOnce) {
    const std::string in = fifo("input");
    const std::string model = path("m.gguf");
    ASSERT_EQ(weft("synth " + shell_quote(model) +
                   " --arch llama --embd 64 --layers 1 --heads 4 --kv-heads 2 --ff 96 --vocab 300")
                  .status,
              0);
    for (const std::string &cmd :
         {"inspect " + shell_quote(in), "run -m " + shell_quote(in) + " -p hi -n 1",
          "tokenize -m " + shell_quote(model) + " -f " + shell_quote(in),
          "perplexity -m " + shell_quote(model) + " -f " + shell_quote(in) + " -c 16",
          "imatrix -m " + shell_quote(model) + " -f " + shell_quote(in) + " -c 16 -o " +
              shell_quote(path("i.dat"))}) {
        SCOPED_TRACE(cmd);
        const auto t0 = std::chrono::steady_clock::now();
        const run_result r = weft(cmd);
        EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
        EXPECT_NE(r.status, 0);
        EXPECT_NE(r.status, 124) << "timed out: it blocked on the FIFO";
        EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
    }
}

}  // namespace
