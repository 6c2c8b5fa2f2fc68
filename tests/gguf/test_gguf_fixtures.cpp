// tests/gguf/test_gguf_fixtures.cpp — every fixture GGUF opens, and all open modes agree byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "common/fixtures.h"
#include "gguf_test_util.h"
#include "weft/gguf/gguf.h"

namespace weft {
namespace {

std::vector<std::string> fixture_ggufs() {
    std::vector<std::string> files;
    for (const char *sub : {"models", "vocab"}) {
        const auto dir = test::fixtures_dir() / sub;
        if (!std::filesystem::is_directory(dir)) continue;
        for (const auto &e : std::filesystem::directory_iterator(dir))
            if (e.path().extension() == ".gguf") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    return files;
}

void expect_same_header(const gguf_file &a, const gguf_file &b) {
    EXPECT_EQ(a.version(), b.version());
    EXPECT_EQ(a.alignment(), b.alignment());
    EXPECT_EQ(a.data_offset(), b.data_offset());
    ASSERT_EQ(a.kvs().size(), b.kvs().size());
    for (size_t i = 0; i < a.kvs().size(); ++i) {
        EXPECT_EQ(a.kvs()[i].key, b.kvs()[i].key);
        EXPECT_EQ(a.kvs()[i].raw, b.kvs()[i].raw);
        EXPECT_EQ(a.kvs()[i].strings, b.kvs()[i].strings);
    }
    ASSERT_EQ(a.tensors().size(), b.tensors().size());
    for (size_t i = 0; i < a.tensors().size(); ++i) {
        EXPECT_EQ(a.tensors()[i].name, b.tensors()[i].name);
        EXPECT_EQ(a.tensors()[i].offset, b.tensors()[i].offset);
        EXPECT_EQ(a.tensors()[i].nbytes, b.tensors()[i].nbytes);
    }
}

TEST(gguf_fixtures, every_fixture_opens_the_same_in_every_mode) {
    WEFT_REQUIRE_FIXTURES();
    const auto files = fixture_ggufs();
    ASSERT_GE(files.size(), 20u) << "expected the models and vocab fixtures in " << test::fixtures_dir();
    for (const auto &path : files) {
        SCOPED_TRACE(path);
        if (test::fixture_has_unimplemented_types(path)) {
            try {
                gguf_file::open(path);
                ADD_FAILURE() << "opened a file with tensor types weft does not implement";
            } catch (const error &e) {
                EXPECT_NE(std::string(e.what()).find("unknown type id"), std::string::npos) << e.what();
            }
            continue;
        }
        std::unique_ptr<gguf_file> mapped, read, header;
        ASSERT_NO_THROW(mapped = gguf_file::open(path));
        gguf_open_options plain;
        plain.use_mmap = false;
        ASSERT_NO_THROW(read = gguf_file::open(path, plain));
        gguf_open_options header_only;
        header_only.load_data = false;
        ASSERT_NO_THROW(header = gguf_file::open(path, header_only));

        EXPECT_TRUE(mapped->version() == 2 || mapped->version() == 3);
        EXPECT_TRUE(mapped->has("general.architecture"));
        EXPECT_EQ(mapped->file_size(), std::filesystem::file_size(path));
        expect_same_header(*mapped, *read);
        expect_same_header(*mapped, *header);
        ASSERT_EQ(mapped->data_size(), read->data_size());
        if (mapped->data_size()) {
            EXPECT_EQ(std::memcmp(mapped->data_base(), read->data_base(), read->data_size()), 0);
        }
        for (const auto &t : mapped->tensors()) {
            EXPECT_EQ(mapped->tensor_data(t), mapped->data_base() + t.offset);
            EXPECT_EQ(
                std::memcmp(mapped->tensor_data(t), read->tensor_data(*read->find_tensor(t.name)), t.nbytes),
                0);
        }
        const auto bytes = test::read_file_bytes(path);
        const auto mem = gguf_file::from_memory(bytes.data(), bytes.size(), path);
        expect_same_header(*mapped, *mem);
    }
}

TEST(gguf_fixtures, model_weights_are_mapped_not_copied) {
    WEFT_REQUIRE_FIXTURES();
    const auto path = test::fixture("models/stories260K.gguf");
    const auto f = gguf_file::open(path);
    const auto *emb = f->find_tensor("token_embd.weight");
    ASSERT_NE(emb, nullptr);
    EXPECT_EQ(emb->type, dtype::f32);
    EXPECT_EQ(emb->ne[0], 64);
    EXPECT_EQ(emb->ne[1], 512);
    // The data section of a mapping sits at the file's data offset from a page-aligned base.
    const auto base = reinterpret_cast<uintptr_t>(f->data_base()) - f->data_offset();
    EXPECT_EQ(base % 4096, 0u);
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_int("llama.embedding_length"), 64);
    const auto *tokens = f->get_string_array("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->size(), 512u);
}

}  // namespace
}  // namespace weft
