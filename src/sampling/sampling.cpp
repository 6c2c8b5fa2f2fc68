// src/sampling/sampling.cpp — candidate arrays, each sampler, the sampler chain and the default chain.
#include "weft/sampling/sampling.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include "weft/core/error.h"

namespace weft {

namespace {

// Descending logit, ties by ascending id, so every sort (full or partial) is deterministic.
bool logit_greater(const token_data &a, const token_data &b) {
    if (a.logit != b.logit) return a.logit > b.logit;
    return a.id < b.id;
}

void sort_descending(token_data_array &cur) {
    if (cur.sorted) return;
    std::sort(cur.data.begin(), cur.data.end(), logit_greater);
    cur.sorted = true;
}

// Sets p to the softmax of the logits without reordering: O(n), where sorting a large vocabulary
// would cost milliseconds per token. Every logit -inf: uniform, rather than dividing by zero.
void set_probabilities(token_data_array &cur) {
    if (cur.data.empty()) return;
    float max_logit = -std::numeric_limits<float>::infinity();
    for (const auto &c : cur.data) max_logit = std::max(max_logit, c.logit);
    if (std::isinf(max_logit) && max_logit < 0.0f) {
        for (auto &c : cur.data) c.p = 1.0f / float(cur.data.size());
        return;
    }
    double sum = 0.0;
    for (auto &c : cur.data) {
        c.p = std::exp(c.logit - max_logit);
        sum += c.p;
    }
    for (auto &c : cur.data) c.p = float(c.p / sum);
}

class greedy_sampler final : public sampler {
  public:
    const char *name() const override { return "greedy"; }
    void apply(token_data_array &cur) override {
        if (cur.data.empty()) return;
        if (cur.sorted) {
            cur.selected = 0;
            return;
        }
        // strictly greater: the first of equal maxima wins, as in the established engine
        size_t best = 0;
        float best_logit = cur.data[0].logit;
        for (size_t i = 1; i < cur.data.size(); ++i) {
            if (cur.data[i].logit > best_logit) {
                best = i;
                best_logit = cur.data[i].logit;
            }
        }
        cur.selected = int64_t(best);
    }
    // the first of equal maxima is the best by logit_greater: the best one alone picks the same
    size_t best_needed(size_t n) const override { return std::min<size_t>(n, 1); }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<greedy_sampler>(*this); }
};

// The base of the samplers that draw random numbers: one mt19937 seeded with `seed`, re-seeded by
// reset(); sampler_seed_random draws a fresh seed from std::random_device each time.
class seeded_sampler : public sampler {
  public:
    explicit seeded_sampler(uint32_t seed) : seed_(seed) { reseed(); }
    void reset() override { reseed(); }
    std::optional<uint32_t> seed() const override { return seed_used_; }

  protected:
    // One 32-bit draw mapped to [0, 1): the generator's output is fixed by the standard, unlike
    // std::uniform_real_distribution's, so a seed reproduces the same tokens everywhere.
    double uniform() { return double(rng_()) * (1.0 / 4294967296.0); }
    // Draws an index of cur with probability p (cur.data[i].p, not necessarily normalized), walking
    // the array in its current order.
    size_t draw(const token_data_array &cur) {
        const double u = uniform();
        double total = 0.0;
        for (const auto &c : cur.data) total += c.p;
        const double target = u * total;
        double cumulative = 0.0;
        size_t chosen = 0;
        for (size_t i = 0; i < cur.data.size(); ++i) {
            if (cur.data[i].p <= 0.0f) continue;
            chosen = i;
            cumulative += cur.data[i].p;
            if (target < cumulative) break;
        }
        return chosen;
    }

  private:
    void reseed() {
        seed_used_ = seed_ == sampler_seed_random ? std::random_device{}() : seed_;
        rng_.seed(seed_used_);
    }

    uint32_t seed_;       // as asked (may be sampler_seed_random)
    uint32_t seed_used_;  // the seed the generator actually got
    std::mt19937 rng_;
};

class dist_sampler final : public seeded_sampler {
  public:
    using seeded_sampler::seeded_sampler;
    const char *name() const override { return "dist"; }
    void apply(token_data_array &cur) override {
        if (cur.data.empty()) return;
        set_probabilities(cur);  // the draw walks the array in its current order, sorted or not
        cur.selected = int64_t(draw(cur));
    }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<dist_sampler>(*this); }
};

class top_k_sampler final : public sampler {
  public:
    explicit top_k_sampler(int32_t k) : k_(k) {}
    const char *name() const override { return "top-k"; }
    void apply(token_data_array &cur) override {
        if (k_ <= 0 || cur.data.empty()) return;
        const size_t k = std::min(size_t(k_), cur.data.size());
        if (!cur.sorted) {
            std::partial_sort(cur.data.begin(), cur.data.begin() + std::ptrdiff_t(k), cur.data.end(),
                              logit_greater);
            cur.sorted = true;
        }
        cur.data.resize(k);
    }
    std::optional<size_t> keeps_best(size_t n) const override { return k_ > 0 ? std::min(n, size_t(k_)) : n; }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<top_k_sampler>(*this); }

  private:
    int32_t k_;
};

class top_p_sampler final : public sampler {
  public:
    top_p_sampler(float p, size_t min_keep) : p_(p), min_keep_(min_keep) {}
    const char *name() const override { return "top-p"; }
    void apply(token_data_array &cur) override {
        if (p_ >= 1.0f || cur.data.empty()) return;
        set_probabilities(cur);
        // The kept prefix is usually short: sort only the best `n_sorted` candidates, doubling it
        // until the prefix is found inside, instead of sorting the whole vocabulary.
        const size_t n = cur.data.size();
        size_t n_sorted = cur.sorted ? n : std::min(n, size_t(256));
        double cumulative = 0.0;
        size_t scanned = 0;
        while (true) {
            if (!cur.sorted) {
                std::partial_sort(cur.data.begin() + std::ptrdiff_t(scanned),
                                  cur.data.begin() + std::ptrdiff_t(n_sorted), cur.data.end(), logit_greater);
                if (n_sorted == n) cur.sorted = true;
            }
            for (; scanned < n_sorted; ++scanned) {
                cumulative += cur.data[scanned].p;
                if (cumulative >= p_ && scanned + 1 >= min_keep_) {
                    cur.data.resize(scanned + 1);
                    cur.sorted = true;
                    return;
                }
            }
            if (n_sorted == n) return;  // the whole array is needed
            n_sorted = std::min(n, n_sorted * 2);
        }
    }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<top_p_sampler>(*this); }

  private:
    float p_;
    size_t min_keep_;
};

class min_p_sampler final : public sampler {
  public:
    min_p_sampler(float p, size_t min_keep) : p_(p), min_keep_(min_keep) {}
    const char *name() const override { return "min-p"; }
    void apply(token_data_array &cur) override {
        if (p_ <= 0.0f || cur.data.empty()) return;
        // p_i >= p * p_max  <=>  logit_i >= logit_max + log(p): no softmax needed.
        float max_logit = -std::numeric_limits<float>::infinity();
        for (const auto &c : cur.data) max_logit = std::max(max_logit, c.logit);
        const float threshold = max_logit + std::log(p_);
        const auto passes = [threshold](const token_data &c) { return c.logit >= threshold; };
        const size_t n_pass = size_t(std::count_if(cur.data.begin(), cur.data.end(), passes));
        if (n_pass >= min_keep_) {
            // stable: an array that was sorted stays sorted
            auto end = std::stable_partition(cur.data.begin(), cur.data.end(), passes);
            cur.data.erase(end, cur.data.end());
            return;
        }
        sort_descending(cur);
        cur.data.resize(std::min(min_keep_, cur.data.size()));
    }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<min_p_sampler>(*this); }

  private:
    float p_;
    size_t min_keep_;
};

class typical_sampler final : public sampler {
  public:
    typical_sampler(float p, size_t min_keep) : p_(p), min_keep_(min_keep) {}
    const char *name() const override { return "typical"; }
    void apply(token_data_array &cur) override {
        if (p_ >= 1.0f || cur.data.empty()) return;
        token_data_array_softmax(cur);
        double entropy = 0.0;
        for (const auto &c : cur.data)
            if (c.p > 0.0f) entropy -= double(c.p) * std::log(double(c.p));
        // distance of each candidate's information content from the expected one
        std::vector<double> distance(cur.data.size());
        for (size_t i = 0; i < cur.data.size(); ++i) {
            const double p = cur.data[i].p;
            distance[i] =
                p > 0.0 ? std::fabs(-std::log(p) - entropy) : std::numeric_limits<double>::infinity();
        }
        std::vector<size_t> order(cur.data.size());
        std::iota(order.begin(), order.end(), size_t(0));
        std::stable_sort(order.begin(), order.end(),
                         [&distance](size_t a, size_t b) { return distance[a] < distance[b]; });
        double cumulative = 0.0;
        size_t keep = order.size();
        for (size_t i = 0; i < order.size(); ++i) {
            cumulative += cur.data[order[i]].p;
            if (cumulative > p_ && i + 1 >= min_keep_) {
                keep = i + 1;
                break;
            }
        }
        std::vector<token_data> kept;
        kept.reserve(keep);
        for (size_t i = 0; i < keep; ++i) kept.push_back(cur.data[order[i]]);
        cur.data = std::move(kept);
        cur.sorted = false;  // ordered by typicality now, not by logit
    }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<typical_sampler>(*this); }

  private:
    float p_;
    size_t min_keep_;
};

void apply_temperature(token_data_array &cur, float t) {
    if (cur.data.empty()) return;
    if (t <= 0.0f) {
        // the limit of T -> 0: all the mass on the largest logit
        size_t best = 0;
        for (size_t i = 1; i < cur.data.size(); ++i)
            if (logit_greater(cur.data[i], cur.data[best])) best = i;
        for (size_t i = 0; i < cur.data.size(); ++i)
            if (i != best) cur.data[i].logit = -std::numeric_limits<float>::infinity();
        return;
    }
    for (auto &c : cur.data) c.logit /= t;
}

class temp_sampler final : public sampler {
  public:
    explicit temp_sampler(float t) : t_(t) {}
    const char *name() const override { return "temp"; }
    void apply(token_data_array &cur) override { apply_temperature(cur, t_); }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<temp_sampler>(*this); }

  private:
    float t_;
};

class penalties_sampler final : public sampler {
  public:
    penalties_sampler(int32_t last_n, float repeat, float freq, float present)
        : last_n_(last_n), repeat_(repeat), freq_(freq), present_(present) {}
    const char *name() const override { return "penalties"; }
    void accept(token t) override {
        if (last_n_ == 0) return;
        window_.push_back(t);
        ++counts_[t];
        if (last_n_ > 0 && window_.size() > size_t(last_n_)) {
            const token old = window_.front();
            window_.pop_front();
            if (--counts_[old] == 0) counts_.erase(old);
        }
    }
    void apply(token_data_array &cur) override {
        if (neutral()) return;
        for (auto &c : cur.data) {
            const auto it = counts_.find(c.id);
            if (it == counts_.end()) continue;
            const int32_t count = it->second;
            // dividing a negative logit would raise it: multiply instead, so both move down
            if (c.logit <= 0.0f)
                c.logit *= repeat_;
            else
                c.logit /= repeat_;
            c.logit -= float(count) * freq_ + present_;
        }
        cur.sorted = false;
    }
    std::optional<size_t> keeps_best(size_t n) const override {
        return neutral() ? std::optional<size_t>(n) : std::nullopt;
    }
    void reset() override {
        window_.clear();
        counts_.clear();
    }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<penalties_sampler>(*this); }

  private:
    bool neutral() const {
        return last_n_ == 0 || counts_.empty() || (repeat_ == 1.0f && freq_ == 0.0f && present_ == 0.0f);
    }
    int32_t last_n_;
    float repeat_, freq_, present_;
    std::deque<token> window_;                   // the last last_n_ accepted tokens, oldest first
    std::unordered_map<token, int32_t> counts_;  // occurrences in window_, only ids with count > 0
};

// Adds a bias to the logits of some tokens (-inf bans them). The candidates are looked up by id, so
// it works on arrays that earlier samplers shrank or reordered.
class logit_bias_sampler final : public sampler {
  public:
    explicit logit_bias_sampler(std::vector<std::pair<token, float>> biases) {
        for (const auto &[id, bias] : biases) biases_[id] += bias;
    }
    const char *name() const override { return "logit-bias"; }
    void apply(token_data_array &cur) override {
        if (biases_.empty()) return;
        for (auto &c : cur.data)
            if (const auto it = biases_.find(c.id); it != biases_.end()) c.logit += it->second;
        cur.sorted = false;
    }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<logit_bias_sampler>(*this); }

  private:
    std::unordered_map<token, float> biases_;
};

// Dynamic temperature: confident (low-entropy) distributions get a temperature near the bottom of
// the range, flat ones near the top.
class temp_ext_sampler final : public sampler {
  public:
    temp_ext_sampler(float t, float range, float exponent) : t_(t), range_(range), exponent_(exponent) {}
    const char *name() const override { return "temp-ext"; }
    void apply(token_data_array &cur) override {
        if (range_ <= 0.0f) {
            apply_temperature(cur, t_);
            return;
        }
        if (cur.data.size() <= 1) return;
        token_data_array_softmax(cur);
        double entropy = 0.0;
        for (const auto &c : cur.data)
            if (c.p > 0.0f) entropy -= double(c.p) * std::log(double(c.p));
        const double max_entropy = std::log(double(cur.data.size()));  // of the uniform distribution
        const float min_t = std::max(0.0f, t_ - range_), max_t = t_ + range_;
        const float t = min_t + (max_t - min_t) * float(std::pow(entropy / max_entropy, double(exponent_)));
        apply_temperature(cur, t);
        set_probabilities(cur);
    }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<temp_ext_sampler>(*this); }

  private:
    float t_, range_, exponent_;
};

class top_n_sigma_sampler final : public sampler {
  public:
    explicit top_n_sigma_sampler(float n) : n_(n) {}
    const char *name() const override { return "top-n-sigma"; }
    void apply(token_data_array &cur) override {
        if (n_ <= 0.0f || cur.data.size() <= 1) return;
        // masked (-inf) candidates take no part in the statistics
        const auto finite = [](const token_data &c) {
            return c.logit != -std::numeric_limits<float>::infinity();
        };
        float max_logit = -std::numeric_limits<float>::infinity();
        double sum = 0.0;
        size_t count = 0;
        for (const auto &c : cur.data)
            if (finite(c)) {
                max_logit = std::max(max_logit, c.logit);
                sum += c.logit;
                ++count;
            }
        const double mean = count ? sum / double(count) : 0.0;
        double squares = 0.0;
        for (const auto &c : cur.data)
            if (finite(c)) squares += (c.logit - mean) * (c.logit - mean);
        const double sigma = count ? std::sqrt(squares / double(count)) : 0.0;
        const float threshold = float(double(max_logit) - double(n_) * sigma);
        for (auto &c : cur.data)
            if (c.logit < threshold) {
                c.logit = -std::numeric_limits<float>::infinity();
                cur.sorted = false;
            }
        token_data_array_softmax(cur);
    }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<top_n_sigma_sampler>(*this); }

  private:
    float n_;
};

class xtc_sampler final : public seeded_sampler {
  public:
    xtc_sampler(float probability, float threshold, size_t min_keep, uint32_t seed)
        : seeded_sampler(seed), probability_(probability), threshold_(threshold), min_keep_(min_keep) {}
    const char *name() const override { return "xtc"; }
    void apply(token_data_array &cur) override {
        if (probability_ <= 0.0f || threshold_ > 0.5f || cur.data.size() < 2) return;
        if (float(uniform()) > probability_) return;
        token_data_array_softmax(cur);
        size_t last_top = 0;  // the least likely candidate that still reaches the threshold
        while (last_top + 1 < cur.data.size() && cur.data[last_top + 1].p >= threshold_) ++last_top;
        if (last_top == 0 || cur.data.size() - last_top < min_keep_) return;
        cur.data.erase(cur.data.begin(), cur.data.begin() + std::ptrdiff_t(last_top));
    }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<xtc_sampler>(*this); }
    // Like the established engine, a chain reports the seed of its selecting sampler, not XTC's.
    std::optional<uint32_t> seed() const override { return std::nullopt; }

  private:
    float probability_, threshold_;
    size_t min_keep_;
};

// What both mirostat versions share: mu, the draw among the kept candidates and mu's update.
class mirostat_base : public seeded_sampler {
  public:
    mirostat_base(uint32_t seed, float tau, float eta)
        : seeded_sampler(seed), tau_(tau), eta_(eta), mu_(2.0f * tau) {}
    void reset() override {
        seeded_sampler::reset();
        mu_ = 2.0f * tau_;
    }

  protected:
    // cur sorted and cut: renormalizes, selects one and moves mu toward the target surprise.
    void select(token_data_array &cur) {
        set_probabilities(cur);
        const size_t chosen = draw(cur);
        cur.selected = int64_t(chosen);
        const float surprise = -std::log2(cur.data[chosen].p);
        mu_ -= eta_ * (surprise - tau_);
    }

    float tau_, eta_;
    float mu_;  // the largest surprise (bits) allowed
};

class mirostat_sampler final : public mirostat_base {
  public:
    mirostat_sampler(uint32_t seed, float tau, float eta, int32_t m) : mirostat_base(seed, tau, eta), m_(m) {}
    const char *name() const override { return "mirostat"; }
    void apply(token_data_array &cur) override {
        if (cur.data.empty()) return;
        token_data_array_softmax(cur);
        const size_t n = cur.data.size();
        // least squares fit of log(p_i / p_i+1) = s log((i + 2) / (i + 1)): the Zipf exponent s
        float sum_tb = 0.0f, sum_tt = 0.0f;
        for (size_t i = 0; i + 1 < n && i + 1 < size_t(std::max(m_, 1)); ++i) {
            if (cur.data[i + 1].p <= 0.0f) break;  // a masked candidate: log(p / 0) would poison the fit
            const float t = std::log(float(i + 2) / float(i + 1));
            const float b = std::log(cur.data[i].p / cur.data[i + 1].p);
            sum_tb += t * b;
            sum_tt += t * t;
        }
        size_t k = 1;
        if (sum_tt > 0.0f) {
            const float s = sum_tb / sum_tt, e = s - 1.0f;
            const float k_real =
                std::pow(e * std::pow(2.0f, mu_) / (1.0f - std::pow(float(n), -e)), 1.0f / s);
            if (k_real >= float(n))
                k = n;
            else if (k_real >= 1.0f)  // false for NaN (s == 1) too
                k = size_t(k_real);
        }
        cur.data.resize(k);
        select(cur);
    }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<mirostat_sampler>(*this); }

  private:
    int32_t m_;  // candidates the exponent is estimated from
};

class mirostat_v2_sampler final : public mirostat_base {
  public:
    using mirostat_base::mirostat_base;
    const char *name() const override { return "mirostat-v2"; }
    void apply(token_data_array &cur) override {
        if (cur.data.empty()) return;
        token_data_array_softmax(cur);
        size_t keep = 0;
        while (keep < cur.data.size() && -std::log2(cur.data[keep].p) <= mu_) ++keep;
        cur.data.resize(std::max<size_t>(keep, 1));
        select(cur);
    }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<mirostat_v2_sampler>(*this); }
};

class dry_sampler final : public sampler {
  public:
    dry_sampler(float multiplier, float base, int32_t allowed_length, int32_t last_n,
                const std::vector<std::vector<token>> &breakers)
        : multiplier_(multiplier), base_(base), allowed_length_(allowed_length), last_n_(last_n) {
        for (const auto &b : breakers) {
            if (b.empty()) continue;
            breakers_.emplace(b[0], std::vector<token>(b.begin() + 1, b.end()));
            if (b.size() == 1) single_token_breakers_.insert(b[0]);
        }
    }
    const char *name() const override { return "dry"; }
    void accept(token t) override {
        if (!on()) return;
        history_.push_back(t);
        if (last_n_ > 0 && history_.size() > size_t(last_n_)) history_.pop_front();
    }
    void apply(token_data_array &cur) override {
        if (!on()) return;
        const int64_t n = int64_t(history_.size());
        if (n <= allowed_length_) return;
        const int64_t limit = repetition_limit();
        if (limit < allowed_length_) return;
        // For each candidate, the longest repetition it would extend: the earlier occurrence of the
        // last `len` tokens ending at position e makes history_[e + 1] the token that continues it.
        const std::vector<int32_t> z = reversed_z_array();
        std::unordered_map<token, int64_t> longest;
        for (int64_t k = 1; k < n; ++k) {
            const int64_t len = std::min<int64_t>(z[size_t(k)], limit);
            if (len < allowed_length_) continue;
            int64_t &best = longest[history_[size_t(n - k)]];
            best = std::max(best, len);
        }
        if (longest.empty()) return;
        // base^exponent stays below FLT_MAX (whose natural log is 88.72...)
        const int64_t max_exponent = base_ > 1.000001f ? int64_t(88.7228391f / std::log(base_)) : 0;
        for (auto &c : cur.data) {
            const auto it = longest.find(c.id);
            if (it == longest.end() || single_token_breakers_.count(c.id)) continue;
            int64_t exponent = it->second - allowed_length_;
            if (max_exponent > 0) exponent = std::min(exponent, max_exponent);
            c.logit -= multiplier_ * float(std::pow(double(base_), double(exponent)));
            cur.sorted = false;
        }
    }
    void reset() override { history_.clear(); }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<dry_sampler>(*this); }

  private:
    bool on() const { return multiplier_ != 0.0f && base_ >= 1.0f && last_n_ != 0; }

    // How many of the most recent tokens a repetition may cover: those after the most recent
    // complete sequence breaker (the longest one when several start at the same token).
    int64_t repetition_limit() const {
        const int64_t n = int64_t(history_.size());
        if (breakers_.empty()) return n;
        for (int64_t i = 0; i < n; ++i) {  // i: how far from the end the breaker's head is
            const auto [first, last] = breakers_.equal_range(history_[size_t(n - 1 - i)]);
            int64_t longest_tail = -1;
            for (auto it = first; it != last; ++it) {
                const int64_t len = int64_t(it->second.size());
                if (len <= longest_tail || len > i) continue;
                if (std::equal(it->second.begin(), it->second.end(), history_.begin() + (n - i)))
                    longest_tail = len;
            }
            if (longest_tail >= 0) return i - longest_tail;
        }
        return n;
    }

    // z[k] for the history read backwards: how many tokens, counted back from the one k before the
    // end, match the most recent ones counted back from the end (Z-algorithm, linear time).
    std::vector<int32_t> reversed_z_array() const {
        const int64_t n = int64_t(history_.size());
        const auto back = [&](int64_t j) { return history_[size_t(n - 1 - j)]; };
        std::vector<int32_t> z(size_t(n), 0);
        int64_t box_begin = 0, box_end = 0;  // the matching window reaching furthest: [begin, end)
        for (int64_t k = 1; k < n; ++k) {
            int64_t len = k < box_end ? std::min<int64_t>(box_end - k, z[size_t(k - box_begin)]) : 0;
            while (k + len < n && back(len) == back(k + len)) ++len;
            z[size_t(k)] = int32_t(len);
            if (k + len > box_end) {
                box_begin = k;
                box_end = k + len;
            }
        }
        return z;
    }

    float multiplier_, base_;
    int32_t allowed_length_, last_n_;
    std::unordered_multimap<token, std::vector<token>> breakers_;  // head -> the tokens after it
    std::unordered_set<token> single_token_breakers_;
    std::deque<token> history_;  // the last last_n_ accepted tokens, oldest first
};

void check_probability(const char *what, float p) {
    if (!(p >= 0.0f && p <= 1.0f))
        throw error("sampling parameters: " + std::string(what) + " is " + std::to_string(p) +
                    ", must be in [0, 1]");
}

void check_at_least(const char *what, float v, float lowest) {
    if (!(v >= lowest) || std::isinf(v))
        throw error("sampling parameters: " + std::string(what) + " is " + std::to_string(v) +
                    ", must be a finite number >= " + std::to_string(lowest));
}

struct sampler_type_info {
    sampler_type type;
    const char *name;
    char letter;
};
// In the established default order, which is also the enum's.
constexpr sampler_type_info sampler_types[] = {
    {sampler_type::penalties, "penalties", 'e'},
    {sampler_type::dry, "dry", 'd'},
    {sampler_type::top_n_sigma, "top_n_sigma", 's'},
    {sampler_type::top_k, "top_k", 'k'},
    {sampler_type::typical_p, "typ_p", 'y'},
    {sampler_type::top_p, "top_p", 'p'},
    {sampler_type::min_p, "min_p", 'm'},
    {sampler_type::xtc, "xtc", 'x'},
    {sampler_type::temperature, "temperature", 't'},
};
constexpr std::pair<const char *, sampler_type> sampler_aliases[] = {
    {"top-k", sampler_type::top_k},
    {"top-p", sampler_type::top_p},
    {"top-n-sigma", sampler_type::top_n_sigma},
    {"nucleus", sampler_type::top_p},
    {"typical-p", sampler_type::typical_p},
    {"typical", sampler_type::typical_p},
    {"typ-p", sampler_type::typical_p},
    {"typ", sampler_type::typical_p},
    {"min-p", sampler_type::min_p},
    {"temp", sampler_type::temperature},
};
// Names the established engine knows for samplers weft does not have: refused as such.
constexpr const char *missing_samplers[] = {"infill", "adaptive_p", "adaptive-p"};
constexpr char missing_sampler_letters[] = {'i', 'a'};

const sampler_type_info &info_of(sampler_type type) {
    for (const auto &i : sampler_types)
        if (i.type == type) return i;
    WEFT_ASSERT(false);
    return sampler_types[0];
}

std::string_view trim_blanks(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
}

// The sampler that stands for `type` in a chain built from params; nullptr when it is off and a
// no-op (DRY, top-n-sigma, XTC), so the chain describes what actually runs.
std::unique_ptr<sampler> make_listed_sampler(sampler_type type, const sampling_params &params,
                                             const vocab *vocab) {
    switch (type) {
        case sampler_type::penalties:
            return make_penalties(params.penalty_last_n, params.penalty_repeat, params.penalty_freq,
                                  params.penalty_present);
        case sampler_type::dry: {
            if (params.dry_multiplier == 0.0f || params.dry_penalty_last_n == 0) return nullptr;
            std::vector<std::vector<token>> breakers;
            if (!params.dry_sequence_breakers.empty()) {
                if (!vocab) throw error("sampling parameters: DRY's sequence breakers need the vocabulary");
                breakers = dry_sequence_breaker_tokens(*vocab, params.dry_sequence_breakers);
            }
            return make_dry(params.dry_multiplier, params.dry_base, params.dry_allowed_length,
                            params.dry_penalty_last_n, std::move(breakers));
        }
        case sampler_type::top_n_sigma:
            return params.top_n_sigma > 0.0f ? make_top_n_sigma(params.top_n_sigma) : nullptr;
        case sampler_type::top_k:
            return make_top_k(params.top_k);
        case sampler_type::typical_p:
            return make_typical(params.typical_p, params.min_keep);
        case sampler_type::top_p:
            return make_top_p(params.top_p, params.min_keep);
        case sampler_type::min_p:
            return make_min_p(params.min_p, params.min_keep);
        case sampler_type::xtc:
            if (params.xtc_probability <= 0.0f || params.xtc_threshold > 0.5f) return nullptr;
            return make_xtc(params.xtc_probability, params.xtc_threshold, params.min_keep, params.seed);
        case sampler_type::temperature:
            if (params.dynatemp_range > 0.0f)
                return make_temp_ext(params.temp, params.dynatemp_range, params.dynatemp_exponent);
            return make_temp(params.temp);
    }
    WEFT_ASSERT(false);
    return nullptr;
}

}  // namespace

namespace {

// A NaN would break the ordering every sampler sorts by: refuse it here, by name.
void check_logits(const float *logits, int32_t n_vocab) {
    if (n_vocab <= 0) throw error("sampler: n_vocab is " + std::to_string(n_vocab) + ", must be positive");
    if (!logits) throw error("sampler: logits pointer is null");
    int32_t n_nan = 0;
    for (int32_t i = 0; i < n_vocab; ++i) n_nan += logits[i] != logits[i];  // no branch: vectorizes
    if (n_nan == 0) return;
    for (int32_t i = 0; i < n_vocab; ++i)
        if (std::isnan(logits[i]))
            throw error("sampler: the logit of token " + std::to_string(i) + " is NaN");
}

}  // namespace

void token_data_array_fill(token_data_array &cur, const float *logits, int32_t n_vocab) {
    check_logits(logits, n_vocab);
    cur.data.resize(size_t(n_vocab));
    cur.selected = -1;
    cur.sorted = false;
    for (int32_t i = 0; i < n_vocab; ++i) cur.data[size_t(i)] = token_data{i, logits[i], 0.0f};
}

void token_data_array_fill_best(token_data_array &cur, const float *logits, int32_t n_vocab, size_t k) {
    check_logits(logits, n_vocab);
    k = std::min(k, size_t(n_vocab));
    cur.data.clear();
    cur.selected = -1;
    cur.sorted = true;
    if (k == 0) return;
    // A heap of the best k so far, its worst at the front (the order of logit_greater). Ids come in
    // ascending order, so a later candidate of the same logit is worse: only a greater logit enters.
    auto &kept = cur.data;
    for (int32_t i = 0; i < int32_t(k); ++i) kept.push_back(token_data{i, logits[i], 0.0f});
    std::make_heap(kept.begin(), kept.end(), logit_greater);
    float worst = kept.front().logit;
    auto offer = [&](int32_t i) {
        if (!(logits[i] > worst)) return;
        std::pop_heap(kept.begin(), kept.end(), logit_greater);
        kept.back() = token_data{i, logits[i], 0.0f};
        std::push_heap(kept.begin(), kept.end(), logit_greater);
        worst = kept.front().logit;
    };
    // most runs of logits hold nothing better than the worst kept: a count of those above it (a
    // loop without branches, which vectorizes) says so, and only the others are looked at one by one
    constexpr int32_t run = 64;
    int32_t i = int32_t(k);
    for (; i + run <= n_vocab; i += run) {
        int32_t above = 0;
        for (int32_t j = 0; j < run; ++j) above += logits[i + j] > worst;
        if (above == 0) continue;
        for (int32_t j = 0; j < run; ++j) offer(i + j);
    }
    for (; i < n_vocab; ++i) offer(i);
    std::sort_heap(kept.begin(), kept.end(), logit_greater);
}

token_data_array token_data_array_from_logits(const float *logits, int32_t n_vocab) {
    token_data_array cur;
    token_data_array_fill(cur, logits, n_vocab);
    return cur;
}

void token_data_array_softmax(token_data_array &cur) {
    sort_descending(cur);
    set_probabilities(cur);
}

sampler::~sampler() = default;

token sampler::sample(const float *logits, int32_t n_vocab) {
    // One candidate buffer per thread, kept between calls: a fresh multi-megabyte vector per token
    // (150k-entry vocabularies) costs page faults on every step.
    thread_local token_data_array cur;
    const size_t n = n_vocab > 0 ? size_t(n_vocab) : 0;  // 0: the fill below throws, naming it
    if (const size_t best = best_needed(n); best < n)
        token_data_array_fill_best(cur, logits, n_vocab, best);
    else
        token_data_array_fill(cur, logits, n_vocab);
    apply(cur);
    if (cur.selected < 0 || size_t(cur.selected) >= cur.data.size())
        throw error(std::string("sampler '") + name() +
                    "' selected no token (end the chain with a greedy or dist sampler)");
    const token t = cur.data[size_t(cur.selected)].id;
    accept(t);
    return t;
}

sampler_chain &sampler_chain::add(std::unique_ptr<sampler> s) {
    WEFT_ASSERT(s != nullptr);
    samplers_.push_back(std::move(s));
    return *this;
}

const sampler &sampler_chain::at(size_t i) const {
    WEFT_ASSERT(i < samplers_.size());
    return *samplers_[i];
}

std::string sampler_chain::describe() const {
    std::string out;
    for (const auto &s : samplers_) {
        if (!out.empty()) out += " -> ";
        const auto *inner = dynamic_cast<const sampler_chain *>(s.get());
        out += inner ? inner->describe() : s->name();
    }
    return out.empty() ? "(empty)" : out;
}

const sampler *sampler_chain::after_leading_truncations(size_t &n) const {
    for (const auto &s : samplers_) {
        const std::optional<size_t> kept = s->keeps_best(n);
        if (!kept) return s.get();
        n = *kept;
    }
    return nullptr;
}

std::optional<size_t> sampler_chain::keeps_best(size_t n) const {
    if (after_leading_truncations(n)) return std::nullopt;
    return n;
}

size_t sampler_chain::best_needed(size_t n) const {
    const sampler *first_other = after_leading_truncations(n);
    return first_other ? first_other->best_needed(n) : n;
}

void sampler_chain::accept(token t) {
    for (auto &s : samplers_) s->accept(t);
    accepted_.push_back(t);
}

void sampler_chain::apply(token_data_array &cur) {
    for (auto &s : samplers_) s->apply(cur);
}

void sampler_chain::reset() {
    for (auto &s : samplers_) s->reset();
    accepted_.clear();
}

std::unique_ptr<sampler> sampler_chain::clone() const {
    auto copy = std::make_unique<sampler_chain>();
    for (const auto &s : samplers_) copy->add(s->clone());
    copy->accepted_ = accepted_;
    return copy;
}

std::optional<uint32_t> sampler_chain::seed() const {
    for (const auto &s : samplers_)
        if (auto seed = s->seed()) return seed;
    return std::nullopt;
}

std::unique_ptr<sampler> make_greedy() {
    return std::make_unique<greedy_sampler>();
}
std::unique_ptr<sampler> make_dist(uint32_t seed) {
    return std::make_unique<dist_sampler>(seed);
}
std::unique_ptr<sampler> make_top_k(int32_t k) {
    return std::make_unique<top_k_sampler>(k);
}
std::unique_ptr<sampler> make_top_p(float p, size_t min_keep) {
    return std::make_unique<top_p_sampler>(p, min_keep);
}
std::unique_ptr<sampler> make_min_p(float p, size_t min_keep) {
    return std::make_unique<min_p_sampler>(p, min_keep);
}
std::unique_ptr<sampler> make_typical(float p, size_t min_keep) {
    return std::make_unique<typical_sampler>(p, min_keep);
}
std::unique_ptr<sampler> make_temp(float t) {
    return std::make_unique<temp_sampler>(t);
}
std::unique_ptr<sampler> make_penalties(int32_t last_n, float repeat, float freq, float present) {
    return std::make_unique<penalties_sampler>(last_n, repeat, freq, present);
}

std::unique_ptr<sampler> make_logit_bias(std::vector<std::pair<token, float>> biases) {
    for (const auto &[id, bias] : biases)
        if (std::isnan(bias)) throw error("logit bias of token " + std::to_string(id) + " is NaN");
    return std::make_unique<logit_bias_sampler>(std::move(biases));
}

std::unique_ptr<sampler> make_temp_ext(float t, float range, float exponent) {
    return std::make_unique<temp_ext_sampler>(t, range, exponent);
}
std::unique_ptr<sampler> make_top_n_sigma(float n) {
    return std::make_unique<top_n_sigma_sampler>(n);
}
std::unique_ptr<sampler> make_xtc(float probability, float threshold, size_t min_keep, uint32_t seed) {
    return std::make_unique<xtc_sampler>(probability, threshold, min_keep, seed);
}
std::unique_ptr<sampler> make_mirostat(uint32_t seed, float tau, float eta, int32_t m) {
    return std::make_unique<mirostat_sampler>(seed, tau, eta, m);
}
std::unique_ptr<sampler> make_mirostat_v2(uint32_t seed, float tau, float eta) {
    return std::make_unique<mirostat_v2_sampler>(seed, tau, eta);
}

std::unique_ptr<sampler> make_dry(float multiplier, float base, int32_t allowed_length, int32_t last_n,
                                  std::vector<std::vector<token>> breakers) {
    if (std::isnan(multiplier) || std::isnan(base)) throw error("DRY: multiplier or base is NaN");
    if (allowed_length < 0)
        throw error("DRY: allowed length is " + std::to_string(allowed_length) + ", must be >= 0");
    if (last_n < -1) throw error("DRY: last_n is " + std::to_string(last_n) + ", must be >= -1");
    return std::make_unique<dry_sampler>(multiplier, base, allowed_length, last_n, breakers);
}

std::vector<std::vector<token>> dry_sequence_breaker_tokens(const vocab &v,
                                                            const std::vector<std::string> &breakers) {
    constexpr size_t max_breaker_bytes = 40, max_tail_tokens = 20;
    std::vector<std::string> wanted;
    for (size_t i = 0; i < breakers.size(); ++i) {
        if (breakers[i].empty()) throw error("DRY sequence breaker " + std::to_string(i) + " is empty");
        wanted.push_back(breakers[i].substr(0, max_breaker_bytes));
    }
    std::vector<std::vector<token>> out;
    std::set<std::vector<token>> seen;
    const auto add = [&](std::vector<token> seq) {
        if (seen.insert(seq).second) out.push_back(std::move(seq));
    };
    for (token id = 0; id < v.n_tokens(); ++id) {
        const std::string text = v.detokenize(std::span<const token>(&id, 1), true);
        for (const std::string &breaker : wanted) {
            if (text.find(breaker) != std::string::npos) {
                add({id});
                continue;
            }
            // text ends with the breaker's first `overlap` bytes: the rest must follow as tokens
            for (size_t pos = text.find(breaker[0]); pos != std::string::npos;
                 pos = text.find(breaker[0], pos + 1)) {
                const size_t overlap = text.size() - pos;  // < breaker.size(): text does not hold it whole
                if (text.compare(pos, overlap, breaker, 0, overlap) != 0) continue;
                std::vector<token> seq{id};
                std::vector<token> tail = v.tokenize(std::string_view(breaker).substr(overlap), false, false);
                if (tail.size() > max_tail_tokens) tail.resize(max_tail_tokens);
                seq.insert(seq.end(), tail.begin(), tail.end());
                add(std::move(seq));
            }
        }
    }
    return out;
}

std::vector<sampler_type> default_sampler_sequence() {
    std::vector<sampler_type> out;
    for (const auto &i : sampler_types) out.push_back(i.type);
    return out;
}

const char *sampler_type_name(sampler_type type) {
    return info_of(type).name;
}

char sampler_type_letter(sampler_type type) {
    return info_of(type).letter;
}

std::vector<sampler_type> sampler_types_from_names(const std::vector<std::string> &names) {
    std::vector<sampler_type> out;
    for (const std::string &raw : names) {
        const std::string_view name = trim_blanks(raw);
        if (name.empty()) continue;
        const auto canonical = std::find_if(std::begin(sampler_types), std::end(sampler_types),
                                            [&](const auto &i) { return name == i.name; });
        if (canonical != std::end(sampler_types)) {
            out.push_back(canonical->type);
            continue;
        }
        const auto alias = std::find_if(std::begin(sampler_aliases), std::end(sampler_aliases),
                                        [&](const auto &a) { return name == a.first; });
        if (alias != std::end(sampler_aliases)) {
            out.push_back(alias->second);
            continue;
        }
        const bool missing = std::find(std::begin(missing_samplers), std::end(missing_samplers), name) !=
                             std::end(missing_samplers);
        std::string valid, aliases;
        for (const auto &i : sampler_types) valid += (valid.empty() ? "" : ", ") + std::string(i.name);
        for (const auto &a : sampler_aliases) aliases += (aliases.empty() ? "" : ", ") + std::string(a.first);
        throw error("sampler '" + std::string(name) +
                    (missing ? "' is not supported by weft" : "' is unknown") + "; the samplers are " +
                    valid + " (also written " + aliases + ")");
    }
    return out;
}

std::vector<sampler_type> sampler_types_from_list(std::string_view list) {
    std::vector<std::string> names;
    for (size_t begin = 0; begin <= list.size();) {
        const size_t end = std::min(list.find(';', begin), list.size());
        names.emplace_back(list.substr(begin, end - begin));
        begin = end + 1;
    }
    return sampler_types_from_names(names);
}

std::vector<sampler_type> sampler_types_from_letters(std::string_view letters) {
    std::vector<sampler_type> out;
    for (const char c : letters) {
        const auto it = std::find_if(std::begin(sampler_types), std::end(sampler_types),
                                     [c](const auto &i) { return i.letter == c; });
        if (it != std::end(sampler_types)) {
            out.push_back(it->type);
            continue;
        }
        const bool missing = std::find(std::begin(missing_sampler_letters), std::end(missing_sampler_letters),
                                       c) != std::end(missing_sampler_letters);
        std::string valid;
        for (const auto &i : sampler_types)
            valid += (valid.empty() ? "" : ", ") + std::string(1, i.letter) + " " + i.name;
        throw error("sampler letter '" + std::string(1, c) + "' in '" + std::string(letters) +
                    (missing ? "' names a sampler weft does not support" : "' is unknown") +
                    "; the letters are " + valid);
    }
    return out;
}

void check_sampling_params(const sampling_params &params) {
    if (std::isnan(params.temp)) throw error("sampling parameters: temp is NaN");
    check_probability("top_p", params.top_p);
    check_probability("min_p", params.min_p);
    check_probability("typical_p", params.typical_p);
    if (!(params.penalty_repeat > 0.0f))
        throw error("sampling parameters: penalty_repeat is " + std::to_string(params.penalty_repeat) +
                    ", must be positive (1 = off)");
    if (std::isnan(params.penalty_freq) || std::isnan(params.penalty_present))
        throw error("sampling parameters: penalty_freq / penalty_present is NaN");
    check_at_least("dynatemp_range", params.dynatemp_range, 0.0f);
    check_at_least("dynatemp_exponent", params.dynatemp_exponent, 0.0f);
    if (std::isnan(params.top_n_sigma)) throw error("sampling parameters: top_n_sigma is NaN");
    check_probability("xtc_probability", params.xtc_probability);
    check_probability("xtc_threshold", params.xtc_threshold);
    check_at_least("dry_multiplier", params.dry_multiplier, 0.0f);
    check_at_least("dry_base", params.dry_base, 1.0f);
    if (params.dry_allowed_length < 0)
        throw error("sampling parameters: dry_allowed_length is " +
                    std::to_string(params.dry_allowed_length) + ", must be >= 0");
    if (params.dry_penalty_last_n < -1)
        throw error("sampling parameters: dry_penalty_last_n is " +
                    std::to_string(params.dry_penalty_last_n) + ", must be >= -1 (-1: every token, 0: off)");
    for (size_t i = 0; i < params.dry_sequence_breakers.size(); ++i)
        if (params.dry_sequence_breakers[i].empty())
            throw error("sampling parameters: DRY sequence breaker " + std::to_string(i) + " is empty");
    if (params.mirostat < 0 || params.mirostat > 2)
        throw error("sampling parameters: mirostat is " + std::to_string(params.mirostat) +
                    ", must be 0 (off), 1 or 2");
    check_at_least("mirostat_tau", params.mirostat_tau, 0.0f);
    check_at_least("mirostat_eta", params.mirostat_eta, 0.0f);
}

std::unique_ptr<sampler_chain> make_sampler_chain(const sampling_params &params, const vocab *vocab) {
    if (!params.grammar.empty())
        throw error("sampling parameters: a grammar needs the vocabulary (make_sampler_chain of grammar.h)");
    check_sampling_params(params);
    auto chain = std::make_unique<sampler_chain>();
    // the tokens the model's file says are never to be sampled (tokenizer.ggml.suppress_tokens), as
    // a -inf bias before the request's own, as the reference's sampler does
    std::vector<std::pair<token, float>> biases;
    if (vocab)
        for (const token t : vocab->suppressed_tokens()) biases.emplace_back(t, -INFINITY);
    biases.insert(biases.end(), params.logit_bias.begin(), params.logit_bias.end());
    if (!biases.empty()) chain->add(make_logit_bias(std::move(biases)));
    if (params.mirostat != 0) {
        // mirostat does its own truncation: it replaces the listed samplers (temp <= 0: the best one)
        if (params.temp <= 0.0f) {
            chain->add(make_greedy());
        } else {
            chain->add(make_temp(params.temp));
            chain->add(params.mirostat == 1
                           ? make_mirostat(params.seed, params.mirostat_tau, params.mirostat_eta)
                           : make_mirostat_v2(params.seed, params.mirostat_tau, params.mirostat_eta));
        }
        return chain;
    }
    // With temp <= 0 the chain picks the best token: it keeps the samplers that rewrite logits
    // (penalties, DRY), which can change which token that is, and skips those that only narrow the
    // candidates down.
    const bool greedy = params.temp <= 0.0f;
    for (const sampler_type type : params.samplers) {
        if (greedy && type != sampler_type::penalties && type != sampler_type::dry) continue;
        if (auto s = make_listed_sampler(type, params, vocab)) chain->add(std::move(s));
    }
    chain->add(greedy ? make_greedy() : make_dist(params.seed));
    return chain;
}

}  // namespace weft
