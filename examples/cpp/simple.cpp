// examples/cpp/simple.cpp — simple.c in C++: the C API behind owning handles and exceptions.
//   simple-cpp MODEL PROMPT N   prints what `weft run -m MODEL -p PROMPT -n N --temp 0
//                               --repeat-penalty 1.0` prints on stdout; a failure: stderr, exit 1
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <weft.h>

namespace {

// Throws the thread's last weft error when a call failed.
void check(weft_status status) {
    if (status != WEFT_OK) throw std::runtime_error(weft_last_error());
}

struct model_deleter {
    void operator()(weft_model *m) const { weft_model_free(m); }
};
struct session_deleter {
    void operator()(weft_session *s) const { weft_session_free(s); }
};
using model_ptr = std::unique_ptr<weft_model, model_deleter>;
using session_ptr = std::unique_ptr<weft_session, session_deleter>;

model_ptr load_model(const std::string &path) {
    weft_model_params params;
    weft_model_params_init(&params);
    weft_model *m = nullptr;
    check(weft_model_load(path.c_str(), &params, &m));
    return model_ptr(m);
}

std::vector<weft_token> tokenize(const weft_model *m, const std::string &text) {
    size_t n = 0;
    const weft_status counted = weft_tokenize(m, text.data(), text.size(), true, true, nullptr, 0, &n);
    if (counted != WEFT_ERR_BUFFER_TOO_SMALL) check(counted);
    std::vector<weft_token> tokens(n);
    check(weft_tokenize(m, text.data(), text.size(), true, true, tokens.data(), tokens.size(), &n));
    return tokens;
}

// Generates with a C++ callable as the stream callback.
template <class OnText>
weft_generate_result generate(weft_session *s, const std::vector<weft_token> &prompt,
                              const weft_generate_params &p, OnText on_text) {
    weft_generate_result result;
    auto trampoline = [](const char *text, size_t length, const weft_token *, size_t, void *user_data) {
        return (*static_cast<OnText *>(user_data))(std::string(text, length));
    };
    check(weft_generate(s, prompt.data(), prompt.size(), &p, trampoline, &on_text, &result));
    return result;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s MODEL PROMPT N\n", argv[0]);
        return 2;
    }
    try {
        const model_ptr model = load_model(argv[1]);
        weft_session_params sp;
        weft_session_params_init(&sp);
        weft_session *raw = nullptr;
        check(weft_session_create(model.get(), &sp, &raw));
        const session_ptr session(raw);

        std::vector<weft_token> prompt = tokenize(model.get(), argv[2]);
        if (prompt.empty()) prompt.push_back(weft_model_token_bos(model.get()));
        weft_generate_params gp;
        weft_generate_params_init(&gp);
        gp.max_tokens = std::stoi(argv[3]);
        gp.sampling.temperature = 0.0f;
        gp.sampling.repeat_penalty = 1.0f;
        generate(session.get(), prompt, gp, [](const std::string &text) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
            return true;
        });
        std::fputc('\n', stdout);
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "simple-cpp: %s\n", e.what());
        return 1;
    }
}
