// tools/weft/assets.cpp — the bytes of the built-in files, included by the assembler (.incbin) from
// the paths CMake passes in (WEFT_ASSET_MODEL, WEFT_ASSET_PAGE), so no generated source is needed.
#include "weft/assets.h"

#define WEFT_STRINGIFY2(x) #x
#define WEFT_STRINGIFY(x) WEFT_STRINGIFY2(x)

// Each file between a begin and an end symbol, in read-only data; a NUL after the page makes it a
// C string as well.
asm(".section .rodata\n"
    ".balign 64\n"
    ".global weft_asset_model_begin\n"
    "weft_asset_model_begin:\n"
    ".incbin \"" WEFT_STRINGIFY(WEFT_ASSET_MODEL) "\"\n"
    ".global weft_asset_model_end\n"
    "weft_asset_model_end:\n"
    ".balign 16\n"
    ".global weft_asset_page_begin\n"
    "weft_asset_page_begin:\n"
    ".incbin \"" WEFT_STRINGIFY(WEFT_ASSET_PAGE) "\"\n"
    ".global weft_asset_page_end\n"
    "weft_asset_page_end:\n"
    ".byte 0\n"
    ".previous\n");

extern "C" const uint8_t weft_asset_model_begin[], weft_asset_model_end[];
extern "C" const char weft_asset_page_begin[], weft_asset_page_end[];

namespace weft::tool {

std::span<const uint8_t> default_model() {
    return {weft_asset_model_begin, size_t(weft_asset_model_end - weft_asset_model_begin)};
}

std::string_view chat_page() {
    return {weft_asset_page_begin, size_t(weft_asset_page_end - weft_asset_page_begin)};
}

}  // namespace weft::tool
