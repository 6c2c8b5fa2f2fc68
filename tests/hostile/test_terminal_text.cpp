// tests/hostile/test_terminal_text.cpp — text from a file never reaches the terminal raw: metadata
// keys and tensor names with escape sequences are shown escaped by inspect, quantize and load errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/run_weft.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"
#include "weft/model/synth.h"

namespace {

namespace fs = std::filesystem;
using weft::test::shell_quote;

TEST(TerminalText, PrintableEscapesControlsAndBadUtf8) {
    EXPECT_EQ(weft::printable("plain ünïcode"), "plain ünïcode");
    EXPECT_EQ(weft::printable("a\x1b[31mred"), "a\\x1b[31mred");
    EXPECT_EQ(weft::printable("bell\x07 del\x7f"), "bell\\x07 del\\x7f");
    EXPECT_EQ(weft::printable("c1 \xc2\x9b csi"), "c1 \\xc2\\x9b csi");  // U+009B, a C1 control
    EXPECT_EQ(weft::printable("bad \xff\xfe"), "bad \\xff\\xfe");        // not UTF-8
    EXPECT_EQ(weft::printable("overlong \xc0\xaf"), "overlong \\xc0\\xaf");
    EXPECT_EQ(weft::printable(std::string(300, 'x')).size(), 256u + 3);  // cut, with "..."
    EXPECT_EQ(weft::quoted("k"), "'k'");
}

TEST(TerminalText, InspectQuantizeAndLoadErrorsShowNoRawEscapes) {
    const fs::path dir = fs::temp_directory_path() / ("weft-term-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string evil = (dir / "evil.gguf").string();
    {
        weft::synth_spec s;
        s.n_embd = 64;
        s.n_layer = 1;
        s.n_ff = 96;
        s.n_vocab = 300;
        weft::gguf_writer w;
        weft::synth_fill_writer(s, w);
        w.set_string("evil\x1b]0;title\x07.key", "v");
        const float data[32] = {};
        w.add_tensor("blk.0.\x1b[2Jextra.weight", weft::dtype::f32, std::vector<int64_t>{32}, data,
                     sizeof data);
        w.write(evil);
    }
    for (const std::string &cmd :
         {"inspect " + shell_quote(evil), "run -m " + shell_quote(evil) + " -p hi -n 1",
          "quantize " + shell_quote(evil) + " " + shell_quote((dir / "q.gguf").string()) + " Q8_0"}) {
        SCOPED_TRACE(cmd);
        const weft::test::run_result r = weft::test::run_weft_shell(cmd);
        EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "raw ESC on stdout";
        EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "raw ESC on stderr";
        EXPECT_NE((r.out + r.err).find("\\x1b"), std::string::npos) << r.out << r.err;
    }
    fs::remove_all(dir);
}

}  // namespace
