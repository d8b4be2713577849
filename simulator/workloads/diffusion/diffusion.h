// Diffusion-transformer inference on the world (`kind: diffusion`): image requests of `steps`
// denoising steps over p patch tokens, each step a full non-causal DiT pass costed by
// dit_step_part, split over devices by a parallel strategy (tensor, Ulysses, Ring, Ulysses x
// Ring, DistriFusion, PipeFusion, each optionally inside CFG parallel of degree 2). Every
// transfer a strategy makes is a flow on the world's fabric; requests arrive at a rate and
// join the running batch at step boundaries.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "hardware/cost_model.h"
#include "hardware/dit.h"
#include "recorder/diffusion_results.h"
#include "world/world.h"

namespace sluice::diffusion {

// How one CFG group splits a step over its devices.
enum class Strategy { Single, Tensor, Ulysses, Ring, UlyssesRing, DistriFusion, PipeFusion };
const char* strategy_name(Strategy s);

struct DiffusionConfig {
  DitSpec dit;
  HardwareSpec hardware;
  std::string tables_dir;
  std::shared_ptr<const HardwareSpec> tables_device;  // derived tables: the device they were measured on
  double cost_time_scale = 1;  // every kernel time x this: an end of the cost model's error band (CostOptions::time_scale)
  std::string cost_source;                            // how it is costed, in words (CostSource::describe)
  Implementation implementation = Implementation::PytorchLean;
  int resolution = 1024;  // px
  int steps = 28;
  bool cfg = false;       // classifier-free guidance: a conditional and an unconditional pass per step
  // Degrees (their product times cfg_degree is the device count).
  int cfg_degree = 1, tensor = 1, ulysses = 1, ring = 1, distrifusion = 1, pipefusion = 1;
  int patches = 1;        // PipeFusion: patch micro-batches per step (M)
  int warmup_steps = 1;   // PipeFusion / DistriFusion: synchronous steps with fresh K/V first
  int requests = 1;
  double rate_per_s = 0;  // Poisson arrivals; 0: every request at time 0
  int max_batch = 1;      // images per step

  long patch_tokens() const;  // (resolution / 8 / patch)^2
  int group_devices() const { return tensor * ulysses * ring * distrifusion * pipefusion; }
  int devices() const { return cfg_degree * group_devices(); }
  Strategy strategy() const;
  // Images of one CFG group's step per request (2 with CFG unless CFG-parallel).
  int branch_factor() const { return cfg && cfg_degree == 1 ? 2 : 1; }
};

// One device's memory (bytes): weights (P or P/N) and the step's activations and buffers.
DiffusionMemory diffusion_memory(const DiffusionConfig& c);
// The workload as its report names it (recorder/diffusion_results.h).
DiffusionSetup diffusion_setup(const DiffusionConfig& c);

// Bytes one step puts on the fabric, per device, as the published formulas count them
// (docs/REFERENCES.md#communication-and-memory-per-strategy), for B images of p tokens and hidden hs, O = B·p·hs·2 bytes:
// tensor 4·O·L (2·O per all-reduce, two a block; three with cross-attention, one per fused
// single-stream block), DistriFusion 2·O·L, Ring 2·O·L, Ulysses (4/N)·O·L (each times (N-1)/N,
// the share a ring or all-to-all sends of what the O() counts); PipeFusion O·(N-1)/N (the
// paper's 2·O is an interior stage's in and out; sent per device it is O from N - 1 stages).
// Every strategy's fabric bytes per step per device equal it (tests/unit/test_diffusion.cpp).
double formula_bytes_per_device(const DiffusionConfig& c, int batch);


// Shapes the formulas and the job share.
namespace shape {
inline constexpr double kBytes = 2;  // bf16 activations and weights
inline int blocks(const DitSpec& d) { return d.layers + d.single_layers; }
// Tensor parallel (Megatron): an all-reduce after each row-split GEMM over every row (text rows
// too in joint blocks): attention out and MLP out per block (2), cross-attention out (PixArt:
// 3); Flux's single-stream blocks fuse both into linear2 (1). The paper's 4·O·L assumes 2.
inline int tensor_allreduces(const DitSpec& d) { return d.layers * (2 + (d.cross_attention ? 1 : 0)) + d.single_layers; }
inline double latent_out_channels(const DitSpec& d) { return static_cast<double>(d.latent_channels) * d.patch * d.patch; }
}  // namespace shape

}  // namespace sluice::diffusion
