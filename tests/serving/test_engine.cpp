// tests/serving/test_engine.cpp — the serving engine: continuous batching gives every request exactly
// the tokens it gets alone, events add up to the completion, prompt caching, stop strings, token
// limits, cancellation, stop(), submit errors, log-probabilities, seeded sampling, stats, pinned
// slots. On a synthetic random-weight model (f32 and q8_0; its SPM byte-fallback vocabulary makes
// streamed text split UTF-8 characters) and, when ../shared is there, on the trained stories260K.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/fixtures.h"
#include "model/model_test_util.h"
#include "weft/model/model.h"
#include "weft/runtime/batch.h"
#include "weft/runtime/context.h"
#include "weft/serving/engine.h"
#include "weft/serving/text.h"

namespace weft::serving {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// --- models, loaded once and shared by the tests

struct synth_model {
    test::synth_file file;
    std::unique_ptr<model> m;
    synth_model(const std::string &stem, const synth_spec &s) : file(stem, s), m(model::load(file.path())) {}
};

// The small synthetic llama (n_embd 64, 2 layers, GQA 4/2, 300 tokens, n_ctx 2048).
const model &synth(dtype type = dtype::f32) {
    static std::map<dtype, std::unique_ptr<synth_model>> models;
    auto &slot = models[type];
    if (!slot) {
        synth_spec s;
        s.type = type;
        slot = std::make_unique<synth_model>(std::string("serving-engine-") + type_name(type), s);
    }
    return *slot->m;
}

// A larger synthetic model, slow enough per token that a long generation is still running when a
// test cancels or stops it.
const model &slow_synth() {
    static std::unique_ptr<synth_model> m = [] {
        synth_spec s;
        s.n_embd = 256;
        s.n_layer = 4;
        s.n_head = 8;
        s.n_head_kv = 4;
        s.n_ff = 768;
        s.n_ctx = 4096;
        return std::make_unique<synth_model>("serving-engine-slow", s);
    }();
    return *m->m;
}

std::string stories_path() {
    return test::fixture("models/stories260K.gguf");
}

// stories260K, or null when the shared fixtures are not there.
const model *stories() {
    static std::unique_ptr<model> m = [] {
        std::unique_ptr<model> loaded;
        if (test::have_fixtures() && std::filesystem::exists(stories_path()))
            loaded = model::load(stories_path());
        return loaded;
    }();
    return m.get();
}

#define REQUIRE_STORIES()                                                                    \
    WEFT_REQUIRE_FIXTURES();                                                                 \
    if (stories() == nullptr) GTEST_SKIP() << "stories260K not found at " << stories_path(); \
    const model &st = *stories()

// --- helpers

std::vector<token> tok(const model &m, const std::string &text) {
    return m.vocab().tokenize(text, /*add_special=*/true, /*parse_special=*/true);
}

request greedy(std::vector<token> prompt, int32_t max_tokens) {
    request r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.sampling.temp = 0.0f;
    return r;
}

// Greedy, exactly max_tokens tokens (end-of-generation tokens do not end it).
request fixed(const model &m, const std::string &text, int32_t max_tokens) {
    request r = greedy(tok(m, text), max_tokens);
    r.ignore_eos = true;
    return r;
}

engine_params params(int32_t n_slots, uint32_t n_ctx, size_t max_queue = 0) {
    engine_params p;
    p.n_slots = n_slots;
    p.context.n_ctx = n_ctx;
    p.max_queue = max_queue;
    // one thread per decode: the tests are about the engine, and a loaded 2-core machine makes the
    // kernels' thread barriers slow (ChunkedPromptsAreExact and the batching tests use more)
    p.context.n_threads = 1;
    return p;
}

std::vector<token> ids_of(const std::vector<generated_token> &g) {
    std::vector<token> ids;
    for (const auto &t : g) ids.push_back(t.id);
    return ids;
}

bool valid_utf8(const std::string &s) {
    return utf8_sanitize(s) == s;
}

struct run_result {
    std::vector<event> events;
    completion c;
    bool timed_out = false;
};

// Reads a job's events until the final one, then waits for finished() and takes the result.
run_result collect(job &j, std::chrono::milliseconds limit = 30s) {
    run_result out;
    const auto deadline = clock_type::now() + limit;
    bool got_final = false;
    while (!got_final) {
        if (clock_type::now() > deadline) {
            out.timed_out = true;
            return out;
        }
        event e;
        if (j.wait_event(e, 20ms)) {
            got_final = e.final;
            out.events.push_back(std::move(e));
        } else if (j.finished()) {
            event late;
            if (!j.poll_event(late)) break;  // finished without a final event: the checks flag it
            got_final = late.final;
            out.events.push_back(std::move(late));
        }
    }
    while (!j.finished()) {
        if (clock_type::now() > deadline) {
            out.timed_out = true;
            return out;
        }
        std::this_thread::sleep_for(1ms);
    }
    out.c = j.result();
    return out;
}

// The request alone on a fresh 1-slot engine, through generate().
run_result run_alone(const model &m, request r, uint32_t n_ctx = 256) {
    engine eng(m, params(1, n_ctx));
    run_result out;
    out.c = eng.generate(std::move(r), [&](const event &e) {
        out.events.push_back(e);
        return true;
    });
    return out;
}

// Requirement 2: the events add up to the completion, one final event and it is the last, all
// text valid UTF-8.
void expect_well_formed(const run_result &r, const std::string &what) {
    SCOPED_TRACE(what);
    ASSERT_FALSE(r.timed_out);
    ASSERT_FALSE(r.events.empty());
    std::string text;
    std::vector<token> ids;
    int n_final = 0;
    for (size_t i = 0; i < r.events.size(); ++i) {
        const event &e = r.events[i];
        EXPECT_TRUE(valid_utf8(e.text)) << "event " << i << " text is not valid UTF-8";
        text += e.text;
        for (const auto &g : e.tokens) ids.push_back(g.id);
        if (e.final) {
            ++n_final;
            EXPECT_EQ(i + 1, r.events.size()) << "the final event is not the last";
        }
    }
    EXPECT_EQ(n_final, 1);
    EXPECT_TRUE(valid_utf8(r.c.text));
    EXPECT_EQ(text, r.c.text);
    EXPECT_EQ(ids, ids_of(r.c.tokens));
}

void expect_same_output(const completion &got, const completion &want, const std::string &what) {
    SCOPED_TRACE(what);
    EXPECT_EQ(ids_of(got.tokens), ids_of(want.tokens));
    EXPECT_EQ(got.text, want.text);
    EXPECT_EQ(got.finish, want.finish)
        << finish_reason_name(got.finish) << " vs " << finish_reason_name(want.finish);
}

// Waits until `pred` holds or `limit` passes.
template <class F>
bool eventually(F pred, std::chrono::milliseconds limit = 10s) {
    const auto deadline = clock_type::now() + limit;
    while (!pred()) {
        if (clock_type::now() > deadline) return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

// A request that runs until the slot's context is full: long enough to be cancelled or stopped.
request long_request(const model &m, const std::string &text = "a long story") {
    request r = greedy(tok(m, text), -1);
    r.ignore_eos = true;
    return r;
}

// --- 1. continuous batching is exact

std::vector<std::string> batching_prompts_english() {
    return {"Once upon a time",
            "Once upon a time, there was",
            "Once upon a time, there was a dog",
            "The little girl",
            "The little girl saw a big",
            "One day",
            "One day, Tom went to the park",
            "Lily and Tom",
            "Lily liked to play",
            "The sun was hot",
            "The sun was hot and the sky",
            "Once",
            "A cat",
            "Tom had a red ball",
            "Tom had a red ball and a blue",
            "They were happy"};
}

void check_batching_is_exact(const model &m, const std::vector<std::string> &texts) {
    ASSERT_EQ(texts.size(), 16u);
    std::vector<request> reqs;
    for (size_t i = 0; i < texts.size(); ++i) {
        request r = greedy(tok(m, texts[i]), 20 + int32_t(i % 5));  // slots free at different steps
        r.ignore_eos = i % 2 == 0;
        if (i % 4 == 1) r.stop = {"\n\n"};
        reqs.push_back(r);
    }
    std::vector<run_result> alone;
    for (const auto &r : reqs) alone.push_back(run_alone(m, r));

    engine_params p = params(4, 512);
    p.context.n_threads = 2;  // alone: one thread; batched: two (the kernels reduce in a fixed order)
    engine eng(m, p);
    std::vector<std::shared_ptr<job>> jobs(reqs.size());
    // the first eight wait in the queue before the loop starts (the first step takes four at once),
    // four clients submit the rest while it runs
    for (size_t i = 0; i < 8; ++i) jobs[i] = eng.submit(reqs[i]);
    eng.start();
    std::vector<run_result> together(reqs.size());
    std::vector<std::thread> clients;
    for (size_t c = 0; c < 4; ++c) {
        clients.emplace_back([&, c] {
            for (size_t i = 8 + c; i < reqs.size(); i += 4) jobs[i] = eng.submit(reqs[i]);
            // this client's jobs: c and c + 4 were queued before the start, c + 8 and c + 12 are its own
            for (size_t i = c; i < reqs.size(); i += 4) together[i] = collect(*jobs[i]);
        });
    }
    for (auto &t : clients) t.join();

    uint64_t generated = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
        const std::string what = "request " + std::to_string(i) + " \"" + texts[i] + "\"";
        ASSERT_FALSE(together[i].timed_out) << what;
        expect_well_formed(together[i], what + " (batched)");
        expect_well_formed(alone[i], what + " (alone)");
        expect_same_output(together[i].c, alone[i].c, what);
        EXPECT_GE(together[i].c.slot, 0);
        EXPECT_LT(together[i].c.slot, 4);
        generated += together[i].c.tokens.size();
    }
    const engine_stats s = eng.stats();
    EXPECT_EQ(s.generated_tokens, generated);
    // several slots shared decode steps: fewer steps than sampled tokens
    EXPECT_LT(s.steps, s.generated_tokens);
}

TEST(ServingEngine, BatchingIsExactSynthF32) {
    check_batching_is_exact(synth(dtype::f32), batching_prompts_english());
}

TEST(ServingEngine, BatchingIsExactSynthQ8_0) {
    check_batching_is_exact(synth(dtype::q8_0), batching_prompts_english());
}

TEST(ServingEngine, BatchingIsExactStories260K) {
    REQUIRE_STORIES();
    check_batching_is_exact(st, batching_prompts_english());
}

// Prompts longer than n_batch are decoded in chunks, beside other slots' tokens: still exact.
TEST(ServingEngine, ChunkedPromptsAreExact) {
    const model &m = synth();
    engine_params p = params(4, 512);
    p.context.n_batch = 8;
    p.context.n_threads = 2;
    engine eng(m, p);
    std::vector<request> reqs;
    std::vector<std::shared_ptr<job>> jobs;
    for (int i = 0; i < 6; ++i) {
        request r =
            greedy(tok(m, "a rather long prompt number " + std::to_string(i) + " that takes chunks"), 12);
        r.ignore_eos = true;
        ASSERT_GT(r.prompt.size(), 8u);
        reqs.push_back(r);
        jobs.push_back(eng.submit(r));
    }
    while (eng.step()) {
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_TRUE(jobs[i]->finished());
        const run_result got = collect(*jobs[i]);
        expect_well_formed(got, "request " + std::to_string(i));
        expect_same_output(got.c, run_alone(m, reqs[i]).c, "request " + std::to_string(i));
        EXPECT_EQ(got.c.finish, finish_reason::length);
    }
}

// n_batch smaller than the number of slots: the generating slots' pending tokens alone could fill
// a batch, so prompts wait until there is room (a slot only starts generating when its prompt fit
// in a batch, which keeps the generating slots at most n_batch). Every request still finishes, with
// the tokens it gets alone.
TEST(ServingEngine, FewerBatchTokensThanSlots) {
    const model &m = synth();
    engine_params p = params(4, 512);
    p.context.n_batch = 2;
    engine eng(m, p);
    std::vector<request> reqs;
    std::vector<std::shared_ptr<job>> jobs;
    for (int i = 0; i < 6; ++i) {
        reqs.push_back(fixed(m, "prompt " + std::to_string(i), 6 + i % 3));
        jobs.push_back(eng.submit(reqs.back()));
    }
    while (eng.step()) {
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
        ASSERT_TRUE(jobs[i]->finished());
        const run_result got = collect(*jobs[i]);
        EXPECT_EQ(got.c.finish, finish_reason::length)
            << "request " << i << " ended " << finish_reason_name(got.c.finish) << ": " << got.c.error;
        expect_well_formed(got, "request " + std::to_string(i));
        expect_same_output(got.c, run_alone(m, reqs[i]).c, "request " + std::to_string(i));
    }
}

// A short new prompt is decoded alone: the generating slot waits one step, so the new request's
// first token comes after one prompt step (prompt_first_tokens); with 0 the two share the step. The
// texts are the same either way.
TEST(ServingEngine, ShortPromptsGoFirst) {
    const model &m = synth();
    for (int32_t prompt_first : {128, 0}) {
        SCOPED_TRACE("prompt_first_tokens " + std::to_string(prompt_first));
        engine_params p = params(2, 256);
        p.prompt_first_tokens = prompt_first;
        engine eng(m, p);
        const request a = fixed(m, "the first request", 8), b = fixed(m, "and the second one", 4);
        const auto ja = eng.submit(a);
        ASSERT_TRUE(eng.step());  // a's prompt
        ASSERT_TRUE(eng.step());  // a's first generated token decoded
        const auto jb = eng.submit(b);
        const uint64_t generated = eng.stats().generated_tokens;
        ASSERT_TRUE(eng.step());  // b's prompt, alone or beside a's next token
        EXPECT_EQ(eng.stats().generated_tokens - generated, prompt_first > 0 ? 1u : 2u);
        while (eng.step()) {
        }
        expect_same_output(collect(*ja).c, run_alone(m, a).c, "a");
        expect_same_output(collect(*jb).c, run_alone(m, b).c, "b");
    }
}

// --- 2. events

TEST(ServingEngine, EventsAddUpToTheCompletionAndAreValidUtf8) {
    // the random model emits byte-fallback tokens: characters split across tokens, stray bytes
    const model &m = synth();
    int high_byte_tokens = 0;
    for (int i = 0; i < 8; ++i) {
        request r = greedy(tok(m, "utf8 test " + std::to_string(i)), 48);
        r.ignore_eos = true;
        if (i >= 4) {  // sampled, for more varied bytes
            r.sampling.temp = 1.5f;
            r.sampling.top_k = 0;
            r.sampling.top_p = 1.0f;
            r.sampling.min_p = 0.0f;
            r.sampling.seed = 100 + uint32_t(i);
        }
        const run_result got = run_alone(m, r);
        expect_well_formed(got, "request " + std::to_string(i));
        EXPECT_EQ(got.c.tokens.size(), 48u);
        for (const auto &g : got.c.tokens) {
            const std::string piece = m.vocab().token_to_piece(g.id);
            if (piece.size() == 1 && static_cast<unsigned char>(piece[0]) >= 0x80) ++high_byte_tokens;
        }
    }
    // the UTF-8 holding back was exercised
    EXPECT_GT(high_byte_tokens, 0);
}

TEST(ServingEngine, EventsAreWellFormedOnARunningEngine) {
    const model &m = synth();
    engine eng(m, params(2, 512));
    eng.start();
    for (int i = 0; i < 4; ++i) {
        request r = greedy(tok(m, "stream " + std::to_string(i)), 32);
        r.stop = {"ab", "\xC3"};  // held-back prefixes and a stop on a lone lead byte
        auto j = eng.submit(r);
        expect_well_formed(collect(*j), "request " + std::to_string(i));
    }
}

// wait_ready: true once an event can be read or the job is finished, and it reads nothing.
TEST(ServingEngine, WaitReady) {
    const model &m = synth();
    engine eng(m, params(1, 256));
    auto j = eng.submit(fixed(m, "ready", 3));
    EXPECT_FALSE(j->wait_ready(5ms)) << "nothing ran yet";
    while (eng.step()) {
    }
    EXPECT_TRUE(j->wait_ready(0ms));
    EXPECT_TRUE(j->wait_ready(0ms)) << "it read nothing";
    ASSERT_TRUE(j->finished());
    const run_result r = collect(*j, 1s);
    expect_well_formed(r, "after wait_ready");
    EXPECT_EQ(r.c.tokens.size(), 3u);
    EXPECT_TRUE(j->wait_ready(0ms)) << "finished";
    event e;
    EXPECT_FALSE(j->wait_event(e, 0ms)) << "all events were read";
}

#if defined(__linux__)
// This thread's voluntary context switches (the times it went to sleep), from /proc.
long voluntary_switches_of_this_thread() {
    std::ifstream in("/proc/thread-self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stol(line.substr(line.find(':') + 1));
    return -1;
}

// wait_finished: a reader that wants only the outcome sleeps through the tokens (a push wakes only
// readers waiting for events), and the events stay queued for a reader that wants them later;
// ignore_events drops them instead.
TEST(ServingEngine, WaitFinishedIsNotWokenPerToken) {
    const model &m = slow_synth();
    engine eng(m, params(1, 512));
    eng.start();
    const int32_t n_tokens = 64;
    auto j = eng.submit(fixed(m, "outcome only", n_tokens));
    const long before = voluntary_switches_of_this_thread();
    ASSERT_GE(before, 0) << "no voluntary_ctxt_switches in /proc/thread-self/status";
    while (!j->wait_finished(60s)) {
    }
    const long slept = voluntary_switches_of_this_thread() - before;
    EXPECT_LT(slept, n_tokens / 4) << "the reader was woken per token";
    const completion c = j->result();
    ASSERT_EQ(c.tokens.size(), size_t(n_tokens));
    EXPECT_EQ(c.finish, finish_reason::length);
    std::vector<token> queued;
    event e;
    while (j->poll_event(e))
        for (const generated_token &t : e.tokens) queued.push_back(t.id);
    ASSERT_EQ(queued.size(), c.tokens.size());
    for (size_t i = 0; i < queued.size(); ++i) EXPECT_EQ(queued[i], c.tokens[i].id) << i;
    EXPECT_TRUE(j->wait_finished(0ms));

    auto k = eng.submit(fixed(m, "outcome only", n_tokens));
    k->ignore_events();
    while (!k->wait_finished(60s)) {
    }
    EXPECT_FALSE(k->poll_event(e)) << "events were dropped, the final one too";
    const completion same = k->result();
    ASSERT_EQ(same.tokens.size(), c.tokens.size());
    for (size_t i = 0; i < same.tokens.size(); ++i) EXPECT_EQ(same.tokens[i].id, c.tokens[i].id) << i;
    eng.stop();
}
#endif

// --- 3. prompt caching

TEST(ServingEngine, PromptCachingReusesTheSharedPrefix) {
    const model &m = synth();
    engine eng(m, params(1, 256));
    auto quiet = [](const event &) { return true; };

    request a = greedy(tok(m, "the cat sat on the mat"), 8);
    a.ignore_eos = true;
    const completion ca = eng.generate(a, quiet);
    ASSERT_EQ(ca.tokens.size(), 8u);
    EXPECT_EQ(ca.n_cached, 0);
    EXPECT_EQ(ca.n_prompt, int32_t(a.prompt.size()));
    // the slot holds the prompt and every sampled token but the last (which was never decoded)
    std::vector<token> held = a.prompt;
    for (size_t i = 0; i + 1 < ca.tokens.size(); ++i) held.push_back(ca.tokens[i].id);
    EXPECT_EQ(eng.stats().slots[0].n_cached, int32_t(held.size()));

    auto expected_cached = [&](const std::vector<token> &prompt) {
        const auto d = std::mismatch(held.begin(), held.end(), prompt.begin(), prompt.end());
        return int32_t(std::min<size_t>(size_t(d.first - held.begin()), prompt.size() - 1));
    };
    auto run_and_compare = [&](request r, const std::string &what) {
        SCOPED_TRACE(what);
        const int32_t want = expected_cached(r.prompt);
        const completion c = eng.generate(r, quiet);
        EXPECT_EQ(c.n_cached, want);
        EXPECT_LE(c.n_cached, int32_t(r.prompt.size()) - 1);
        expect_same_output(c, run_alone(m, r).c, what);
        held = r.prompt;
        for (size_t i = 0; i + 1 < c.tokens.size(); ++i) held.push_back(c.tokens[i].id);
        return c;
    };

    // extends the first prompt: all of it is reused
    request b = greedy(tok(m, "the cat sat on the mat and then it slept"), 8);
    b.ignore_eos = true;
    ASSERT_TRUE(std::equal(a.prompt.begin(), a.prompt.end(), b.prompt.begin()));
    const completion cb = run_and_compare(b, "extension");
    EXPECT_GE(cb.n_cached, int32_t(a.prompt.size()));

    // the first prompt plus its own output (a conversation's next turn): prompt and output reused
    request turn = greedy(b.prompt, 8);
    turn.ignore_eos = true;
    for (const auto &g : cb.tokens) turn.prompt.push_back(g.id);
    for (token t : tok(m, " more")) turn.prompt.push_back(t);
    const completion ct = run_and_compare(turn, "next turn");
    EXPECT_EQ(ct.n_cached, int32_t(b.prompt.size() + cb.tokens.size() - 1));

    // shares only a part
    request c = greedy(tok(m, "the cat sat on a hat"), 8);
    c.ignore_eos = true;
    const completion cc = run_and_compare(c, "partial");
    EXPECT_GT(cc.n_cached, 0);
    EXPECT_LT(cc.n_cached, int32_t(c.prompt.size()) - 1);

    // the same prompt again: all but the last prompt token reused, the same output
    request again = c;
    const completion c2 = run_and_compare(again, "repeat");
    EXPECT_EQ(c2.n_cached, int32_t(c.prompt.size()) - 1);
    expect_same_output(c2, cc, "repeat vs first");

    // a prompt shorter than what the slot holds, wholly a prefix of it
    request shorter = greedy(std::vector<token>(c.prompt.begin(), c.prompt.begin() + 3), 8);
    shorter.ignore_eos = true;
    const completion cs = run_and_compare(shorter, "prefix of the cache");
    EXPECT_EQ(cs.n_cached, 2);

    const engine_stats s = eng.stats();
    EXPECT_EQ(s.slots[0].n_cached, int32_t(held.size()));
}

// With several slots, a request goes to the idle slot holding the longest prefix of its prompt.
TEST(ServingEngine, PromptCachingPicksTheSlotWithTheLongestPrefix) {
    const model &m = synth();
    engine eng(m, params(2, 512));
    request a = greedy(tok(m, "first conversation about cats"), 6);
    request b = greedy(tok(m, "second talk on dogs"), 6);
    a.ignore_eos = b.ignore_eos = true;
    auto ja = eng.submit(a);
    auto jb = eng.submit(b);
    while (eng.step()) {
    }
    const completion ca = ja->result(), cb = jb->result();
    ASSERT_NE(ca.slot, cb.slot);

    for (int round = 0; round < 2; ++round) {
        request b2 = greedy(b.prompt, 6);
        for (token t : tok(m, " and more")) b2.prompt.push_back(t);
        request a2 = greedy(a.prompt, 6);
        for (token t : tok(m, " and birds")) a2.prompt.push_back(t);
        a2.ignore_eos = b2.ignore_eos = true;
        // b's continuation first: it must not take a's slot
        auto jb2 = eng.submit(b2);
        auto ja2 = eng.submit(a2);
        while (eng.step()) {
        }
        const completion ca2 = ja2->result(), cb2 = jb2->result();
        EXPECT_EQ(cb2.slot, cb.slot);
        EXPECT_EQ(ca2.slot, ca.slot);
        EXPECT_GE(cb2.n_cached, int32_t(b.prompt.size()));
        EXPECT_GE(ca2.n_cached, int32_t(a.prompt.size()));
        expect_same_output(ca2, run_alone(m, a2).c, "a2");
        expect_same_output(cb2, run_alone(m, b2).c, "b2");
        a = a2;
        b = b2;
    }
}

// --- 4. stop strings

TEST(ServingEngine, StopStrings) {
    REQUIRE_STORIES();
    const std::vector<token> prompt = tok(st, "Once upon a time");
    const run_result base = run_alone(st, greedy(prompt, 64));
    ASSERT_EQ(base.c.finish, finish_reason::length);
    const std::string &full = base.c.text;
    ASSERT_EQ(full.rfind(", there was a little girl named Lily", 0), 0u) << full;

    auto with_stops = [&](std::vector<std::string> stops) {
        request r = greedy(prompt, 64);
        r.stop = std::move(stops);
        return run_alone(st, r);
    };
    auto expect_stopped_at = [&](const run_result &got, const std::string &word, const std::string &what) {
        SCOPED_TRACE(what);
        expect_well_formed(got, what);
        const size_t at = full.find(word);
        ASSERT_NE(at, std::string::npos) << "\"" << word << "\" is not in " << full;
        EXPECT_EQ(got.c.finish, finish_reason::stop);
        EXPECT_EQ(got.c.stop_word, word);
        EXPECT_EQ(got.c.text, full.substr(0, at));
        EXPECT_EQ(got.c.text.find(word), std::string::npos);
        // its tokens are the base run's, up to and including the one that completed the stop string
        const auto base_ids = ids_of(base.c.tokens), ids = ids_of(got.c.tokens);
        ASSERT_LE(ids.size(), base_ids.size());
        EXPECT_TRUE(std::equal(ids.begin(), ids.end(), base_ids.begin()));
        EXPECT_GE(st.vocab().detokenize(ids).size(), at + word.size());
    };

    expect_stopped_at(with_stops({"."}), ".", "period");
    // " the" first occurs inside " there"
    expect_stopped_at(with_stops({" the"}), " the", "inside a word");
    expect_stopped_at(with_stops({"girl named"}), "girl named", "across tokens");
    // several: the earliest occurrence wins, whatever the list order
    expect_stopped_at(with_stops({"Lily", "little"}), "little", "earliest of two");
    expect_stopped_at(with_stops({"zzz", "Lily", ""}), "Lily", "with absent and empty ones");

    // stop strings look at the generated text only, never at the prompt
    if (full.find("upon") == std::string::npos) {
        const run_result in_prompt = with_stops({"upon"});
        EXPECT_EQ(in_prompt.c.finish, finish_reason::length);
        EXPECT_EQ(in_prompt.c.text, full);
    } else {
        expect_stopped_at(with_stops({"upon"}), "upon", "in the prompt and the output");
    }
    // never occurs: runs to max_tokens, same text
    const run_result none = with_stops({"zzz"});
    expect_well_formed(none, "absent");
    EXPECT_EQ(none.c.finish, finish_reason::length);
    EXPECT_TRUE(none.c.stop_word.empty());
    EXPECT_EQ(none.c.text, full);
    // a stop string whose start occurs but not the rest: held back, then released
    const run_result held = with_stops({"Lily xyz", "girl namex"});
    expect_well_formed(held, "held back then released");
    EXPECT_EQ(held.c.finish, finish_reason::length);
    EXPECT_EQ(held.c.text, full);
}

// Stop strings on a running multi-slot engine.
TEST(ServingEngine, StopStringsOnARunningEngine) {
    REQUIRE_STORIES();
    engine eng(st, params(4, 512));
    eng.start();
    std::vector<std::shared_ptr<job>> jobs;
    const std::vector<std::string> words = {".", " the", "girl", "zzz"};
    for (const auto &w : words) {
        request r = greedy(tok(st, "Once upon a time"), 48);
        r.stop = {w};
        jobs.push_back(eng.submit(r));
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
        const run_result got = collect(*jobs[i]);
        expect_well_formed(got, words[i]);
        request r = greedy(tok(st, "Once upon a time"), 48);
        r.stop = {words[i]};
        expect_same_output(got.c, run_alone(st, r).c, words[i]);
        EXPECT_EQ(got.c.stop_word, words[i] == "zzz" ? "" : words[i]);
    }
}

// --- 5. max_tokens

TEST(ServingEngine, MaxTokensIsExact) {
    const model &m = synth();
    for (int32_t n : {1, 2, 10, 33}) {
        request r = greedy(tok(m, "count me"), n);
        r.ignore_eos = true;
        const run_result got = run_alone(m, r);
        expect_well_formed(got, "max_tokens " + std::to_string(n));
        EXPECT_EQ(got.c.tokens.size(), size_t(n));
        EXPECT_EQ(got.c.finish, finish_reason::length);
    }
}

// max_tokens 0: nothing is sampled. The engine decodes the prompt (so the slot's cache holds it,
// which warms the cache for a later request) and finishes with `length`, no tokens, no text, and
// exactly one (final, empty) event.
TEST(ServingEngine, MaxTokensZeroOnlyDecodesThePrompt) {
    const model &m = synth();
    engine eng(m, params(1, 256));
    const request r = fixed(m, "nothing please", 0);
    run_result got;
    got.c = eng.generate(r, [&](const event &e) {
        got.events.push_back(e);
        return true;
    });
    expect_well_formed(got, "max_tokens 0");
    EXPECT_EQ(got.c.finish, finish_reason::length);
    EXPECT_TRUE(got.c.tokens.empty());
    EXPECT_EQ(got.c.text, "");
    ASSERT_EQ(got.events.size(), 1u);
    EXPECT_TRUE(got.events[0].final);
    EXPECT_EQ(got.c.n_prompt, int32_t(r.prompt.size()));
    const engine_stats s = eng.stats();
    EXPECT_EQ(s.generated_tokens, 0u);
    EXPECT_EQ(s.prompt_tokens, uint64_t(r.prompt.size()));
    EXPECT_EQ(s.slots[0].n_cached, int32_t(r.prompt.size()));
    EXPECT_EQ(s.requests_finished, 1u);
    // the warmed cache serves the next request with that prompt, which generates as usual
    const completion next = eng.generate(fixed(m, "nothing please", 5), [](const event &) { return true; });
    EXPECT_EQ(next.n_cached, int32_t(r.prompt.size()) - 1);
    EXPECT_EQ(next.tokens.size(), 5u);
    expect_same_output(next, run_alone(m, fixed(m, "nothing please", 5)).c, "after max_tokens 0");
}

// max_tokens < 0 runs until the slot's context is full. The last sampled token is never decoded
// (nothing follows it), so it needs no cell: the slot's cells hold the prompt and all sampled tokens
// but the last, exactly n_ctx_slot of them, and prompt + generated is n_ctx_slot + 1.
TEST(ServingEngine, NegativeMaxTokensRunsUntilTheSlotIsFull) {
    const model &m = synth();
    engine eng(m, params(1, 64));
    const uint32_t n_slot = eng.n_ctx_slot();
    ASSERT_EQ(n_slot, eng.n_ctx());
    ASSERT_GE(n_slot, 64u);
    request r = greedy(tok(m, "fill it"), -1);
    r.ignore_eos = true;
    run_result got;
    got.c = eng.generate(r, [&](const event &e) {
        got.events.push_back(e);
        return true;
    });
    expect_well_formed(got, "until full");
    EXPECT_EQ(got.c.finish, finish_reason::length);
    const size_t total = r.prompt.size() + got.c.tokens.size();
    EXPECT_EQ(total - 1, size_t(n_slot))
        << "prompt " << r.prompt.size() << ", generated " << got.c.tokens.size();
    EXPECT_EQ(eng.stats().slots[0].n_cached, int32_t(n_slot));
    EXPECT_LE(eng.stats().kv_cells_used, eng.stats().kv_cells);

    // with 2 slots, each gets half the cells
    engine two(m, params(2, 128));
    ASSERT_EQ(two.n_ctx_slot(), two.n_ctx() / 2);
    auto j0 = two.submit(r);
    auto j1 = two.submit(r);
    while (two.step()) {
    }
    for (const auto &j : {j0, j1}) {
        const completion c = j->result();
        EXPECT_EQ(c.finish, finish_reason::length);
        EXPECT_EQ(r.prompt.size() + c.tokens.size() - 1, size_t(two.n_ctx_slot()));
    }
    EXPECT_EQ(ids_of(j0->result().tokens), ids_of(j1->result().tokens));
}

// The longest prompt a slot accepts (n_ctx_slot - 1 tokens) still generates.
TEST(ServingEngine, LongestPromptStillGenerates) {
    const model &m = synth();
    engine eng(m, params(1, 64));
    request r;
    r.sampling.temp = 0.0f;
    r.ignore_eos = true;
    r.max_tokens = -1;
    r.prompt.assign(eng.n_ctx_slot() - 1, token(100));
    const completion c = eng.generate(r, [](const event &) { return true; });
    EXPECT_EQ(c.finish, finish_reason::length);
    EXPECT_GE(c.tokens.size(), 1u);
    EXPECT_LE(r.prompt.size() + c.tokens.size(), size_t(eng.n_ctx_slot()) + 1);
}

// --- 6. cancellation

TEST(ServingEngine, CancelARunningRequest) {
    const model &m = slow_synth();
    engine eng(m, params(1, 4096));
    eng.start();
    auto j = eng.submit(long_request(m));
    event first;
    ASSERT_TRUE(j->wait_event(first, 20s));
    ASSERT_FALSE(first.final) << "the long request ended at once";
    const auto t0 = clock_type::now();
    j->cancel();
    EXPECT_TRUE(j->cancelled());
    ASSERT_TRUE(eventually([&] { return j->finished(); }, 5s));
    const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    EXPECT_LT(ms, 500.0) << "cancelling took " << ms << " ms";
    run_result rest = collect(*j);
    rest.events.insert(rest.events.begin(), first);
    EXPECT_EQ(rest.c.finish, finish_reason::cancelled);
    EXPECT_LT(rest.c.tokens.size(), size_t(eng.n_ctx_slot()) / 2);
    ASSERT_FALSE(rest.events.empty());
    EXPECT_TRUE(rest.events.back().final);
    // what was streamed is (a prefix of) the completion text
    std::string streamed;
    for (const auto &e : rest.events) streamed += e.text;
    EXPECT_EQ(rest.c.text.rfind(streamed, 0), 0u);

    // the slot is free again
    EXPECT_TRUE(eventually([&] { return eng.stats().busy_slots == 0; }));
    request next = greedy(tok(m, "after the cancel"), 5);
    next.ignore_eos = true;
    const run_result after = collect(*eng.submit(next));
    expect_well_formed(after, "after");
    EXPECT_EQ(after.c.finish, finish_reason::length);
    EXPECT_EQ(after.c.tokens.size(), 5u);
    EXPECT_EQ(after.c.slot, 0);
}

TEST(ServingEngine, CancelAQueuedRequest) {
    const model &m = slow_synth();
    engine eng(m, params(1, 4096));
    eng.start();
    auto running = eng.submit(long_request(m));
    event e;
    ASSERT_TRUE(running->wait_event(e, 20s));
    auto queued = eng.submit(greedy(tok(m, "waiting"), 8));
    EXPECT_EQ(eng.stats().queued, 1u);
    queued->cancel();
    ASSERT_TRUE(eventually([&] { return queued->finished(); }, 5s));
    const run_result q = collect(*queued);
    EXPECT_EQ(q.c.finish, finish_reason::cancelled);
    EXPECT_TRUE(q.c.tokens.empty());
    EXPECT_TRUE(q.c.text.empty());
    EXPECT_EQ(q.c.slot, -1) << "it never ran";
    ASSERT_EQ(q.events.size(), 1u);
    EXPECT_TRUE(q.events[0].final);
    EXPECT_TRUE(q.events[0].text.empty());
    // the running one was not disturbed
    EXPECT_FALSE(running->finished());
    EXPECT_EQ(eng.stats().queued, 0u);
    running->cancel();
    EXPECT_EQ(collect(*running).c.finish, finish_reason::cancelled);
}

// generate(): the callback returning false cancels; no more tokens are sampled after that.
TEST(ServingEngine, GenerateCallbackCancels) {
    const model &m = synth();
    engine eng(m, params(1, 256));
    request r = long_request(m);
    size_t seen_tokens = 0;
    int calls = 0;
    const completion c = eng.generate(r, [&](const event &e) {
        ++calls;
        seen_tokens += e.tokens.size();
        return calls < 3;
    });
    EXPECT_EQ(c.finish, finish_reason::cancelled);
    EXPECT_EQ(c.tokens.size(), seen_tokens);
    EXPECT_LT(c.tokens.size(), 10u);
    // the engine goes on serving
    request next = greedy(tok(m, "next"), 4);
    next.ignore_eos = true;
    EXPECT_EQ(eng.generate(next, [](const event &) { return true; }).tokens.size(), 4u);
}

// A cancelled job's final event carries the text held back from the stream (the possible start of
// a stop string, the first bytes of a split UTF-8 character): the events add up to the completion.
TEST(ServingEngine, CancelledEventsAddUpToTheCompletion) {
    REQUIRE_STORIES();
    engine eng(st, params(1, 256));
    request r = greedy(tok(st, "Once upon a time"), 64);
    r.stop = {"Lily xyz"};  // "L..." is held back until the next token shows it is not this stop string
    const std::string cut = ", there was a little girl named ";
    run_result got;
    std::string streamed;
    got.c = eng.generate(r, [&](const event &e) {
        got.events.push_back(e);
        streamed += e.text;
        return streamed != cut;  // cancel right after " named " was streamed, "L" being held back
    });
    ASSERT_EQ(got.c.finish, finish_reason::cancelled)
        << "never streamed exactly \"" << cut << "\": " << streamed;
    EXPECT_EQ(streamed.rfind(cut, 0), 0u);
    EXPECT_GT(streamed.size(), cut.size()) << "the held-back text comes with the final event";
    expect_well_formed(got, "cancelled with text held back");
}

// --- 7. stop()

TEST(ServingEngine, StopCancelsRunningAndQueuedJobs) {
    const model &m = slow_synth();
    engine eng(m, params(2, 4096));
    eng.start();
    std::vector<std::shared_ptr<job>> jobs;
    for (int i = 0; i < 4; ++i) jobs.push_back(eng.submit(long_request(m, "job " + std::to_string(i))));
    event e;
    ASSERT_TRUE(jobs[0]->wait_event(e, 20s));
    ASSERT_TRUE(jobs[1]->wait_event(e, 20s));
    const auto t0 = clock_type::now();
    eng.stop();
    EXPECT_LT(std::chrono::duration<double>(clock_type::now() - t0).count(), 2.0);
    for (size_t i = 0; i < jobs.size(); ++i) {
        SCOPED_TRACE("job " + std::to_string(i));
        ASSERT_TRUE(jobs[i]->finished());
        const run_result r = collect(*jobs[i], 1s);
        ASSERT_FALSE(r.timed_out);
        EXPECT_EQ(r.c.finish, finish_reason::cancelled);
        ASSERT_FALSE(r.events.empty());
        EXPECT_TRUE(r.events.back().final);
        if (i >= 2) {
            EXPECT_EQ(r.c.slot, -1) << "queued, never ran";
            EXPECT_TRUE(r.c.tokens.empty());
        }
    }
    const engine_stats s = eng.stats();
    EXPECT_EQ(s.busy_slots, 0);
    EXPECT_EQ(s.queued, 0u);
    EXPECT_EQ(s.requests_submitted, 4u);
    EXPECT_EQ(s.requests_finished, 4u);
    // a stopped engine takes no more requests
    EXPECT_THROW(eng.submit(greedy(tok(m, "late"), 4)), error);
}

TEST(ServingEngine, DestructorDoesNotHang) {
    const model &m = slow_synth();
    std::vector<std::shared_ptr<job>> jobs;
    auto eng = std::make_unique<engine>(m, params(2, 4096));
    eng->start();
    for (int i = 0; i < 3; ++i) jobs.push_back(eng->submit(long_request(m, "job " + std::to_string(i))));
    event e;
    ASSERT_TRUE(jobs[0]->wait_event(e, 20s));
    const auto t0 = clock_type::now();
    eng.reset();
    EXPECT_LT(std::chrono::duration<double>(clock_type::now() - t0).count(), 2.0);
    for (const auto &j : jobs) {
        ASSERT_TRUE(j->finished());
        EXPECT_EQ(j->result().finish, finish_reason::cancelled);
    }
    // never started, with a queue: also ends every job
    std::shared_ptr<job> waiting;
    {
        engine idle(m, params(1, 256));
        waiting = idle.submit(greedy(tok(m, "never run"), 4));
    }
    ASSERT_TRUE(waiting->finished());
    EXPECT_EQ(waiting->result().finish, finish_reason::cancelled);
}

// A reader that takes the final event and calls result() right away sees the whole completion: the
// engine stores the outcome and queues the final event together. (An earlier version queued the
// event first; a reader then got finish none and no tokens most of the time.)
TEST(ServingEngine, ResultIsReadyWhenTheFinalEventArrives) {
    const model &m = synth();
    engine eng(m, params(4, 512));
    eng.start();
    int early = 0, total = 0;
    for (int round = 0; round < 25; ++round) {
        std::vector<std::shared_ptr<job>> jobs;
        for (int i = 0; i < 4; ++i) jobs.push_back(eng.submit(fixed(m, "race " + std::to_string(i), 2)));
        for (const auto &j : jobs) {
            event e;
            while (j->wait_event(e, 10s)) {
                if (!e.final) continue;
                ++total;
                const bool done = j->finished();
                const completion c = j->result();
                if (!done || c.finish == finish_reason::none || c.tokens.size() != 2) ++early;
                break;
            }
        }
    }
    EXPECT_EQ(total, 100);
    EXPECT_EQ(early, 0) << early << " of " << total
                        << " final events arrived while the job was not finished yet (result() incomplete)";
}

// stop() then start(): the engine serves again; job ids keep increasing.
TEST(ServingEngine, RestartAfterStop) {
    const model &m = synth();
    engine eng(m, params(2, 256));
    eng.start();
    auto a = eng.submit(fixed(m, "before", 4));
    EXPECT_EQ(collect(*a).c.tokens.size(), 4u);
    eng.stop();
    eng.stop();  // twice is harmless
    EXPECT_THROW(eng.submit(fixed(m, "while stopped", 4)), error);
    eng.start();
    eng.start();  // already running: no second loop
    auto b = eng.submit(fixed(m, "after", 4));
    const run_result rb = collect(*b);
    expect_well_formed(rb, "after restart");
    EXPECT_EQ(rb.c.tokens.size(), 4u);
    EXPECT_GT(b->id(), a->id());
    expect_same_output(rb.c, run_alone(m, fixed(m, "after", 4)).c, "after restart");
}

// --- 8. errors at submit

TEST(ServingEngine, SubmitRejectsRequestsThatCannotRun) {
    const model &m = synth();
    engine eng(m, params(4, 256));
    ASSERT_EQ(eng.n_ctx_slot(), 64u);
    auto good = [&] { return greedy(tok(m, "fine"), 4); };

    request empty = good();
    empty.prompt.clear();
    EXPECT_THROW(eng.submit(empty), error);

    request too_long = good();
    too_long.prompt.assign(eng.n_ctx_slot(), token(100));
    EXPECT_THROW(eng.submit(too_long), error);
    too_long.prompt.assign(eng.n_ctx_slot() + 10, token(100));
    EXPECT_THROW(eng.submit(too_long), error);

    request bad_token = good();
    bad_token.prompt.push_back(token(m.vocab().n_tokens()));
    EXPECT_THROW(eng.submit(bad_token), error);
    bad_token.prompt.back() = -5;
    EXPECT_THROW(eng.submit(bad_token), error);

    request bad_slot = good();
    bad_slot.slot = 4;
    EXPECT_THROW(eng.submit(bad_slot), error);
    bad_slot.slot = 100;
    EXPECT_THROW(eng.submit(bad_slot), error);

    request bad_top_p = good();
    bad_top_p.sampling.temp = 0.8f;
    bad_top_p.sampling.top_p = 2.0f;
    EXPECT_THROW(eng.submit(bad_top_p), error);
    request bad_min_p = good();
    bad_min_p.sampling.min_p = -0.5f;
    EXPECT_THROW(eng.submit(bad_min_p), error);
    request nan_temp = good();
    nan_temp.sampling.temp = std::nanf("");
    EXPECT_THROW(eng.submit(nan_temp), error);

    request bad_probs = good();
    bad_probs.n_probs = -1;
    EXPECT_THROW(eng.submit(bad_probs), error);
    bad_probs.n_probs = m.vocab().n_tokens() + 1;
    EXPECT_THROW(eng.submit(bad_probs), error);

    // nothing was queued by the refused requests, and the engine still works
    EXPECT_EQ(eng.stats().requests_submitted, 0u);
    EXPECT_EQ(eng.stats().queued, 0u);
    request last = good();
    last.prompt.assign(eng.n_ctx_slot() - 1, token(100));  // the longest accepted
    last.ignore_eos = true;
    EXPECT_EQ(eng.generate(last, [](const event &) { return true; }).finish, finish_reason::length);
}

// Bit-exact, not only the same greedy tokens: a request that runs while another slot frees cells
// (a new request in that slot drops its old cache, leaving holes below the running sequence's
// cells) gets exactly the log-probabilities it gets alone: the cache keeps each sequence's cells in
// position order, which is the order attention sums them in.
TEST(ServingEngine, HolesLeftByAnotherSlotDoNotChangeTheBits) {
    const model &m = synth();
    auto req = [&](const std::string &text, int32_t n) {
        request r = greedy(tok(m, text), n);
        r.ignore_eos = true;
        r.logprobs = true;
        return r;
    };
    const request long_one = req("bob went to the market to buy", 40);
    const completion alone = run_alone(m, long_one, 512).c;
    engine eng(m, params(2, 512));
    auto first = eng.submit(req("anna had a very long story about a cat and a dog", 4));
    auto running = eng.submit(long_one);
    while (!first->finished()) eng.step();
    auto next = eng.submit(req("zed", 3));  // takes the first slot: its old cells become holes
    while (!running->finished() || !next->finished()) eng.step();
    const completion together = running->result();
    ASSERT_EQ(together.tokens.size(), alone.tokens.size());
    for (size_t i = 0; i < alone.tokens.size(); ++i) {
        EXPECT_EQ(together.tokens[i].id, alone.tokens[i].id) << "token " << i;
        EXPECT_EQ(together.tokens[i].logprob, alone.tokens[i].logprob) << "token " << i;
    }
}

// Slot -1 means "any"; any other negative slot is out of range.
TEST(ServingEngine, SubmitRejectsNegativeSlots) {
    const model &m = synth();
    engine eng(m, params(4, 256));
    request r = greedy(tok(m, "fine"), 4);
    r.slot = -2;
    EXPECT_THROW(eng.submit(r), error);
}

TEST(ServingEngine, EngineRejectsBadParameters) {
    const model &m = synth();
    EXPECT_THROW({ engine e(m, params(0, 256)); }, error);
    EXPECT_THROW({ engine e(m, params(65, 4096)); }, error);
    EXPECT_THROW({ engine e(m, params(8, 8)); }, error) << "one cell per slot";
}

TEST(ServingEngine, QueueFull) {
    const model &m = slow_synth();
    {
        // no loop: everything waits in the queue
        engine eng(m, params(1, 256, /*max_queue=*/1));
        auto a = eng.submit(greedy(tok(m, "a"), 4));
        EXPECT_THROW(eng.submit(greedy(tok(m, "b"), 4)), queue_full);
        EXPECT_THROW(eng.submit(greedy(tok(m, "b"), 4)), error) << "queue_full is a weft::error";
        EXPECT_EQ(eng.stats().requests_submitted, 1u);
    }
    engine eng(m, params(2, 4096, /*max_queue=*/1));
    eng.start();
    auto a = eng.submit(long_request(m, "a"));
    event e;
    ASSERT_TRUE(a->wait_event(e, 20s));
    auto b = eng.submit(long_request(m, "b"));
    ASSERT_TRUE(b->wait_event(e, 20s));
    // both slots busy: one request may wait, the next is refused
    auto c = eng.submit(fixed(m, "c", 3));
    EXPECT_THROW(eng.submit(fixed(m, "d", 3)), queue_full);
    EXPECT_EQ(eng.stats().queued, 1u);
    // a slot frees up: the waiting one runs, and there is room again
    a->cancel();
    const run_result rc = collect(*c);
    EXPECT_EQ(rc.c.finish, finish_reason::length);
    EXPECT_EQ(rc.c.tokens.size(), 3u);
    auto d = eng.submit(fixed(m, "d", 3));
    b->cancel();
    EXPECT_EQ(collect(*d).c.tokens.size(), 3u);
    EXPECT_EQ(collect(*a).c.finish, finish_reason::cancelled);
    EXPECT_EQ(collect(*b).c.finish, finish_reason::cancelled);
}

// --- 9. log-probabilities

void check_logprobs(const model &m, const std::string &text) {
    request r = greedy(tok(m, text), 16);
    r.logprobs = true;
    r.n_probs = 5;
    const run_result got = run_alone(m, r);
    expect_well_formed(got, text);
    ASSERT_FALSE(got.c.tokens.empty());
    for (size_t i = 0; i < got.c.tokens.size(); ++i) {
        SCOPED_TRACE("token " + std::to_string(i));
        const generated_token &g = got.c.tokens[i];
        ASSERT_EQ(g.top.size(), 5u);
        EXPECT_EQ(g.top[0].id, g.id) << "greedy picks the most likely token";
        EXPECT_LE(g.logprob, 0.0f);
        EXPECT_FLOAT_EQ(g.top[0].logprob, g.logprob);
        double sum = 0.0;
        for (size_t k = 0; k < g.top.size(); ++k) {
            EXPECT_LE(g.top[k].logprob, 0.0f);
            EXPECT_TRUE(std::isfinite(g.top[k].logprob));
            if (k > 0) {
                EXPECT_GE(g.top[k - 1].logprob, g.top[k].logprob);
            }
            for (size_t l = 0; l < k; ++l) EXPECT_NE(g.top[l].id, g.top[k].id);
            sum += std::exp(double(g.top[k].logprob));
        }
        EXPECT_LE(sum, 1.0 + 1e-5);
    }

    // the first token's log-probability is the log-softmax of the prompt's last logits
    inference_params ip;
    ip.n_ctx = 256;
    inference_context ctx(m, ip);
    ASSERT_EQ(ctx.decode(batch::from_tokens(r.prompt)), decode_ok);
    const float *logits = ctx.get_logits_ith(-1);
    const int32_t n_vocab = ctx.n_vocab();
    double mx = -INFINITY, sum = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) mx = std::max(mx, double(logits[i]));
    for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - mx);
    const generated_token &g0 = got.c.tokens[0];
    EXPECT_NEAR(g0.logprob, double(logits[g0.id]) - mx - std::log(sum), 1e-4);
    for (const auto &t : g0.top) EXPECT_NEAR(t.logprob, double(logits[t.id]) - mx - std::log(sum), 1e-4);

    // logprobs alone: the chosen token's log-probability, no alternatives; neither: nothing
    request only = r;
    only.n_probs = 0;
    const completion co = run_alone(m, only).c;
    ASSERT_EQ(co.tokens.size(), got.c.tokens.size());
    for (size_t i = 0; i < co.tokens.size(); ++i) {
        EXPECT_TRUE(co.tokens[i].top.empty());
        EXPECT_FLOAT_EQ(co.tokens[i].logprob, got.c.tokens[i].logprob);
    }
}

TEST(ServingEngine, LogprobsSynth) {
    check_logprobs(synth(), "probabilities");
}

TEST(ServingEngine, LogprobsStories260K) {
    REQUIRE_STORIES();
    check_logprobs(st, "Once upon a time");
}

// --- 10. seeded sampling

TEST(ServingEngine, SeededSamplingIsReproducible) {
    const model &m = synth();
    auto sampled = [&](const std::string &text, uint32_t seed) {
        request r;
        r.prompt = tok(m, text);
        r.max_tokens = 24;
        r.ignore_eos = true;
        r.sampling.temp = 0.8f;
        r.sampling.seed = seed;
        return r;
    };
    std::vector<request> reqs = {sampled("seeded one", 7), sampled("seeded one", 7), sampled("seeded two", 7),
                                 sampled("seeded one", 8)};
    std::vector<request> with_penalty = reqs;
    for (auto &r : with_penalty) {
        r.sampling.penalty_repeat = 1.3f;
        r.sampling.penalty_present = 0.2f;
    }
    reqs.insert(reqs.end(), with_penalty.begin(), with_penalty.end());
    std::vector<completion> alone;
    for (const auto &r : reqs) alone.push_back(run_alone(m, r).c);
    // the same request twice alone: the same tokens
    EXPECT_EQ(ids_of(alone[0].tokens), ids_of(run_alone(m, reqs[0]).c.tokens));
    EXPECT_EQ(ids_of(alone[0].tokens), ids_of(alone[1].tokens));
    EXPECT_NE(ids_of(alone[0].tokens), ids_of(alone[3].tokens)) << "another seed, the same draws";

    engine eng(m, params(4, 1024));
    eng.start();
    std::vector<std::shared_ptr<job>> jobs;
    for (const auto &r : reqs) jobs.push_back(eng.submit(r));
    for (size_t i = 0; i < jobs.size(); ++i) {
        const run_result got = collect(*jobs[i]);
        expect_well_formed(got, "request " + std::to_string(i));
        expect_same_output(got.c, alone[i], "request " + std::to_string(i));
    }
    // and again, now that the slots hold these prompts (prompt caching)
    jobs.clear();
    for (const auto &r : reqs) jobs.push_back(eng.submit(r));
    for (size_t i = 0; i < jobs.size(); ++i) {
        const completion c = collect(*jobs[i]).c;
        expect_same_output(c, alone[i], "again, request " + std::to_string(i));
    }
}

// --- 11. stats

TEST(ServingEngine, Stats) {
    const model &m = synth();
    engine eng(m, params(3, 384));
    engine_stats s0 = eng.stats();
    EXPECT_EQ(s0.n_slots, 3);
    EXPECT_EQ(s0.slots.size(), 3u);
    EXPECT_EQ(s0.busy_slots, 0);
    EXPECT_EQ(s0.requests_submitted, 0u);
    EXPECT_EQ(s0.kv_cells, eng.n_ctx());

    eng.start();
    std::vector<std::shared_ptr<job>> jobs;
    for (int i = 0; i < 7; ++i) {
        request r = greedy(tok(m, "stats " + std::to_string(i)), 5 + i);
        r.ignore_eos = i % 2 == 0;
        jobs.push_back(eng.submit(r));
    }
    uint64_t generated = 0, prompt_tokens = 0;
    for (const auto &j : jobs) {
        const completion c = collect(*j).c;
        generated += c.tokens.size();
        prompt_tokens += uint64_t(c.n_prompt - c.n_cached);
        EXPECT_GE(c.queued_ms, 0.0);
        EXPECT_GE(c.first_token_ms, c.queued_ms);
        EXPECT_GE(c.prompt_ms, 0.0);
        EXPECT_GE(c.generate_ms, 0.0);
    }
    ASSERT_TRUE(eventually([&] { return eng.stats().busy_slots == 0; }));
    const engine_stats s = eng.stats();
    EXPECT_EQ(s.n_slots, 3);
    EXPECT_EQ(s.requests_submitted, 7u);
    EXPECT_EQ(s.requests_finished, 7u);
    EXPECT_EQ(s.busy_slots, 0);
    EXPECT_EQ(s.queued, 0u);
    EXPECT_EQ(s.generated_tokens, generated);
    EXPECT_EQ(s.prompt_tokens, prompt_tokens);
    EXPECT_GT(s.steps, 0u);
    EXPECT_GT(s.decode_ms, 0.0);
    EXPECT_GT(s.kv_cells_used, 0u);
    EXPECT_LE(s.kv_cells_used, s.kv_cells);
    ASSERT_EQ(s.slots.size(), 3u);
    uint32_t cached = 0;
    for (size_t i = 0; i < s.slots.size(); ++i) {
        EXPECT_EQ(s.slots[i].id, int32_t(i));
        EXPECT_FALSE(s.slots[i].busy);
        EXPECT_EQ(s.slots[i].job_id, 0u);
        cached += uint32_t(s.slots[i].n_cached);
    }
    EXPECT_EQ(cached, s.kv_cells_used) << "the cells in use are the slots' cached tokens";
}

// While a request runs, its slot shows it.
TEST(ServingEngine, StatsShowARunningRequest) {
    const model &m = slow_synth();
    engine eng(m, params(2, 4096));
    eng.start();
    auto j = eng.submit(long_request(m));
    event e;
    ASSERT_TRUE(j->wait_event(e, 20s));
    const engine_stats s = eng.stats();
    EXPECT_EQ(s.busy_slots, 1);
    int busy = 0;
    for (const auto &sl : s.slots)
        if (sl.busy) {
            ++busy;
            EXPECT_EQ(sl.job_id, j->id());
            EXPECT_EQ(sl.n_prompt, int32_t(tok(m, "a long story").size()));
            EXPECT_GE(sl.n_generated, 1);
        }
    EXPECT_EQ(busy, 1);
    j->cancel();
    EXPECT_EQ(collect(*j).c.finish, finish_reason::cancelled);
}

// --- 12. pinned slots

TEST(ServingEngine, PinnedSlot) {
    const model &m = synth();
    engine eng(m, params(4, 512));
    request r = greedy(tok(m, "pinned"), 6);
    r.ignore_eos = true;
    r.slot = 2;
    const completion c = eng.generate(r, [](const event &) { return true; });
    EXPECT_EQ(c.slot, 2);
    EXPECT_EQ(c.finish, finish_reason::length);
    request any = r;
    any.slot = -1;
    expect_same_output(c, run_alone(m, any).c, "pinned vs alone");
    EXPECT_EQ(eng.stats().slots[2].n_cached, int32_t(r.prompt.size() + c.tokens.size() - 1));
    for (int i : {0, 1, 3}) EXPECT_EQ(eng.stats().slots[size_t(i)].n_cached, 0);

    // pinned to each slot in turn, even with the prompt cached in slot 2
    for (int32_t s = 0; s < 4; ++s) {
        request p = r;
        p.slot = s;
        const completion cp = eng.generate(p, [](const event &) { return true; });
        EXPECT_EQ(cp.slot, s);
        expect_same_output(cp, c, "slot " + std::to_string(s));
    }
}

// A request pinned to a busy slot waits for it even when other slots are free.
TEST(ServingEngine, PinnedSlotWaitsForItsSlot) {
    const model &m = slow_synth();
    engine eng(m, params(4, 4096));
    eng.start();
    request hog = long_request(m);
    hog.slot = 2;
    auto a = eng.submit(hog);
    event e;
    ASSERT_TRUE(a->wait_event(e, 20s));
    request pinned = fixed(m, "mine", 3);
    pinned.slot = 2;
    auto b = eng.submit(pinned);
    auto c = eng.submit(fixed(m, "anywhere", 3));
    const run_result rc = collect(*c);
    EXPECT_NE(rc.c.slot, 2);
    EXPECT_EQ(rc.c.finish == finish_reason::length || rc.c.finish == finish_reason::stop, true);
    EXPECT_FALSE(b->finished()) << "ran although its slot was busy";
    EXPECT_EQ(eng.stats().queued, 1u);
    a->cancel();
    const run_result rb = collect(*b);
    EXPECT_EQ(rb.c.slot, 2);
    EXPECT_NE(rb.c.finish, finish_reason::cancelled);
    EXPECT_EQ(collect(*a).c.slot, 2);
}

}  // namespace
}  // namespace weft::serving
