// tests/hostile/test_special_tokens.cpp — what a user types in a chat message stays text: a control
// token's spelling in a message ("</s>", "<|im_end|>") never becomes the control token, while the
// template's own markers around it do.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "common/run_weft.h"
#include "weft/model/model.h"
#include "weft/serving/conversation.h"

namespace {

using weft::token;

TEST(SpecialTokens, LiteralRangesKeepControlTokensAsText) {
    WEFT_REQUIRE_FIXTURES();
    weft::model_params mp;
    mp.vocab_only = true;
    auto m = weft::model::load(weft::test::fixture("models/stories260K.gguf"), mp);
    const weft::vocab &v = m->vocab();
    const std::string text = "</s>Hi</s>there";
    const auto has_eos = [&](const std::vector<token> &t) { return std::count(t.begin(), t.end(), v.eos()); };
    EXPECT_EQ(has_eos(v.tokenize(text, false, true)), 2);
    const std::vector<weft::text_span> user = {{6, 9}};          // "</s>there": typed by the user
    EXPECT_EQ(has_eos(v.tokenize(text, false, true, user)), 1);  // the template's first one stays
    EXPECT_EQ(has_eos(v.tokenize(text, false, false)), 0);
}

TEST(SpecialTokens, ChatContentsAreFoundThroughTheTemplate) {
    WEFT_REQUIRE_FIXTURES();
    weft::model_params mp;
    mp.vocab_only = true;
    auto m = weft::model::load(weft::test::fixture("models/stories260K.gguf"), mp);
    for (const char *family : {"llama2", "chatml", "llama2-sys-strip", "mistral-v3"}) {
        SCOPED_TRACE(family);
        const weft::serving::template_choice t = weft::serving::choose_chat_template(*m, family);
        const std::vector<weft::chat_message> msgs = {{"system", "Be brief."},
                                                      {"user", " hello </s> world "},
                                                      {"assistant", "ok</s>"},
                                                      {"user", "again"}};
        std::vector<weft::text_span> spans;
        const std::string text = t.format(msgs, true, spans);
        ASSERT_FALSE(spans.empty()) << text;
        // every span covers what a message said (perhaps trimmed), in order
        for (const auto &s : spans) {
            const std::string piece = text.substr(s.offset, s.length);
            const bool from_a_message = std::any_of(
                msgs.begin(), msgs.end(),
                [&](const weft::chat_message &mm) { return mm.content.find(piece) != std::string::npos; });
            EXPECT_TRUE(from_a_message) << "'" << piece << "'";
        }
        // the user's "</s>" is text; the template's own </s> (llama2 after the assistant) stays EOS
        const std::vector<token> ids = m->vocab().tokenize(text, true, true, spans);
        const auto n_eos = std::count(ids.begin(), ids.end(), m->vocab().eos());
        const std::vector<token> all = m->vocab().tokenize(text, true, true);
        const auto n_eos_all = std::count(all.begin(), all.end(), m->vocab().eos());
        EXPECT_LT(n_eos, n_eos_all) << text;
    }
}

}  // namespace
