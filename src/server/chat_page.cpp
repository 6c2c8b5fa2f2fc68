// src/server/chat_page.cpp — the bytes of the chat page, included by the assembler (.incbin) from
// the path CMake passes in (WEFT_ASSET_PAGE), so no generated source is needed.
#include "server/chat_page.h"

#define WEFT_STRINGIFY2(x) #x
#define WEFT_STRINGIFY(x) WEFT_STRINGIFY2(x)

// The page between a begin and an end symbol, in read-only data; a NUL after it makes it a C
// string as well.
asm(".section .rodata\n"
    ".balign 16\n"
    ".global weft_asset_page_begin\n"
    "weft_asset_page_begin:\n"
    ".incbin \"" WEFT_STRINGIFY(WEFT_ASSET_PAGE) "\"\n"
    ".global weft_asset_page_end\n"
    "weft_asset_page_end:\n"
    ".byte 0\n"
    ".previous\n");

extern "C" const char weft_asset_page_begin[], weft_asset_page_end[];

namespace weft::server {

std::string_view chat_page() {
    return {weft_asset_page_begin, size_t(weft_asset_page_end - weft_asset_page_begin)};
}

}  // namespace weft::server
