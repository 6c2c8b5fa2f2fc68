// src/model/architecture.h — the architecture interface and the registry keyed by general.architecture.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "weft/model/model.h"

namespace weft {

class tensor_loader;
class graph_builder;

class architecture {
  public:
    virtual ~architecture() = default;
    virtual const char *name() const = 0;
    // Architecture-specific hyper-parameters on top of read_hparams (rope mode, extra keys).
    virtual void adjust_hparams(const gguf_file &f, model_hparams &hp) const = 0;
    // Creates every weight by name with its expected shape.
    virtual void create_tensors(tensor_loader &tl, const model_hparams &hp, model_weights &w) const = 0;
    // Records one ubatch's graph; returns through b.finish().
    virtual graph_inputs build_graph(graph_builder &b) const = 0;
    // Where each cached key head holds its rotary dims, so that moving a cell's position can rotate
    // its key by the difference (RoPE rotations compose); nullopt where a key's position cannot be
    // changed after the fact. Default: the first n_rot dims of every head.
    virtual std::optional<cached_k_rope> k_rope_layout(const model_hparams &hp) const {
        return cached_k_rope{0, hp.n_rot};
    }
};

struct architecture_entry {
    const char *name;  // general.architecture
    std::unique_ptr<architecture> (*make)();
};

// Every registered architecture (explicit list: static-library objects are not pulled in by
// self-registration).
std::span<const architecture_entry> architecture_registry();

// The factories, one per arch_*.cpp.
std::unique_ptr<architecture> make_arch_llama();
std::unique_ptr<architecture> make_arch_qwen2();
std::unique_ptr<architecture> make_arch_qwen3();
std::unique_ptr<architecture> make_arch_granite();
std::unique_ptr<architecture> make_arch_starcoder2();
std::unique_ptr<architecture> make_arch_gemma();
std::unique_ptr<architecture> make_arch_gemma2();
std::unique_ptr<architecture> make_arch_phi2();
std::unique_ptr<architecture> make_arch_phi3();
std::unique_ptr<architecture> make_arch_olmo2();
std::unique_ptr<architecture> make_arch_command_r();
std::unique_ptr<architecture> make_arch_bert();
std::unique_ptr<architecture> make_arch_qwen2moe();
std::unique_ptr<architecture> make_arch_deepseek2();
std::unique_ptr<architecture> make_arch_qwen3moe();
std::unique_ptr<architecture> make_arch_gemma3();
std::unique_ptr<architecture> make_arch_gemma4();
std::unique_ptr<architecture> make_arch_mamba();
std::unique_ptr<architecture> make_arch_lfm2();
std::unique_ptr<architecture> make_arch_mamba2();
std::unique_ptr<architecture> make_arch_granitehybrid();
std::unique_ptr<architecture> make_arch_qwen3next();
std::unique_ptr<architecture> make_arch_qwen35();
std::unique_ptr<architecture> make_arch_qwen35moe();
std::unique_ptr<architecture> make_arch_smollm3();
std::unique_ptr<architecture> make_arch_glm4moe();
std::unique_ptr<architecture> make_arch_gpt_oss();
std::unique_ptr<architecture> make_arch_llama4();
std::unique_ptr<architecture> make_arch_mistral3();

}  // namespace weft
