/* examples/c/simple.c — `simple MODEL PROMPT N`: loads MODEL, generates up to N tokens after PROMPT
 * greedily and prints only the generated text (what `weft run -m MODEL -p PROMPT -n N --temp 0
 * --repeat-penalty 1.0` prints on stdout). A failure: the message on stderr, exit status 1. */
#include <stdio.h>
#include <stdlib.h>

#include <weft.h>

static bool print_piece(const char *text, size_t length, const weft_token *tokens, size_t n_tokens,
                        void *user_data) {
    (void)tokens;
    (void)n_tokens;
    (void)user_data;
    fwrite(text, 1, length, stdout);
    fflush(stdout);
    return true;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL PROMPT N\n", argv[0]);
        return 2;
    }
    const char *prompt = argv[2];
    char *end = NULL;
    const long n_predict = strtol(argv[3], &end, 10);
    if (*argv[3] == '\0' || *end != '\0' || n_predict < 0 || n_predict > 1000000) {
        fprintf(stderr, "simple: N must be a count of tokens, not '%s'\n", argv[3]);
        return 2;
    }

    int status = 1;
    weft_model *model = NULL;
    weft_session *session = NULL;
    weft_token *tokens = NULL;
    size_t n_tokens = 0;

    weft_model_params mp;
    weft_model_params_init(&mp);
    if (weft_model_load(argv[1], &mp, &model) != WEFT_OK) goto failed;
    weft_session_params sp;
    weft_session_params_init(&sp);
    if (weft_session_create(model, &sp, &session) != WEFT_OK) goto failed;

    /* the first call counts the tokens, the second writes them */
    size_t length = 0;
    while (prompt[length]) ++length;
    weft_status counted = weft_tokenize(model, prompt, length, true, true, NULL, 0, &n_tokens);
    if (counted != WEFT_OK && counted != WEFT_ERR_BUFFER_TOO_SMALL) goto failed;
    tokens = malloc((n_tokens + 1) * sizeof *tokens);
    if (!tokens) {
        fprintf(stderr, "simple: out of memory\n");
        goto done;
    }
    if (weft_tokenize(model, prompt, length, true, true, tokens, n_tokens, &n_tokens) != WEFT_OK) goto failed;
    if (n_tokens == 0) tokens[n_tokens++] = weft_model_token_bos(model); /* an empty prompt: BOS alone */

    weft_generate_params gp;
    weft_generate_params_init(&gp);
    gp.max_tokens = (int32_t)n_predict;
    gp.sampling.temperature = 0.0f; /* greedy */
    gp.sampling.repeat_penalty = 1.0f;
    if (weft_generate(session, tokens, n_tokens, &gp, print_piece, NULL, NULL) != WEFT_OK) goto failed;
    fputc('\n', stdout);
    status = 0;
    goto done;

failed:
    fprintf(stderr, "simple: %s\n", weft_last_error());
done:
    free(tokens);
    weft_session_free(session);
    weft_model_free(model);
    return status;
}
