// tests/gguf/test_gguf_roundtrip.cpp — writer/reader round trips, open modes, getters, writer failures.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>

#include "gguf_test_util.h"
#include "weft/gguf/gguf.h"

namespace weft {
namespace {

using test::temp_dir;

struct tensor_spec {
    std::string name;
    dtype type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
};

std::vector<tensor_spec> sample_tensors() {
    std::mt19937 rng(1234);
    auto make = [&](std::string name, dtype t, std::vector<int64_t> ne) {
        int64_t rows = 1;
        for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
        std::vector<uint8_t> b(row_size(t, ne[0]) * size_t(rows));
        for (auto &x : b) x = uint8_t(rng());
        return tensor_spec{std::move(name), t, std::move(ne), std::move(b)};
    };
    return {
        make("token_embd.weight", dtype::f32, {8, 5}),
        make("blk.0.attn_norm.weight", dtype::f32, {8}),
        make("blk.0.attn_q.weight", dtype::q4_0, {64, 3}),
        make("blk.0.ffn_up.weight", dtype::q8_0, {32, 2, 3}),
        make("blk.0.ffn_down.weight", dtype::q4_k, {256, 2}),
        make("four_dims", dtype::f16, {3, 2, 2, 2}),
        make("ids", dtype::i32, {7}),
        make("odd_bytes", dtype::i8, {5}),  // forces padding before the next tensor
        make("last", dtype::bf16, {3, 3}),
    };
}

// Sets one key of every value type, arrays of every element type, empty and odd strings.
void set_all_value_types(gguf_writer &w) {
    w.set_u8("t.u8", 200);
    w.set_i8("t.i8", -100);
    w.set_u16("t.u16", 60000);
    w.set_i16("t.i16", -30000);
    w.set_u32("t.u32", 4000000000u);
    w.set_i32("t.i32", -2000000000);
    w.set_u64("t.u64", std::numeric_limits<uint64_t>::max());
    w.set_i64("t.i64", std::numeric_limits<int64_t>::min());
    w.set_f32("t.f32", 3.25f);
    w.set_f64("t.f64", -1e300);
    w.set_bool("t.bool", true);
    w.set_string("t.string", std::string("with\0nul and ü", 15));
    w.set_string("t.empty", "");
    const uint8_t u8s[] = {1, 2, 255};
    const int8_t i8s[] = {-1, 0, 1};
    const uint16_t u16s[] = {1, 65535};
    const int16_t i16s[] = {-32768, 32767};
    const uint32_t u32s[] = {7, 8, 9, 10};
    const int32_t i32s[] = {-5, 5};
    const uint64_t u64s[] = {1ull << 63};
    const int64_t i64s[] = {-(1ll << 40), 1ll << 40};
    const float f32s[] = {0.5f, -0.25f, 1e30f};
    const double f64s[] = {1.0 / 3.0};
    const uint8_t bools[] = {1, 0, 1};
    w.set_array("a.u8", gguf_type::u8, u8s, 3);
    w.set_array("a.i8", gguf_type::i8, i8s, 3);
    w.set_array("a.u16", gguf_type::u16, u16s, 2);
    w.set_array("a.i16", gguf_type::i16, i16s, 2);
    w.set_array("a.u32", gguf_type::u32, u32s, 4);
    w.set_array("a.i32", gguf_type::i32, i32s, 2);
    w.set_array("a.u64", gguf_type::u64, u64s, 1);
    w.set_array("a.i64", gguf_type::i64, i64s, 2);
    w.set_array("a.f32", gguf_type::f32, f32s, 3);
    w.set_array("a.f64", gguf_type::f64, f64s, 1);
    w.set_array("a.bool", gguf_type::boolean, bools, 3);
    w.set_array("a.empty", gguf_type::f32, nullptr, 0);
    w.set_string_array("a.strings", {"a", "", "longer string", std::string(1000, 'x')});
    w.set_string_array("a.no_strings", {});
}

void add_tensors(gguf_writer &w, const std::vector<tensor_spec> &ts) {
    for (const auto &t : ts) w.add_tensor(t.name, t.type, t.ne, t.bytes.data(), t.bytes.size());
}

void expect_same_kvs(const gguf_file &a, const gguf_file &b) {
    ASSERT_EQ(a.kvs().size(), b.kvs().size());
    for (size_t i = 0; i < a.kvs().size(); ++i) {
        const auto &x = a.kvs()[i];
        const auto &y = b.kvs()[i];
        EXPECT_EQ(x.key, y.key);
        EXPECT_EQ(x.type, y.type) << x.key;
        EXPECT_EQ(x.element_type(), y.element_type()) << x.key;
        EXPECT_EQ(x.n, y.n) << x.key;
        EXPECT_EQ(x.raw, y.raw) << x.key;
        EXPECT_EQ(x.strings, y.strings) << x.key;
    }
}

void expect_tensors(const gguf_file &f, const std::vector<tensor_spec> &ts, bool with_data) {
    ASSERT_EQ(f.tensors().size(), ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
        const auto &info = f.tensors()[i];
        EXPECT_EQ(info.name, ts[i].name);
        EXPECT_EQ(info.type, ts[i].type) << info.name;
        ASSERT_EQ(info.n_dims, ts[i].ne.size()) << info.name;
        for (size_t d = 0; d < 4; ++d)
            EXPECT_EQ(info.ne[d], d < ts[i].ne.size() ? ts[i].ne[d] : 1) << info.name;
        EXPECT_EQ(info.nbytes, ts[i].bytes.size()) << info.name;
        EXPECT_EQ(info.offset % f.alignment(), 0u) << info.name;
        EXPECT_EQ(f.find_tensor(ts[i].name), &info);
        const uint8_t *data = f.tensor_data(info);
        if (!with_data) {
            EXPECT_EQ(data, nullptr);
            continue;
        }
        ASSERT_NE(data, nullptr);
        EXPECT_EQ(std::memcmp(data, ts[i].bytes.data(), info.nbytes), 0) << info.name;
    }
}

class gguf_roundtrip : public ::testing::TestWithParam<size_t> {};

TEST_P(gguf_roundtrip, every_value_type_and_tensor_in_every_read_mode) {
    const size_t alignment = GetParam();
    temp_dir dir;
    const std::string path = dir.file("model.gguf");
    const auto ts = sample_tensors();
    gguf_writer w;
    set_all_value_types(w);
    w.set_alignment(alignment);
    add_tensors(w, ts);
    w.write(path);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));

    const auto mapped = gguf_file::open(path);
    EXPECT_EQ(mapped->version(), 3u);
    EXPECT_EQ(mapped->alignment(), alignment);
    EXPECT_EQ(mapped->data_offset() % alignment, 0u);
    EXPECT_EQ(mapped->file_size(), std::filesystem::file_size(path));
    EXPECT_EQ(mapped->has("general.alignment"), alignment != 32);
    expect_tensors(*mapped, ts, true);

    gguf_open_options plain;
    plain.use_mmap = false;
    const auto read = gguf_file::open(path, plain);
    expect_same_kvs(*mapped, *read);
    expect_tensors(*read, ts, true);
    ASSERT_EQ(read->data_size(), mapped->data_size());
    EXPECT_EQ(std::memcmp(read->data_base(), mapped->data_base(), read->data_size()), 0);

    gguf_open_options header_only;
    header_only.load_data = false;
    const auto header = gguf_file::open(path, header_only);
    expect_same_kvs(*mapped, *header);
    expect_tensors(*header, ts, false);
    EXPECT_EQ(header->data_base(), nullptr);
    EXPECT_EQ(header->data_size(), 0u);
    EXPECT_EQ(header->data_offset(), mapped->data_offset());

    const auto bytes = test::read_file_bytes(path);
    const auto mem = gguf_file::from_memory(bytes.data(), bytes.size(), "mem.gguf");
    expect_same_kvs(*mapped, *mem);
    expect_tensors(*mem, ts, true);

    // the decoded values
    const gguf_file &f = *mapped;
    EXPECT_EQ(f.get_uint("t.u8"), 200u);
    EXPECT_EQ(f.get_int("t.i8"), -100);
    EXPECT_EQ(f.get_int("t.u16"), 60000);
    EXPECT_EQ(f.get_int("t.i16"), -30000);
    EXPECT_EQ(f.get_uint("t.u32"), 4000000000u);
    EXPECT_EQ(f.get_int("t.i32"), -2000000000);
    EXPECT_EQ(f.get_uint("t.u64"), std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(f.get_int("t.i64"), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(f.get_float("t.f32"), 3.25);
    EXPECT_EQ(f.get_float("t.f64"), -1e300);
    EXPECT_EQ(f.get_bool("t.bool"), true);
    EXPECT_EQ(f.get_string("t.string"), std::string("with\0nul and ü", 15));
    EXPECT_EQ(f.get_string("t.empty"), "");
    EXPECT_EQ(f.get_int_array("a.u8"), (std::vector<int64_t>{1, 2, 255}));
    EXPECT_EQ(f.get_int_array("a.i8"), (std::vector<int64_t>{-1, 0, 1}));
    EXPECT_EQ(f.get_int_array("a.u16"), (std::vector<int64_t>{1, 65535}));
    EXPECT_EQ(f.get_int_array("a.i16"), (std::vector<int64_t>{-32768, 32767}));
    EXPECT_EQ(f.get_int_array("a.u32"), (std::vector<int64_t>{7, 8, 9, 10}));
    EXPECT_EQ(f.get_int_array("a.i32"), (std::vector<int64_t>{-5, 5}));
    EXPECT_EQ(f.get_int_array("a.i64"), (std::vector<int64_t>{-(1ll << 40), 1ll << 40}));
    EXPECT_EQ(f.get_float_array("a.f32"), (std::vector<float>{0.5f, -0.25f, 1e30f}));
    EXPECT_EQ(f.get_float_array("a.f64"), (std::vector<float>{float(1.0 / 3.0)}));
    EXPECT_EQ(f.get_float_array("a.i32"), (std::vector<float>{-5.f, 5.f}));
    EXPECT_EQ(f.get_float_array("a.empty"), (std::vector<float>{}));
    const auto *strings = f.get_string_array("a.strings");
    ASSERT_NE(strings, nullptr);
    EXPECT_EQ(*strings, (std::vector<std::string>{"a", "", "longer string", std::string(1000, 'x')}));
    ASSERT_NE(f.get_string_array("a.no_strings"), nullptr);
    EXPECT_TRUE(f.get_string_array("a.no_strings")->empty());
    const gguf_kv *bools = f.find("a.bool");
    ASSERT_NE(bools, nullptr);
    EXPECT_EQ(bools->element_type(), gguf_type::boolean);
    EXPECT_EQ(bools->raw, (std::vector<uint8_t>{1, 0, 1}));
}

INSTANTIATE_TEST_SUITE_P(alignments, gguf_roundtrip,
                         ::testing::Values(size_t(32), size_t(1), size_t(64), size_t(4096)));

TEST(gguf_roundtrip, writing_a_read_file_back_gives_the_same_bytes) {
    temp_dir dir;
    const auto ts = sample_tensors();
    gguf_writer w;
    set_all_value_types(w);
    add_tensors(w, ts);
    w.write(dir.file("a.gguf"));

    const auto a = gguf_file::open(dir.file("a.gguf"));
    gguf_writer copy;
    for (const auto &kv : a->kvs()) copy.set_kv(kv);
    for (const auto &t : a->tensors())
        copy.add_tensor(t.name, t.type, std::span<const int64_t>(t.ne, t.n_dims), a->tensor_data(t),
                        t.nbytes);
    copy.write(dir.file("b.gguf"));
    EXPECT_EQ(test::read_file_bytes(dir.file("a.gguf")), test::read_file_bytes(dir.file("b.gguf")));
}

TEST(gguf_roundtrip, fill_tensors_equal_data_tensors) {
    temp_dir dir;
    const auto ts = sample_tensors();
    gguf_writer direct, filled;
    add_tensors(direct, ts);
    for (const auto &t : ts)
        filled.add_tensor_fill(t.name, t.type, t.ne, [&t](uint8_t *dst, size_t nbytes) {
            ASSERT_EQ(nbytes, t.bytes.size());
            std::memcpy(dst, t.bytes.data(), nbytes);
        });
    direct.write(dir.file("direct.gguf"));
    filled.write(dir.file("filled.gguf"));
    EXPECT_EQ(test::read_file_bytes(dir.file("direct.gguf")), test::read_file_bytes(dir.file("filled.gguf")));
}

TEST(gguf_roundtrip, setting_a_key_again_replaces_it_and_remove_drops_it) {
    temp_dir dir;
    gguf_writer w;
    w.set_u32("a", 1);
    w.set_string("b", "x");
    w.set_string("a", "now a string");
    w.remove("b");
    w.write(dir.file("m.gguf"));
    const auto f = gguf_file::open(dir.file("m.gguf"));
    ASSERT_EQ(f->kvs().size(), 1u);
    EXPECT_EQ(f->get_string("a"), "now a string");
    EXPECT_FALSE(f->has("b"));
    EXPECT_TRUE(f->tensors().empty());
}

TEST(gguf_roundtrip, version_2_files_are_read) {
    temp_dir dir;
    gguf_writer w;
    w.set_string("general.architecture", "llama");
    const auto ts = sample_tensors();
    add_tensors(w, ts);
    w.write(dir.file("v3.gguf"));
    auto bytes = test::read_file_bytes(dir.file("v3.gguf"));
    const uint32_t v2 = 2;
    std::memcpy(bytes.data() + 4, &v2, 4);  // v2 and v3 share the layout (v3 only adds big-endian files)
    const auto f = gguf_file::from_memory(bytes.data(), bytes.size(), "v2.gguf");
    EXPECT_EQ(f->version(), 2u);
    expect_tensors(*f, ts, true);
}

// --- typed getters

std::unique_ptr<gguf_file> getter_file(const temp_dir &dir) {
    gguf_writer w;
    w.set_u64("big", std::numeric_limits<uint64_t>::max());
    w.set_i32("negative", -3);
    w.set_string("name", "llama");
    w.set_f32("eps", 1e-5f);
    w.set_u32("layers", 32);
    const int32_t per_layer[] = {4, 8};
    w.set_array("per_layer", gguf_type::i32, per_layer, 2);
    w.set_string_array("tokens", {"a", "b"});
    w.write(dir.file("g.gguf"));
    return gguf_file::open(dir.file("g.gguf"));
}

std::string message_of(const std::function<void()> &fn) {
    try {
        fn();
    } catch (const gguf_error &e) {
        return e.what();
    }
    return "(no gguf_error)";
}

TEST(gguf_getters, absent_keys_give_nothing) {
    temp_dir dir;
    const auto f = getter_file(dir);
    EXPECT_FALSE(f->get_int("missing").has_value());
    EXPECT_FALSE(f->get_uint("missing").has_value());
    EXPECT_FALSE(f->get_float("missing").has_value());
    EXPECT_FALSE(f->get_bool("missing").has_value());
    EXPECT_FALSE(f->get_string("missing").has_value());
    EXPECT_FALSE(f->get_int_array("missing").has_value());
    EXPECT_FALSE(f->get_float_array("missing").has_value());
    EXPECT_EQ(f->get_string_array("missing"), nullptr);
    EXPECT_EQ(f->find_tensor("missing"), nullptr);
}

TEST(gguf_getters, conversions_that_fit_are_made) {
    temp_dir dir;
    const auto f = getter_file(dir);
    EXPECT_EQ(f->get_int("layers"), 32);
    EXPECT_EQ(f->get_uint("layers"), 32u);
    EXPECT_EQ(f->get_float("layers"), 32.0);
    EXPECT_EQ(f->get_int("negative"), -3);
    EXPECT_FLOAT_EQ(float(*f->get_float("eps")), 1e-5f);
    EXPECT_EQ(f->get_int_array("layers"), (std::vector<int64_t>{32}));  // a scalar as an array of one
    EXPECT_EQ(f->get_float_array("eps"), (std::vector<float>{1e-5f}));
    EXPECT_EQ(f->get_int_array("per_layer"), (std::vector<int64_t>{4, 8}));
}

TEST(gguf_getters, mismatches_name_the_key_and_both_types) {
    temp_dir dir;
    const auto f = getter_file(dir);
    const std::string m1 = message_of([&] { (void)f->get_int("name"); });
    EXPECT_NE(m1.find("g.gguf"), std::string::npos) << m1;
    EXPECT_NE(m1.find("'name'"), std::string::npos) << m1;
    EXPECT_NE(m1.find("string"), std::string::npos) << m1;
    EXPECT_NE(m1.find("integer"), std::string::npos) << m1;

    const std::string m2 = message_of([&] { (void)f->get_string("layers"); });
    EXPECT_NE(m2.find("'layers' has type u32, wanted string"), std::string::npos) << m2;
    const std::string m3 = message_of([&] { (void)f->get_string_array("per_layer"); });
    EXPECT_NE(m3.find("array of i32"), std::string::npos) << m3;
    const std::string m4 = message_of([&] { (void)f->get_bool("layers"); });
    EXPECT_NE(m4.find("wanted bool"), std::string::npos) << m4;
    const std::string m5 = message_of([&] { (void)f->get_float("tokens"); });
    EXPECT_NE(m5.find("array of string"), std::string::npos) << m5;
    const std::string m6 = message_of([&] { (void)f->get_int("per_layer"); });
    EXPECT_NE(m6.find("'per_layer'"), std::string::npos) << m6;
    const std::string m7 = message_of([&] { (void)f->get_int("big"); });
    EXPECT_NE(m7.find("does not fit"), std::string::npos) << m7;
    const std::string m8 = message_of([&] { (void)f->get_uint("negative"); });
    EXPECT_NE(m8.find("negative"), std::string::npos) << m8;
    EXPECT_EQ(f->get_uint("big"), std::numeric_limits<uint64_t>::max());
}

// --- writer failures

TEST(gguf_writer_errors, bad_tensors_are_refused_with_their_name) {
    gguf_writer w;
    const float data[64] = {};
    w.add_tensor("a", dtype::f32, std::vector<int64_t>{4}, data, 16);
    EXPECT_NE(message_of([&] {
                  w.add_tensor("a", dtype::f32, std::vector<int64_t>{4}, data, 16);
              }).find("duplicate tensor 'a'"),
              std::string::npos);
    EXPECT_NE(
        message_of([&] { w.add_tensor("b", dtype::f32, std::vector<int64_t>{4}, data, 12); }).find("need 16"),
        std::string::npos);
    EXPECT_NE(message_of([&] {
                  w.add_tensor("c", dtype::q4_0, std::vector<int64_t>{33}, data, 18);
              }).find("block size"),
              std::string::npos);
    EXPECT_NE(message_of([&] {
                  w.add_tensor("d", dtype::f32, std::vector<int64_t>{1, 1, 1, 1, 1}, data, 4);
              }).find("5 dimensions"),
              std::string::npos);
    EXPECT_NE(message_of([&] {
                  w.add_tensor("e", dtype::f32, std::vector<int64_t>{0}, data, 0);
              }).find("not positive"),
              std::string::npos);
    EXPECT_NE(message_of([&] {
                  w.add_tensor("f", dtype(4), std::vector<int64_t>{4}, data, 16);
              }).find("unknown type"),
              std::string::npos);
    EXPECT_NE(message_of([&] { w.set_alignment(48); }).find("power of two"), std::string::npos);
    EXPECT_NE(message_of([&] { w.set_alignment(0); }).find("power of two"), std::string::npos);
    EXPECT_NE(message_of([&] { w.set_array("s", gguf_type::string, data, 1); }).find("numeric or bool"),
              std::string::npos);
    // after the refusals the writer still holds exactly the one good tensor
    temp_dir dir;
    w.write(dir.file("ok.gguf"));
    EXPECT_EQ(gguf_file::open(dir.file("ok.gguf"))->tensors().size(), 1u);
}

TEST(gguf_writer_errors, a_failed_write_leaves_no_file_and_keeps_the_old_one) {
    temp_dir dir;
    const std::string path = dir.file("out.gguf");
    test::write_file_bytes(path, {'o', 'l', 'd'});

    gguf_writer w;
    w.set_string("general.name", "x");
    const float data[4] = {1, 2, 3, 4};
    w.add_tensor("first", dtype::f32, std::vector<int64_t>{4}, data, sizeof data);
    w.add_tensor_fill("second", dtype::f32, std::vector<int64_t>{4},
                      [](uint8_t *, size_t) { throw gguf_error("conversion failed"); });
    EXPECT_THROW(w.write(path), gguf_error);
    EXPECT_EQ(test::read_file_bytes(path), (std::vector<uint8_t>{'o', 'l', 'd'}));
    size_t entries = 0;
    for (const auto &e : std::filesystem::directory_iterator(dir.path())) {
        (void)e;
        ++entries;
    }
    EXPECT_EQ(entries, 1u) << "a temporary file was left behind";

    gguf_writer nowhere;
    const std::string msg = message_of([&] { nowhere.write(dir.file("missing-dir/x.gguf")); });
    EXPECT_NE(msg.find("missing-dir/x.gguf"), std::string::npos) << msg;
    EXPECT_FALSE(std::filesystem::exists(dir.path() / "missing-dir"));
}

TEST(gguf_writer_errors, an_inconsistent_alignment_key_is_refused) {
    temp_dir dir;
    gguf_writer w;
    w.set_u32("general.alignment", 24);
    EXPECT_NE(message_of([&] { w.write(dir.file("a.gguf")); }).find("power of two"), std::string::npos);
    gguf_writer w2;
    w2.set_string("general.alignment", "32");
    EXPECT_NE(message_of([&] { w2.write(dir.file("a.gguf")); }).find("expected u32"), std::string::npos);
    EXPECT_FALSE(std::filesystem::exists(dir.file("a.gguf")));
}

TEST(gguf_file_errors, open_names_the_path) {
    const std::string msg = message_of([] { (void)gguf_file::open("/nonexistent/dir/model.gguf"); });
    EXPECT_NE(msg.find("/nonexistent/dir/model.gguf"), std::string::npos) << msg;
    temp_dir dir;
    const std::string d = message_of([&] { (void)gguf_file::open(dir.path().string()); });
    EXPECT_NE(d.find("not a regular file"), std::string::npos) << d;
}

}  // namespace
}  // namespace weft
