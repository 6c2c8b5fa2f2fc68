// src/vision/image.cpp — image decoding with stb_image (limits checked first) and CLIP preprocessing.
#include "weft/vision/image.h"

#include <stb_image.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "weft/core/safe_file.h"

namespace weft::vision {

namespace {

std::string dims_text(int64_t w, int64_t h) {
    return std::to_string(w) + " x " + std::to_string(h);
}

// Keys' cubic convolution kernel with a = -0.5 (Catmull-Rom).
double cubic_weight(double x) {
    constexpr double a = -0.5;
    x = std::fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

// For each output coordinate along one axis: the 4 source indices (clamped) and their weights.
struct axis_taps {
    std::vector<int32_t> index;  // 4 per output coordinate
    std::vector<double> weight;
};

axis_taps make_taps(int32_t n_in, int32_t n_out) {
    axis_taps t;
    t.index.resize(size_t(n_out) * 4);
    t.weight.resize(size_t(n_out) * 4);
    const double scale = double(n_in) / double(n_out);
    for (int32_t o = 0; o < n_out; ++o) {
        const double src = (double(o) + 0.5) * scale - 0.5;
        const double base = std::floor(src);
        for (int k = 0; k < 4; ++k) {
            const double pos = base - 1.0 + double(k);
            t.index[size_t(o) * 4 + size_t(k)] = int32_t(std::clamp(pos, 0.0, double(n_in - 1)));
            t.weight[size_t(o) * 4 + size_t(k)] = cubic_weight(src - pos);
        }
    }
    return t;
}

// stb_image decodes a truncated JPEG or binary PNM without complaint (the missing part blank), so
// those two are checked for their end first: a JPEG's scan data must be followed by its EOI marker
// (FF D9 after the last SOS, FF DA, so an embedded thumbnail's EOI does not count), a P5 / P6 file must
// hold width x height x channels samples after its header.
void check_complete(std::span<const uint8_t> b, const std::string &name) {
    auto truncated = [&](const char *format) {
        return image_error(name + ": the " + std::string(format) + " image is truncated");
    };
    if (b.size() >= 2 && b[0] == 0xFF && b[1] == 0xD8) {
        size_t last_sos = 0;
        for (size_t i = 2; i + 1 < b.size(); ++i)
            if (b[i] == 0xFF && b[i + 1] == 0xDA) last_sos = i;
        bool eoi = false;
        for (size_t i = last_sos; !eoi && i + 1 < b.size(); ++i) eoi = b[i] == 0xFF && b[i + 1] == 0xD9;
        if (last_sos == 0 || !eoi) throw truncated("JPEG");
        return;
    }
    if (b.size() < 2 || b[0] != 'P' || (b[1] != '5' && b[1] != '6')) return;
    // the header: magic, width, height, maxval (comments from # to the end of a line), one whitespace
    size_t at = 2;
    int64_t v[3] = {0, 0, 0};
    for (int64_t &value : v) {
        while (at < b.size() && (std::isspace(b[at]) || b[at] == '#')) {
            const bool comment = b[at] == '#';
            ++at;
            while (comment && at < b.size() && b[at] != '\n') ++at;
        }
        if (at >= b.size() || !std::isdigit(b[at])) return;  // stb's own check names a bad header
        while (at < b.size() && std::isdigit(b[at]) && value < (int64_t(1) << 40))
            value = value * 10 + (b[at++] - '0');
    }
    const int64_t samples = v[0] * v[1] * (b[1] == '6' ? 3 : 1) * (v[2] > 255 ? 2 : 1);
    if (int64_t(b.size()) - int64_t(at) - 1 < samples) throw truncated("PNM");
}

}  // namespace

rgb_image image_decode(std::span<const uint8_t> bytes, const std::string &name, const image_limits &limits) {
    if (bytes.empty()) throw image_error(name + ": the image is empty (0 bytes)");
    if (bytes.size() > limits.max_bytes)
        throw image_error(name + ": the image has " + std::to_string(bytes.size()) +
                          " bytes, more than the " + std::to_string(limits.max_bytes) + " allowed");
    if (bytes.size() > size_t(INT32_MAX)) throw image_error(name + ": the image is too large to decode");
    int w = 0, h = 0, channels = 0;
    if (!stbi_info_from_memory(bytes.data(), int(bytes.size()), &w, &h, &channels))
        throw image_error(name + ": not an image weft can decode (" + std::string(stbi_failure_reason()) +
                          "); PNG, JPEG, BMP, GIF, TGA, PSD, HDR, PIC and PNM are read");
    if (w <= 0 || h <= 0 || w > limits.max_side || h > limits.max_side || int64_t(w) * h > limits.max_pixels)
        throw image_error(name + ": the image is " + dims_text(w, h) + " pixels; at most " +
                          std::to_string(limits.max_side) + " on a side and " +
                          std::to_string(limits.max_pixels) + " pixels are allowed");
    check_complete(bytes, name);
    int dw = 0, dh = 0;
    uint8_t *data = stbi_load_from_memory(bytes.data(), int(bytes.size()), &dw, &dh, &channels, 3);
    if (!data)
        throw image_error(name + ": the image cannot be decoded (" + std::string(stbi_failure_reason()) +
                          "): a corrupt or truncated file?");
    rgb_image img;
    img.width = dw;
    img.height = dh;
    img.pixels.assign(data, data + size_t(dw) * size_t(dh) * 3);
    stbi_image_free(data);
    if (dw != w || dh != h)
        throw image_error(name + ": the header says " + dims_text(w, h) + " pixels, the data " +
                          dims_text(dw, dh));
    return img;
}

rgb_image image_load(const std::string &path, const image_limits &limits) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) throw image_error(path + ": cannot read the image: " + ec.message());
    if (size > limits.max_bytes)
        throw image_error(path + ": the image has " + std::to_string(size) + " bytes, more than the " +
                          std::to_string(limits.max_bytes) + " allowed");
    std::string bytes;
    try {
        bytes = read_input_file(path);
    } catch (const error &e) {
        throw image_error(e.what());
    }
    return image_decode(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()), path,
        limits);
}

rgb_image image_pad_to_square(const rgb_image &img, std::array<uint8_t, 3> fill) {
    const int32_t side = std::max(img.width, img.height);
    rgb_image out;
    out.width = out.height = side;
    out.pixels.resize(size_t(side) * size_t(side) * 3);
    for (size_t i = 0; i < out.pixels.size(); i += 3)
        std::copy(fill.begin(), fill.end(), out.pixels.begin() + std::ptrdiff_t(i));
    const int32_t x0 = (side - img.width) / 2, y0 = (side - img.height) / 2;
    for (int32_t y = 0; y < img.height; ++y)
        std::copy_n(img.pixels.begin() + std::ptrdiff_t(size_t(y) * size_t(img.width) * 3),
                    size_t(img.width) * 3,
                    out.pixels.begin() + std::ptrdiff_t((size_t(y + y0) * size_t(side) + size_t(x0)) * 3));
    return out;
}

rgb_image image_resize_bicubic(const rgb_image &img, int32_t width, int32_t height) {
    if (width == img.width && height == img.height) return img;
    const axis_taps tx = make_taps(img.width, width), ty = make_taps(img.height, height);
    // horizontal pass into doubles [img.height][width][3], then vertical
    std::vector<double> rows(size_t(img.height) * size_t(width) * 3);
    for (int32_t y = 0; y < img.height; ++y)
        for (int32_t x = 0; x < width; ++x)
            for (int c = 0; c < 3; ++c) {
                double sum = 0.0;
                for (int k = 0; k < 4; ++k)
                    sum += tx.weight[size_t(x) * 4 + size_t(k)] *
                           img.at(tx.index[size_t(x) * 4 + size_t(k)], y, c);
                rows[(size_t(y) * size_t(width) + size_t(x)) * 3 + size_t(c)] = sum;
            }
    rgb_image out;
    out.width = width;
    out.height = height;
    out.pixels.resize(size_t(width) * size_t(height) * 3);
    for (int32_t y = 0; y < height; ++y)
        for (int32_t x = 0; x < width; ++x)
            for (int c = 0; c < 3; ++c) {
                double sum = 0.0;
                for (int k = 0; k < 4; ++k)
                    sum +=
                        ty.weight[size_t(y) * 4 + size_t(k)] *
                        rows[(size_t(ty.index[size_t(y) * 4 + size_t(k)]) * size_t(width) + size_t(x)) * 3 +
                             size_t(c)];
                out.pixels[(size_t(y) * size_t(width) + size_t(x)) * 3 + size_t(c)] =
                    uint8_t(std::clamp(std::nearbyint(sum), 0.0, 255.0));
            }
    return out;
}

std::vector<float> image_normalize(const rgb_image &img, const std::array<float, 3> &mean,
                                   const std::array<float, 3> &std) {
    const size_t n = size_t(img.width) * size_t(img.height);
    std::vector<float> out(n * 3);
    for (int c = 0; c < 3; ++c)
        for (size_t i = 0; i < n; ++i)
            out[size_t(c) * n + i] =
                (float(img.pixels[i * 3 + size_t(c)]) / 255.0f - mean[size_t(c)]) / std[size_t(c)];
    return out;
}

}  // namespace weft::vision
