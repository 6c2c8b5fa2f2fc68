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

// A binary PPM (P6) of the image, which stb_image reads.
inline std::string ppm_bytes(const vision::rgb_image &img) {
    std::string s = "P6\n" + std::to_string(img.width) + " " + std::to_string(img.height) + "\n255\n";
    s.append(reinterpret_cast<const char *>(img.pixels.data()), img.pixels.size());
    return s;
}

}  // namespace weft::test
