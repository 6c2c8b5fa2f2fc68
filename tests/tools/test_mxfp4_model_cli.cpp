// tests/tools/test_mxfp4_model_cli.cpp — a mixture-of-experts model with mxfp4 experts end to end: `weft
// synth --arch qwen3moe` at F32, `weft quantize ... MXFP4_MOE` (experts mxfp4, the rest q8_0), then the
// prompt logits of `weft logits --json`: close to the F32 model's (4-bit experts: further than Q8_0's,
// within a bound), and the same bits whatever the thread count.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common/run_weft.h"
#include "model/model_test_util.h"

namespace {

using weft::test::run_result;
using weft::test::shell_quote;
using weft::test::temp_file;

using rows = std::vector<std::vector<float>>;

run_result run_weft_mxfp4(const std::string &args) {
    return weft::test::run_weft_shell(args);
}

rows prompt_logits(const std::string &model, int threads) {
    const run_result r =
        run_weft_mxfp4("logits -m " + shell_quote(model) +
                       " -p 'Once upon a time, there was' --json -n 1 -t " + std::to_string(threads));
    EXPECT_EQ(r.status, 0) << r.err;
    if (r.status != 0) return {};
    return nlohmann::json::parse(r.out).at("prompt_logits").get<rows>();
}

// sum (a - b)^2 / sum b^2 of each row: the median and the worst (a random router's near-tie can flip one
// row's experts, for q8_0 as for mxfp4: the median says how close the rest stay)
struct distance {
    double median = 0, worst = 0;
};
distance rows_distance(const rows &got, const rows &ref) {
    EXPECT_EQ(got.size(), ref.size());
    std::vector<double> e;
    for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
        double num = 0, den = 0;
        for (size_t j = 0; j < ref[i].size(); ++j) {
            num += (double(got[i][j]) - ref[i][j]) * (double(got[i][j]) - ref[i][j]);
            den += double(ref[i][j]) * ref[i][j];
        }
        e.push_back(num / den);
    }
    if (e.empty()) return {};
    std::sort(e.begin(), e.end());
    return {e[e.size() / 2], e.back()};
}

TEST(Mxfp4ModelCli, QuantizedExpertsStayCloseToF32AndThreadInvariant) {
    const temp_file f32("mxfp4-moe-f32"), mxfp4("mxfp4-moe-mxfp4"), q8("mxfp4-moe-q8_0");
    const run_result s =
        run_weft_mxfp4("synth " + shell_quote(f32.path()) +
                       " --arch qwen3moe --embd 256 --layers 2 --heads 4 --kv-heads 2 --ff 128"
                       " --experts 8 --experts-used 2 --vocab 1024 --seed 7 --type f32");
    ASSERT_EQ(s.status, 0) << s.err;
    for (const auto &[out, type] : {std::pair{&mxfp4, "MXFP4_MOE"}, std::pair{&q8, "Q8_0"}}) {
        const run_result q = run_weft_mxfp4("quantize " + shell_quote(f32.path()) + " " +
                                            shell_quote(out->path()) + " " + type);
        ASSERT_EQ(q.status, 0) << q.err;
    }
    const rows ref = prompt_logits(f32.path(), 2);
    const rows got = prompt_logits(mxfp4.path(), 2);
    const rows q8_rows = prompt_logits(q8.path(), 2);
    ASSERT_FALSE(ref.empty());
    EXPECT_EQ(prompt_logits(mxfp4.path(), 1), got) << "1 and 2 threads differ";
    EXPECT_EQ(prompt_logits(mxfp4.path(), 3), got) << "3 and 2 threads differ";
    const distance d = rows_distance(got, ref), d_q8 = rows_distance(q8_rows, ref);
    std::printf(
        "[ nmse     ] MXFP4_MOE from F32: median row %.3g worst %.3g | Q8_0: median %.3g worst %.3g\n",
        d.median, d.worst, d_q8.median, d_q8.worst);
    // 4-bit experts move the logits more than 8-bit weights do, but stay close (measured on this
    // shape: median row 0.0141 against Q8_0's 0.00026)
    EXPECT_GT(d.median, d_q8.median);
    EXPECT_LE(d.median, 0.05);
}

}  // namespace
