// src/runtime/sampling.cpp — candidate arrays, each sampler, the sampler chain and the default chain.
#include "weft/runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>
#include <random>
#include <unordered_map>

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
    std::unique_ptr<sampler> clone() const override { return std::make_unique<greedy_sampler>(*this); }
};

class dist_sampler final : public sampler {
  public:
    explicit dist_sampler(uint32_t seed) : seed_(seed) { reset(); }
    const char *name() const override { return "dist"; }
    void apply(token_data_array &cur) override {
        if (cur.data.empty()) return;
        set_probabilities(cur);  // the draw walks the array in its current order, sorted or not
        // One 32-bit draw mapped to [0, 1): the generator's output is fixed by the standard, unlike
        // std::uniform_real_distribution's, so a seed reproduces the same tokens everywhere.
        const double u = double(rng_()) * (1.0 / 4294967296.0);
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
        cur.selected = int64_t(chosen);
    }
    void reset() override {
        seed_used_ = seed_ == sampler_seed_random ? std::random_device{}() : seed_;
        rng_.seed(seed_used_);
    }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<dist_sampler>(*this); }
    std::optional<uint32_t> seed() const override { return seed_used_; }

  private:
    uint32_t seed_;       // as asked (may be sampler_seed_random)
    uint32_t seed_used_;  // the seed the generator actually got
    std::mt19937 rng_;
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

class temp_sampler final : public sampler {
  public:
    explicit temp_sampler(float t) : t_(t) {}
    const char *name() const override { return "temp"; }
    void apply(token_data_array &cur) override {
        if (cur.data.empty()) return;
        if (t_ <= 0.0f) {
            // the limit of T -> 0: all the mass on the largest logit
            size_t best = 0;
            for (size_t i = 1; i < cur.data.size(); ++i)
                if (logit_greater(cur.data[i], cur.data[best])) best = i;
            for (size_t i = 0; i < cur.data.size(); ++i)
                if (i != best) cur.data[i].logit = -std::numeric_limits<float>::infinity();
            return;
        }
        for (auto &c : cur.data) c.logit /= t_;
    }
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
        if (last_n_ == 0 || counts_.empty()) return;
        if (repeat_ == 1.0f && freq_ == 0.0f && present_ == 0.0f) return;
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
    void reset() override {
        window_.clear();
        counts_.clear();
    }
    std::unique_ptr<sampler> clone() const override { return std::make_unique<penalties_sampler>(*this); }

  private:
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

void check_probability(const char *what, float p) {
    if (!(p >= 0.0f && p <= 1.0f))
        throw error("sampling parameters: " + std::string(what) + " is " + std::to_string(p) +
                    ", must be in [0, 1]");
}

}  // namespace

void token_data_array_fill(token_data_array &cur, const float *logits, int32_t n_vocab) {
    if (n_vocab <= 0) throw error("sampler: n_vocab is " + std::to_string(n_vocab) + ", must be positive");
    if (!logits) throw error("sampler: logits pointer is null");
    cur.data.resize(size_t(n_vocab));
    cur.selected = -1;
    cur.sorted = false;
    for (int32_t i = 0; i < n_vocab; ++i) {
        // a NaN would break the ordering every sampler sorts by: refuse it here, by name
        if (std::isnan(logits[i]))
            throw error("sampler: the logit of token " + std::to_string(i) + " is NaN");
        cur.data[size_t(i)] = token_data{i, logits[i], 0.0f};
    }
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

std::unique_ptr<sampler_chain> make_sampler_chain(const sampling_params &params) {
    if (!params.grammar.empty())
        throw error("sampling parameters: a grammar needs the vocabulary (make_sampler_chain of grammar.h)");
    if (std::isnan(params.temp)) throw error("sampling parameters: temp is NaN");
    check_probability("top_p", params.top_p);
    check_probability("min_p", params.min_p);
    check_probability("typical_p", params.typical_p);
    if (!(params.penalty_repeat > 0.0f))
        throw error("sampling parameters: penalty_repeat is " + std::to_string(params.penalty_repeat) +
                    ", must be positive (1 = off)");
    if (std::isnan(params.penalty_freq) || std::isnan(params.penalty_present))
        throw error("sampling parameters: penalty_freq / penalty_present is NaN");

    auto chain = std::make_unique<sampler_chain>();
    if (!params.logit_bias.empty()) chain->add(make_logit_bias(params.logit_bias));
    chain->add(make_penalties(params.penalty_last_n, params.penalty_repeat, params.penalty_freq,
                              params.penalty_present));
    if (params.temp <= 0.0f) {
        chain->add(make_greedy());
        return chain;
    }
    chain->add(make_top_k(params.top_k));
    chain->add(make_typical(params.typical_p, params.min_keep));
    chain->add(make_top_p(params.top_p, params.min_keep));
    chain->add(make_min_p(params.min_p, params.min_keep));
    chain->add(make_temp(params.temp));
    chain->add(make_dist(params.seed));
    return chain;
}

}  // namespace weft
