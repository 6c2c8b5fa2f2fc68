// tests/vision/vision_test_util.h — tiny mmproj files, random images and image files for the vision tests.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "runtime/context_test_util.h"
#include "weft/model/synth.h"
#include "weft/vision/clip_synth.h"
#include "weft/vision/image.h"

namespace weft::test {

inline std::string vision_temp_path(const std::string &name) {
    return (std::filesystem::temp_directory_path() /
            ("weft-vision-" + std::to_string(::getpid()) + "-" + name))
        .string();
}

// A tiny mmproj: 28 x 28 images of 7 x 7 patches (16 image tokens), n_embd 32, 4 heads, 3 blocks.
inline vision::clip_synth_spec tiny_clip_spec(int64_t n_output_embd = 48) {
    vision::clip_synth_spec s;
    s.image_size = 28;
    s.patch_size = 7;
    s.n_embd = 32;
    s.n_layer = 3;
    s.n_head = 4;
    s.n_ff = 64;
    s.n_output_embd = n_output_embd;
    return s;
}

// A tiny Llama-shaped text model (the runtime tests' small_spec) of width n_embd, for a projector of
// tiny_clip_spec(n_embd) to feed.
inline synth_spec tiny_text_spec(int64_t n_embd) {
    synth_spec s = small_spec();
    s.n_embd = n_embd;
    return s;
}

inline vision::rgb_image random_image(int32_t w, int32_t h, uint32_t seed) {
    vision::rgb_image img;
    img.width = w;
    img.height = h;
    img.pixels.resize(size_t(w) * size_t(h) * 3);
    std::mt19937 rng(seed);
    for (auto &p : img.pixels) p = uint8_t(rng() & 0xff);
    return img;
}

// The layout tests/reference/ref_clip.py reads: int32 width, int32 height, RGB bytes.
inline void write_raw_image(const vision::rgb_image &img, const std::string &path) {
    std::ofstream f(path, std::ios::binary);
    const int32_t dims[2] = {img.width, img.height};
    f.write(reinterpret_cast<const char *>(dims), sizeof dims);
    f.write(reinterpret_cast<const char *>(img.pixels.data()), std::streamsize(img.pixels.size()));
}

// A 24-bit uncompressed BMP of the image (rows bottom-up, BGR, each padded to 4 bytes).
inline std::string bmp_bytes(const vision::rgb_image &img) {
    const size_t row = (size_t(img.width) * 3 + 3) / 4 * 4;
    auto le32 = [](uint32_t v) {
        return std::string{char(v & 0xFF), char(v >> 8 & 0xFF), char(v >> 16 & 0xFF), char(v >> 24)};
    };
    const uint32_t pixels = uint32_t(row * size_t(img.height));
    std::string s = "BM" + le32(54 + pixels) + le32(0) + le32(54) + le32(40) + le32(uint32_t(img.width)) +
                    le32(uint32_t(img.height)) + std::string("\x01\x00\x18\x00", 4) + le32(0) + le32(pixels) +
                    le32(2835) + le32(2835) + le32(0) + le32(0);
    for (int32_t y = img.height - 1; y >= 0; --y) {
        for (int32_t x = 0; x < img.width; ++x)
            for (int c = 2; c >= 0; --c) s += char(img.at(x, y, c));
        s.append(row - size_t(img.width) * 3, '\0');
    }
    return s;
}

}  // namespace weft::test
