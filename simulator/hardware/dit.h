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

// The share of one denoising step that one device computes under a parallel strategy
// (workloads/diffusion): which tokens, heads, GEMM widths and blocks it holds. The defaults
// are the whole step on one device (dit_step).
struct DitPart {
  double rows = -1;          // image tokens through its linear layers and elementwise kernels (-1: all)
  double text_rows = -1;     // text tokens through its text stream (-1: all; sequence parallelism replicates them)
  double q = -1, kv = -1;    // image-token queries and keys of one attention call (-1: rows, all patch tokens)
  double text_q = -1, text_kv = -1;  // text tokens among a joint attention call's queries and keys (-1: text_rows)
  int attention_calls = 1;   // Ring attention: one call per key block circulating round the ring
  int heads_div = 1;         // heads on this device are heads / heads_div (tensor parallel, Ulysses)
  int tp = 1;                // Megatron split: qkv and fc1 columns, o and fc2 rows over tp devices
  int double_blocks = -1;    // blocks it holds (-1: all; Flux: the double-stream ones)
  int single_blocks = -1;    // Flux single-stream blocks it holds (-1: all)
  bool embed = true;         // patch and conditioning embedders (the first pipeline stage)
  bool final_layer = true;   // final adaLN, linear and unpatchify (the last pipeline stage)
};
// One device's part of a step of `patch_tokens` image tokens for `batch` images.
IterationCost dit_step_part(const CostModel& cm, const DitSpec& dit, long patch_tokens, int batch, const DitPart& part);
// Which of an IterationCost's ops are attention (the part Ring attention overlaps with its P2P).
bool is_attention_op(const std::string& op);

// The parts of a DiT spec read from a validated models/dit entry (or an inline shape).
DitSpec dit_from_params(const Params& p, const std::string& fallback_name);

}  // namespace sluice
