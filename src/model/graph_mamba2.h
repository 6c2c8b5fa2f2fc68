// src/model/graph_mamba2.h — the Mamba-2 mixer (mamba2, and granitehybrid's recurrent layers): one
// input projection to z, x, B, C and dt; a causal convolution over x, B, C; the scan of heads whose
// state decays by one scalar per head and token (B and C shared by groups of heads); the D skip; y
// gated by silu(z) and RMS-normed over groups of channels; the output projection.
#pragma once

#include <cstdint>

#include "model/graph_helpers.h"

namespace weft {

class gguf_file;
class tensor_loader;

// Checks the ssm keys of a Mamba-2 mixer (inner size, state size, heads = time_step_rank, groups,
// convolution width) and sets the recurrent state sizes: the convolution's last d_conv - 1 inputs of
// its d_inner + 2 n_group d_state channels, and d_state floats per channel. Throws weft::error naming
// the file and key.
void set_mamba2_hparams(const gguf_file &f, model_hparams &hp);

// The mixer's weights of layer il (ssm_in, ssm_conv1d and its bias, ssm_dt.bias, ssm_a, ssm_d,
// ssm_norm, ssm_out).
void create_mamba2_mixer(tensor_loader &tl, const model_hparams &hp, int64_t il, layer_weights &l);

// The mixer of recurrent layer il on the normed x [n_embd, n_tokens]: [n_embd, n_tokens].
tensor *build_mamba2_mixer(graph_builder &b, const layer_weights &l, tensor *x, int64_t il);

}  // namespace weft
