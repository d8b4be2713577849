// Diffusion transformers (models/dit/<name>.yaml) and the cost of one denoising step: a full
// non-causal transformer pass over the image's patch tokens (adaLN modulation, attention,
// MLP, and cross-attention to text tokens or joint text-image attention where the model has it).
#pragma once
#include <memory>
#include <string>

#include "config/schema.h"
#include "hardware/cost_model.h"

namespace sluice {

// A DiT's shape. `layers` are its blocks (Flux: the double-stream ones, `single_layers` the
// single-stream ones after them).
struct DitSpec {
  std::string name;
  int layers = 0, single_layers = 0, hidden = 0, heads = 0, head_dim = 0, patch = 2, latent_channels = 4;
  double mlp_ratio = 4;
  bool learn_sigma = false, cross_attention = false, adaln_single = false, rope = false, qk_norm = false;
  int text_tokens = 0, text_width = 0;
  double parameters() const;  // count, from the shape (embedders' small MLPs included roughly)
  // The decoder-shaped stand-in a CostModel is built over (its layers, widths and heads).
  ModelSpec as_model() const;
};

std::shared_ptr<Schema> dit_schema();
DitSpec load_dit(const std::string& name, const Origin& at = Origin{"command line", 0, 0});
// Whether models/dit/ holds `name`.
bool is_dit(const std::string& name);

// One denoising step of `patch_tokens` image tokens for `batch` images on one device, kernel
// by kernel under the cost model's implementation (pytorch-lean / -naive: the reference
// PyTorch code's kernels; fused: norm+modulate, gate+residual and activation fused).
IterationCost dit_step(const CostModel& cm, const DitSpec& dit, long patch_tokens, int batch = 1);

}  // namespace sluice
