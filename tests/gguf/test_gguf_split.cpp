// tests/gguf/test_gguf_split.cpp — split sets: writing parts, reading a set as one model, merging back,
// and the clear errors for a set that is not whole (missing, foreign, miscounted, duplicated, truncated).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gguf_test_util.h"
#include "weft/gguf/gguf.h"
#include "weft/gguf/gguf_split.h"

namespace weft {
namespace {

using test::read_file_bytes;
using test::temp_dir;

// A small model-like file: some metadata and n_tensors f32 tensors of varied sizes with distinct bytes.
struct source_model {
    std::vector<std::vector<float>> data;
    std::string path;

    source_model(const temp_dir &dir, int n_tensors, const std::string &name = "model.gguf") {
        path = dir.file(name);
        gguf_writer w;
        w.set_string("general.architecture", "llama");
        w.set_string("general.name", "split test");
        w.set_u32("llama.block_count", uint32_t(n_tensors));
        w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
        for (int i = 0; i < n_tensors; ++i) {
            std::vector<float> v(size_t(8 * (i % 3 + 1) + 3));  // sizes not multiples of the alignment
            for (size_t k = 0; k < v.size(); ++k) v[k] = float(i) * 1000.0f + float(k);
            data.push_back(std::move(v));
        }
        for (int i = 0; i < n_tensors; ++i) {
            const int64_t ne[1] = {int64_t(data[size_t(i)].size())};
            w.add_tensor("blk." + std::to_string(i) + ".weight", dtype::f32, ne, data[size_t(i)].data(),
                         data[size_t(i)].size() * sizeof(float));
        }
        w.write(path);
    }
};

std::vector<gguf_split_part> split(const std::string &in, const std::string &prefix,
                                   gguf_split_limits limits) {
    const auto set = gguf_set::open(in);
    auto parts = gguf_plan_split(*set, prefix, limits);
    gguf_write_split(*set, parts);
    return parts;
}

gguf_split_limits by_tensors(int64_t n) {
    gguf_split_limits l;
    l.max_tensors = n;
    return l;
}

// The message of the gguf_error that opening `path` as a set throws ("" when it opens).
std::string open_error(const std::string &path) {
    try {
        gguf_set::open(path);
    } catch (const gguf_error &e) {
        return e.what();
    }
    return "";
}

void expect_contains(const std::string &text, const std::string &part) {
    EXPECT_NE(text.find(part), std::string::npos) << "\"" << part << "\" not in: " << text;
}

TEST(GgufSplit, PartNamesAreTheEstablishedOnes) {
    EXPECT_EQ(gguf_split_path("/m/model", 0, 3), "/m/model-00001-of-00003.gguf");
    EXPECT_EQ(gguf_split_path("x", 11, 12), "x-00012-of-00012.gguf");
    EXPECT_EQ(gguf_split_prefix("/m/model-00002-of-00003.gguf", 1, 3), "/m/model");
    EXPECT_FALSE(gguf_split_prefix("/m/model-00002-of-00003.gguf", 0, 3));
    EXPECT_FALSE(gguf_split_prefix("-00001-of-00003.gguf", 0, 3));  // no prefix at all
    EXPECT_EQ(gguf_parse_split_size("2G"), 2000000000u);
    EXPECT_EQ(gguf_parse_split_size("500M"), 500000000u);
    for (const char *bad : {"2", "2K", "G", "0M", "-1G", "1.5G", "99999999999999999999G"})
        EXPECT_THROW(gguf_parse_split_size(bad), error) << bad;
}

TEST(GgufSplit, SplitSetReadsAsTheWholeModelAndMergesBackByteForByte) {
    temp_dir dir;
    source_model src(dir, 7);
    const auto parts = split(src.path, dir.file("out"), by_tensors(3));
    ASSERT_EQ(parts.size(), 3u);  // 3 + 3 + 1 tensors
    EXPECT_EQ(parts[2].n_tensors, 1u);
    for (const auto &p : parts) {
        ASSERT_TRUE(std::filesystem::exists(p.path)) << p.path;
        EXPECT_EQ(std::filesystem::file_size(p.path), p.file_size) << p.path;
    }
    EXPECT_EQ(parts[1].path, dir.file("out-00002-of-00003.gguf"));

    const auto original = gguf_file::open(src.path);
    const auto set = gguf_set::open(parts[0].path);
    ASSERT_TRUE(set->is_split());
    ASSERT_EQ(set->n_parts(), 3u);
    ASSERT_EQ(set->tensors().size(), original->tensors().size());
    for (size_t i = 0; i < original->tensors().size(); ++i) {
        const gguf_tensor_info &a = original->tensors()[i];
        const gguf_tensor_info *b = set->find_tensor(a.name);
        ASSERT_NE(b, nullptr) << a.name;
        EXPECT_EQ(b->part, uint32_t(i / 3)) << a.name;
        ASSERT_EQ(a.nbytes, b->nbytes);
        EXPECT_EQ(0, std::memcmp(original->tensor_data(a), set->tensor_data(*b), a.nbytes)) << a.name;
    }
    // the first part has all the metadata and the split keys; the others only the split keys
    const gguf_file &first = set->metadata();
    EXPECT_EQ(first.get_string("general.name"), "split test");
    EXPECT_EQ(first.find("split.count")->type, gguf_type::u16);
    EXPECT_EQ(first.find("split.no")->type, gguf_type::u16);
    EXPECT_EQ(first.find("split.tensors.count")->type, gguf_type::i32);
    EXPECT_EQ(first.get_int("split.tensors.count"), 7);
    EXPECT_EQ(set->part(2).kvs().size(), 3u);
    EXPECT_EQ(set->part(2).get_int("split.no"), 2);

    // header-only (a vocabulary-only load) sees the same set
    gguf_open_options header_only;
    header_only.load_data = false;
    EXPECT_EQ(gguf_set::open(parts[0].path, header_only)->tensors().size(), 7u);

    const std::string merged = dir.file("merged.gguf");
    gguf_write_merged(*set, merged);
    EXPECT_EQ(read_file_bytes(merged), read_file_bytes(src.path));

    // a later part given in place of the first names the first
    const std::string later = open_error(parts[1].path);
    expect_contains(later, "part 2 of 3");
    expect_contains(later, parts[0].path);
}

TEST(GgufSplit, SizeLimitGroupsTensorsAndGivesAnOversizedTensorAPartOfItsOwn) {
    temp_dir dir;
    source_model src(dir, 6);  // tensor bytes 44, 76, 108, 44, 76, 108: padded to 64, 96, 128 ...
    const auto set = gguf_set::open(src.path);
    gguf_split_limits limits;
    limits.max_bytes = 160;
    auto parts = gguf_plan_split(*set, dir.file("s"), limits);
    std::vector<size_t> counts;
    for (const auto &p : parts) counts.push_back(p.n_tensors);
    EXPECT_EQ(counts, (std::vector<size_t>{2, 1, 2, 1}));  // 64+96, 128, 64+96, 128
    limits.max_bytes = 100;                                // the 128-byte tensors exceed it: each alone
    parts = gguf_plan_split(*set, dir.file("s"), limits);
    counts.clear();
    for (const auto &p : parts) counts.push_back(p.n_tensors);
    EXPECT_EQ(counts, (std::vector<size_t>{1, 1, 1, 1, 1, 1}));
    limits.max_bytes = 1000;  // everything fits: one part, still named as a set of one
    parts = gguf_plan_split(*set, dir.file("s"), limits);
    ASSERT_EQ(parts.size(), 1u);
    EXPECT_EQ(parts[0].path, dir.file("s-00001-of-00001.gguf"));
}

TEST(GgufSplit, RefusesToOverwriteAnInputAndLeavesNothingBehindOnFailure) {
    temp_dir dir;
    source_model src(dir, 4, "m-00001-of-00002.gguf");
    const auto set = gguf_set::open(src.path);
    // the first output would be the input itself (the same name)
    auto parts = gguf_plan_split(*set, dir.file("m"), by_tensors(2));
    ASSERT_EQ(parts[0].path, src.path);
    EXPECT_THROW(gguf_write_split(*set, parts), error);
    // ... or a link to it (compared by inode)
    std::filesystem::create_symlink(src.path, dir.file("link-00001-of-00002.gguf"));
    parts = gguf_plan_split(*set, dir.file("link"), by_tensors(2));
    EXPECT_THROW(gguf_write_split(*set, parts), error);
    EXPECT_FALSE(std::filesystem::exists(dir.file("link-00002-of-00002.gguf")));

    // the second part cannot be written (a directory is in its place): the first is not left behind
    parts = gguf_plan_split(*set, dir.file("fail"), by_tensors(2));
    std::filesystem::create_directory(parts[1].path);
    EXPECT_THROW(gguf_write_split(*set, parts), error);
    EXPECT_FALSE(std::filesystem::exists(parts[0].path));
    for (const auto &e : std::filesystem::directory_iterator(dir.path()))
        EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();

    // merging onto one of the parts is refused
    const auto good = split(src.path, dir.file("good"), by_tensors(2));
    const auto good_set = gguf_set::open(good[0].path);
    EXPECT_THROW(gguf_write_merged(*good_set, good[1].path), error);
    // and a file that is not a set has nothing to merge
    const auto plain = gguf_set::open(src.path);
    EXPECT_THROW(gguf_write_merged(*plain, dir.file("plain.gguf")), error);
}

// Writes a part by hand: split keys as given (count/no/tensors), some tensors of the source.
void write_part(const std::string &path, const source_model &src, uint16_t no, uint16_t count, int32_t total,
                std::vector<int> tensors, bool with_metadata) {
    gguf_writer w;
    if (with_metadata) w.set_string("general.architecture", "llama");
    w.set_u16("split.no", no);
    w.set_u16("split.count", count);
    w.set_i32("split.tensors.count", total);
    for (int i : tensors) {
        const auto &v = src.data[size_t(i)];
        const int64_t ne[1] = {int64_t(v.size())};
        w.add_tensor("blk." + std::to_string(i) + ".weight", dtype::f32, ne, v.data(),
                     v.size() * sizeof(float));
    }
    w.write(path);
}

TEST(GgufSplit, AnIncompleteOrForeignSetIsAClearErrorNamingThePart) {
    temp_dir dir;
    source_model src(dir, 6);
    const std::string p1 = dir.file("h-00001-of-00003.gguf"), p2 = dir.file("h-00002-of-00003.gguf"),
                      p3 = dir.file("h-00003-of-00003.gguf");
    auto good_set = [&] {
        write_part(p1, src, 0, 3, 6, {0, 1}, true);
        write_part(p2, src, 1, 3, 6, {2, 3}, false);
        write_part(p3, src, 2, 3, 6, {4, 5}, false);
    };
    good_set();
    ASSERT_EQ(open_error(p1), "");

    std::filesystem::remove(p3);  // a missing part
    std::string e = open_error(p1);
    expect_contains(e, p3);
    expect_contains(e, "missing");
    expect_contains(e, "part 3 of 3");

    good_set();  // a part that says it belongs to a set of another size
    write_part(p2, src, 1, 4, 6, {2, 3}, false);
    e = open_error(p1);
    expect_contains(e, p2);
    expect_contains(e, "split.count is 4 but the first part says 3");

    good_set();  // a part of another set of the same size: another tensor count
    write_part(p3, src, 2, 3, 9, {4, 5}, false);
    e = open_error(p1);
    expect_contains(e, p3);
    expect_contains(e, "split.tensors.count is 9");

    good_set();  // a part in the wrong place
    write_part(p2, src, 2, 3, 6, {2, 3}, false);
    e = open_error(p1);
    expect_contains(e, p2);
    expect_contains(e, "split.no is 2, expected 1");

    good_set();  // a tensor in two parts (parts of two sets split at other places)
    write_part(p3, src, 2, 3, 6, {3, 4, 5}, false);
    e = open_error(p1);
    expect_contains(e, p3);
    expect_contains(e, "'blk.3.weight' is also in " + p2);

    good_set();  // the first part says more tensors than the parts hold
    write_part(p1, src, 0, 3, 7, {0, 1}, true);
    write_part(p2, src, 1, 3, 7, {2, 3}, false);
    write_part(p3, src, 2, 3, 7, {4, 5}, false);
    e = open_error(p1);
    expect_contains(e, p1);
    expect_contains(e, "says the set holds 7 tensors, its 3 parts hold 6");

    good_set();  // the first part's split.count is wrong: its name does not say that many parts
    write_part(p1, src, 0, 2, 6, {0, 1}, true);
    e = open_error(p1);
    expect_contains(e, p1);
    expect_contains(e, "not named as one");

    good_set();  // a truncated part
    std::filesystem::resize_file(p2, std::filesystem::file_size(p2) - 40);
    e = open_error(p1);
    expect_contains(e, p2);
    expect_contains(e, "truncated");
    expect_contains(e, "part 2 of 3");

    good_set();  // a part that is not a regular file
    std::filesystem::remove(p2);
    std::filesystem::create_directory(p2);
    e = open_error(p1);
    expect_contains(e, p2);
    expect_contains(e, "not a regular file");
}

}  // namespace
}  // namespace weft
