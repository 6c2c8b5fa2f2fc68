// tests/gguf/test_gguf_corpus.cpp — broken-file corpus: each broken GGUF gives a gguf_error naming its fault.
//
// The cases are built here, byte by byte, from a valid small file. WEFT_GGUF_WRITE_CORPUS=<dir>
// writes them (and MANIFEST, "<file> <expected fragment>") for the fuzzer's seed corpus; the
// checked-in copy under tests/gguf/corpus/ is checked too, so it cannot drift from the reader.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "gguf_test_util.h"
#include "weft/gguf/gguf.h"

namespace weft {
namespace {

using test::raw_gguf;

struct broken_case {
    std::string name;
    std::vector<uint8_t> bytes;
    std::string fragment;  // expected in the error message
};

constexpr int32_t f32_id = 0;
constexpr int32_t q4_0_id = 2;

// The valid base: two kvs, two f32 tensors [32, 2] at offsets 0 and 256, data present.
raw_gguf valid_prefix_until_infos(uint64_t n_tensors = 2, uint64_t n_kv = 2) {
    raw_gguf g;
    g.header(n_tensors, n_kv).kv_string("general.architecture", "llama").kv_u32("llama.block_count", 1);
    return g;
}

std::vector<uint8_t> valid_file() {
    raw_gguf g = valid_prefix_until_infos();
    g.tensor_info("a", {32, 2}, f32_id, 0).tensor_info("b", {32, 2}, f32_id, 256);
    g.pad_to(32).zeros(512);
    return g.data;
}

// A file with one tensor whose info is given by `info` (called on the builder), data of `data_bytes`.
template <class F>
std::vector<uint8_t> one_tensor(F info, size_t data_bytes = 256) {
    raw_gguf g = valid_prefix_until_infos(1, 2);
    info(g);
    g.pad_to(32).zeros(data_bytes);
    return g.data;
}

// A small model-like file written by gguf_writer: strings, arrays, an f32 and a q4_0 tensor.
std::vector<uint8_t> writer_file() {
    test::temp_dir dir;
    gguf_writer w;
    w.set_string("general.architecture", "llama");
    w.set_string_array("tokenizer.ggml.tokens", {"<s>", "</s>", "hello"});
    const float scores[] = {0, -1, -2};
    w.set_array("tokenizer.ggml.scores", gguf_type::f32, scores, 3);
    w.set_u32("llama.block_count", 1);
    std::vector<uint8_t> q(2 * 18, 7);
    const float data[16] = {};
    w.add_tensor("token_embd.weight", dtype::f32, std::vector<int64_t>{4, 4}, data, sizeof data);
    w.add_tensor("blk.0.attn_q.weight", dtype::q4_0, std::vector<int64_t>{32, 2}, q.data(), q.size());
    w.write(dir.file("full.gguf"));
    return test::read_file_bytes(dir.file("full.gguf"));
}

std::vector<broken_case> broken_cases() {
    std::vector<broken_case> c;
    auto add = [&](std::string name, std::vector<uint8_t> bytes, std::string fragment) {
        c.push_back({std::move(name), std::move(bytes), std::move(fragment)});
    };
    const auto valid = valid_file();

    add("empty", {}, "truncated header");
    add("three_bytes", {'G', 'G', 'U'}, "truncated header");
    add("magic_only", {'G', 'G', 'U', 'F'}, "truncated header (version)");
    add("bad_magic", raw_gguf().header(0, 0, 3, "GGML").data, "bad magic 'GGML'");
    add("version_1", raw_gguf().header(0, 0, 1).data, "version 1 is not supported");
    add("version_0", raw_gguf().header(0, 0, 0).data, "unknown GGUF version 0");
    add("version_4", raw_gguf().header(0, 0, 4).data, "unknown GGUF version 4");
    add("big_endian", raw_gguf().header(0, 0, 0x03000000u).data, "big-endian GGUF files are not supported");
    add("huge_kv_count", raw_gguf().header(0, std::numeric_limits<uint64_t>::max()).zeros(64).data,
        "metadata count 18446744073709551615 cannot fit");
    add("huge_tensor_count", raw_gguf().header(uint64_t(1) << 40, 0).zeros(64).data,
        "tensor count 1099511627776 cannot fit");
    add("huge_key_length", raw_gguf().header(0, 1).u64(uint64_t(1) << 62).zeros(16).data,
        "runs past the end of the file");
    add("huge_string_value",
        raw_gguf()
            .header(0, 1)
            .str("general.name")
            .u32(8)
            .u64(std::numeric_limits<uint64_t>::max())
            .zeros(16)
            .data,
        "runs past the end of the file");
    add("huge_numeric_array",
        raw_gguf().header(0, 1).str("a").u32(9).u32(4).u64(uint64_t(1) << 62).zeros(64).data,
        "array of 4611686018427387904 u32 runs past the end");
    add("overflowing_numeric_array",
        raw_gguf()
            .header(0, 1)
            .str("a")
            .u32(9)
            .u32(10)
            .u64(std::numeric_limits<uint64_t>::max() / 4)
            .zeros(64)
            .data,
        "runs past the end");
    add("huge_string_array",
        raw_gguf().header(0, 1).str("a").u32(9).u32(8).u64(uint64_t(1) << 50).zeros(64).data,
        "strings cannot fit");
    add("string_array_element_too_long",
        raw_gguf().header(0, 1).str("tokens").u32(9).u32(8).u64(2).str("ok").u64(1000).zeros(8).data,
        "element 1 length 1000");
    add("unknown_value_type", raw_gguf().header(0, 1).str("a").u32(13).zeros(8).data,
        "unknown metadata value type 13");
    add("nested_array", raw_gguf().header(0, 1).str("a").u32(9).u32(9).u64(1).zeros(16).data,
        "nested arrays are not supported");
    add("unknown_array_element_type", raw_gguf().header(0, 1).str("a").u32(9).u32(77).u64(1).zeros(16).data,
        "unknown array element type 77");
    add("duplicate_key", raw_gguf().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).data,
        "duplicate metadata key 'k'");
    add("alignment_zero", raw_gguf().header(0, 1).kv_u32("general.alignment", 0).data,
        "general.alignment 0 is not");
    add("alignment_not_power_of_two", raw_gguf().header(0, 1).kv_u32("general.alignment", 48).data,
        "general.alignment 48 is not a non-zero power of two");
    add("alignment_wrong_type", raw_gguf().header(0, 1).kv_string("general.alignment", "32").data,
        "general.alignment has type string, expected u32");
    add("n_dims_5", one_tensor([](raw_gguf &g) {
            g.tensor_info("w", {32, 1, 1, 1, 1}, f32_id, 0);
        }),
        "tensor 'w': n_dims 5 exceeds the maximum of 4");
    add("n_dims_huge", one_tensor([](raw_gguf &g) { g.str("w").u32(0xffffffffu); }),
        "n_dims 4294967295 exceeds");
    add("dim_zero", one_tensor([](raw_gguf &g) {
            g.tensor_info("w", {32, 0}, f32_id, 0);
        }),
        "ne[1] = 0 is not positive");
    add("dim_negative", one_tensor([](raw_gguf &g) { g.tensor_info("w", {-32}, f32_id, 0); }),
        "ne[0] = -32 is not positive");
    add("dims_overflow_int64", one_tensor([](raw_gguf &g) {
            g.tensor_info("w", {int64_t(1) << 32, int64_t(1) << 31, 4}, f32_id, 0);
        }),
        "element count overflows int64");
    add("bytes_overflow", one_tensor([](raw_gguf &g) { g.tensor_info("w", {int64_t(1) << 62}, f32_id, 0); }),
        "byte size overflows");
    add("unknown_type_4", one_tensor([](raw_gguf &g) { g.tensor_info("w", {32}, 4, 0); }),
        "tensor 'w': unknown type id 4");
    add("unknown_type_negative", one_tensor([](raw_gguf &g) { g.tensor_info("w", {32}, -1, 0); }),
        "unknown type id -1");
    add("unknown_type_large", one_tensor([](raw_gguf &g) { g.tensor_info("w", {32}, 1000, 0); }),
        "unknown type id 1000");
    add("row_not_block_multiple", one_tensor([](raw_gguf &g) {
            g.tensor_info("w", {33, 2}, q4_0_id, 0);
        }),
        "ne[0] = 33 is not a multiple of the q4_0 block size 32");
    add("misaligned_offset", one_tensor([](raw_gguf &g) { g.tensor_info("w", {8}, f32_id, 4); }),
        "data offset 4 is not a multiple of the alignment 32");
    add("offset_past_eof", one_tensor([](raw_gguf &g) { g.tensor_info("w", {32}, f32_id, 1 << 20); }),
        "past the end of the file");
    add("offset_overflows", one_tensor([](raw_gguf &g) {
            g.tensor_info("w", {32}, f32_id, std::numeric_limits<uint64_t>::max() - 31);
        }),
        "past the end of the file");
    add("tensor_larger_than_file", one_tensor([](raw_gguf &g) {
            g.tensor_info("w", {1024, 1024}, f32_id, 0);
        }),
        "past the end of the file");
    add("data_cut_short",
        one_tensor(
            [](raw_gguf &g) {
                g.tensor_info("w", {32, 4}, f32_id, 0);
            },
            100),
        "tensor 'w': data [0, 512)");
    {
        raw_gguf g = valid_prefix_until_infos();
        g.tensor_info("a", {32, 4}, f32_id, 0).tensor_info("b", {32}, f32_id, 256).pad_to(32).zeros(1024);
        add("overlapping_tensors", g.data, "tensor 'b' at offset 256 overlaps tensor 'a' [0, 512)");
    }
    {
        raw_gguf g = valid_prefix_until_infos();
        g.tensor_info("same", {32}, f32_id, 0).tensor_info("same", {32}, f32_id, 128).pad_to(32).zeros(512);
        add("duplicate_tensor_name", g.data, "duplicate tensor name 'same'");
    }
    {
        raw_gguf g = valid_prefix_until_infos();
        g.tensor_info("a", {32}, f32_id, 0).str("b").u32(1);  // ends inside the second info
        add("truncated_tensor_info", g.data, "truncated");
    }
    add("truncated_in_data", std::vector<uint8_t>(valid.begin(), valid.end() - 300), "truncated data");
    return c;
}

std::string error_of(const std::vector<uint8_t> &bytes, const std::string &name) {
    try {
        (void)gguf_file::from_memory(bytes.data(), bytes.size(), name);
    } catch (const gguf_error &e) {
        return e.what();
    }
    return "";
}

TEST(gguf_corpus, the_base_file_is_valid) {
    const auto valid = valid_file();
    const auto f = gguf_file::from_memory(valid.data(), valid.size(), "valid.gguf");
    EXPECT_EQ(f->tensors().size(), 2u);
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
}

TEST(gguf_corpus, every_broken_file_gives_its_error) {
    const auto cases = broken_cases();
    EXPECT_GE(cases.size(), 20u);
    for (const auto &bc : cases) {
        const std::string msg = error_of(bc.bytes, bc.name + ".gguf");
        ASSERT_FALSE(msg.empty()) << bc.name << ": accepted";
        EXPECT_NE(msg.find(bc.name + ".gguf: "), std::string::npos) << bc.name << ": " << msg;
        EXPECT_NE(msg.find(bc.fragment), std::string::npos)
            << bc.name << ": got \"" << msg << "\", wanted \"" << bc.fragment << "\"";
    }
}

TEST(gguf_corpus, broken_files_fail_the_same_way_in_every_open_mode) {
    test::temp_dir dir;
    for (const auto &bc : broken_cases()) {
        const std::string path = dir.file(bc.name + ".gguf");
        test::write_file_bytes(path, bc.bytes);
        for (int mode = 0; mode < 3; ++mode) {
            gguf_open_options opt;
            opt.use_mmap = mode == 0;
            opt.load_data = mode != 2;
            try {
                (void)gguf_file::open(path, opt);
                ADD_FAILURE() << bc.name << " opened in mode " << mode;
            } catch (const gguf_error &e) {
                const std::string msg = e.what();
                EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
                EXPECT_NE(msg.find(bc.fragment), std::string::npos)
                    << bc.name << " mode " << mode << ": " << msg;
            }
        }
    }
}

TEST(gguf_corpus, every_truncation_of_a_valid_file_is_reported) {
    // A file written by gguf_writer, cut at every byte up to the end of its last tensor's data.
    const auto full = writer_file();
    const auto f = gguf_file::from_memory(full.data(), full.size());
    size_t end_of_data = 0;
    for (const auto &t : f->tensors())
        end_of_data = std::max<size_t>(end_of_data, f->data_offset() + t.offset + t.nbytes);
    ASSERT_LE(end_of_data, full.size());
    for (size_t cut = 0; cut < end_of_data; ++cut) {
        std::vector<uint8_t> part(full.begin(), full.begin() + ptrdiff_t(cut));
        const std::string msg = error_of(part, "cut.gguf");
        EXPECT_NE(msg.find("truncated"), std::string::npos) << "cut at " << cut << ": \"" << msg << "\"";
    }
    // cutting only the final padding leaves a valid file
    std::vector<uint8_t> unpadded(full.begin(), full.begin() + ptrdiff_t(end_of_data));
    EXPECT_EQ(error_of(unpadded, "unpadded.gguf"), "");
}

TEST(gguf_corpus, random_byte_flips_never_crash) {
    // Not a substitute for the fuzzer (scripts/fuzz.sh): a quick, deterministic sweep in every run.
    const auto valid = valid_file();
    uint32_t state = 12345;
    auto next = [&] { return state = state * 1664525u + 1013904223u; };
    size_t rejected = 0;
    for (int i = 0; i < 5000; ++i) {
        auto bytes = valid;
        const int flips = 1 + int(next() % 4);
        for (int k = 0; k < flips; ++k) bytes[next() % bytes.size()] = uint8_t(next() >> 24);
        try {
            const auto f = gguf_file::from_memory(bytes.data(), bytes.size(), "flip.gguf");
            for (const auto &t : f->tensors()) {
                ASSERT_LE(f->data_offset() + t.offset + t.nbytes, bytes.size());
                (void)f->tensor_data(t)[t.nbytes ? t.nbytes - 1 : 0];
            }
        } catch (const gguf_error &) {
            ++rejected;
        }
    }
    EXPECT_GT(rejected, 0u);
}

// The corpus directory: WEFT_GGUF_WRITE_CORPUS=<dir> writes it; the checked-in copy is verified.
TEST(gguf_corpus, checked_in_corpus_matches_the_reader) {
    const auto cases = broken_cases();
    if (const char *out = std::getenv("WEFT_GGUF_WRITE_CORPUS")) {
        std::filesystem::create_directories(out);
        std::ofstream manifest(std::filesystem::path(out) / "MANIFEST");
        manifest
            << "# <file> <fragment expected in the gguf_error message>; written by gguf_test_gguf_corpus\n";
        for (const auto &bc : cases) {
            test::write_file_bytes((std::filesystem::path(out) / (bc.name + ".gguf")).string(), bc.bytes);
            manifest << bc.name << ".gguf " << bc.fragment << "\n";
        }
        // valid seeds too, so the fuzzer starts from files that reach the tensor checks
        test::write_file_bytes((std::filesystem::path(out) / "valid_small.gguf").string(), valid_file());
        test::write_file_bytes((std::filesystem::path(out) / "valid_writer.gguf").string(), writer_file());
    }
    const auto dir = std::filesystem::path(WEFT_SOURCE_DIR) / "tests" / "gguf" / "corpus";
    if (!std::filesystem::exists(dir / "MANIFEST")) GTEST_SKIP() << "no checked-in corpus at " << dir;
    std::ifstream manifest(dir / "MANIFEST");
    std::string line;
    size_t checked = 0;
    while (std::getline(manifest, line)) {
        if (line.empty() || line[0] == '#') continue;
        const auto space = line.find(' ');
        ASSERT_NE(space, std::string::npos) << line;
        const std::string file = line.substr(0, space), fragment = line.substr(space + 1);
        const std::string path = (dir / file).string();
        try {
            (void)gguf_file::open(path);
            ADD_FAILURE() << file << " opened";
        } catch (const gguf_error &e) {
            EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << file << ": " << e.what();
        }
        ++checked;
    }
    EXPECT_GE(checked, 20u);
    for (const char *valid : {"valid_small.gguf", "valid_writer.gguf"}) {
        const auto bytes = test::read_file_bytes((dir / valid).string());
        EXPECT_NO_THROW((void)gguf_file::from_memory(bytes.data(), bytes.size(), valid)) << valid;
        EXPECT_FALSE(bytes.empty()) << valid;
    }
}

}  // namespace
}  // namespace weft
