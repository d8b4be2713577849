// A diffusion deployment's derived figures: its strategy, patch tokens, the published
// per-device communication formulas and its memory per device.
#include "workloads/diffusion/diffusion.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "config/units.h"

namespace sluice::diffusion {

using namespace shape;

DiffusionSetup diffusion_setup(const DiffusionConfig& c) {
  DiffusionSetup s;
  s.model = c.dit.name;
  s.hardware = c.hardware.name;
  s.strategy = strategy_name(c.strategy());
  s.implementation = implementation_name(c.implementation);
  s.cost_source = c.cost_source;
  s.hbm_bytes = c.hardware.hbm_bytes;
  s.devices = c.devices();
  s.cfg_degree = c.cfg_degree, s.tensor = c.tensor, s.ulysses = c.ulysses, s.ring = c.ring;
  s.distrifusion = c.distrifusion, s.pipefusion = c.pipefusion, s.patches = c.patches, s.warmup_steps = c.warmup_steps;
  s.resolution = c.resolution;
  s.patch_tokens = c.patch_tokens();
  s.text_tokens = c.dit.text_tokens;
  s.steps = c.steps;
  s.cfg = c.cfg;
  s.requests = c.requests;
  s.rate_per_s = c.rate_per_s;
  s.max_batch = c.max_batch;
  return s;
}

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::Single: return "single";
    case Strategy::Tensor: return "tensor";
    case Strategy::Ulysses: return "ulysses";
    case Strategy::Ring: return "ring";
    case Strategy::UlyssesRing: return "ulysses-ring";
    case Strategy::DistriFusion: return "distrifusion";
    case Strategy::PipeFusion: return "pipefusion";
  }
  return "?";
}

long DiffusionConfig::patch_tokens() const {
  const long side = resolution / 8 / dit.patch;
  return side * side;
}

Strategy DiffusionConfig::strategy() const {
  if (tensor > 1) return Strategy::Tensor;
  if (distrifusion > 1) return Strategy::DistriFusion;
  if (pipefusion > 1) return Strategy::PipeFusion;
  if (ulysses > 1 && ring > 1) return Strategy::UlyssesRing;
  if (ulysses > 1) return Strategy::Ulysses;
  if (ring > 1) return Strategy::Ring;
  return Strategy::Single;
}


double formula_bytes_per_device(const DiffusionConfig& c, int batch) {
  // p: the sequence the blocks run over (image tokens, plus text in joint-attention blocks).
  const double seq = static_cast<double>(c.patch_tokens()) + (c.dit.single_layers > 0 ? c.dit.text_tokens : 0);
  const double N = c.group_devices(), L = blocks(c.dit), O = batch * seq * c.dit.hidden * kBytes;
  const double share = (N - 1) / N;  // what a ring or an all-to-all sends of the buffer the O() counts
  switch (c.strategy()) {
    case Strategy::Single: return 0;
    case Strategy::Tensor: return 2 * tensor_allreduces(c.dit) * O * share;  // 4·O·L with two all-reduces a block
    case Strategy::DistriFusion: return 2 * O * L * share;
    case Strategy::Ring: return 2 * O * L * share;
    case Strategy::Ulysses: return 4 / N * O * L * share;
    case Strategy::UlyssesRing: {
      const double u = c.ulysses, r = c.ring;
      return 4 / u * (O / r) * L * (u - 1) / u + 2 * (O / u) * L * (r - 1) / r;
    }
    case Strategy::PipeFusion:
      // The paper's 2·O(p·hs) is what an interior stage takes in and sends out (each byte
      // counted at both ends); sent per device, as every other row counts, it is O from each
      // of the N - 1 stages that hand activations on: O·(N-1)/N on average.
      return batch * static_cast<double>(c.patch_tokens()) * c.dit.hidden * kBytes * share;
  }
  return 0;
}

DiffusionMemory diffusion_memory(const DiffusionConfig& c) {
  DiffusionMemory m;
  const double P = c.dit.parameters() * kBytes;
  const Strategy s = c.strategy();
  const double N = c.group_devices();
  m.weights = (s == Strategy::Tensor || s == Strategy::PipeFusion) ? P / N : P;
  const double B = static_cast<double>(c.max_batch) * c.branch_factor(), p = static_cast<double>(c.patch_tokens()),
               hs = c.dit.hidden, T = c.dit.text_tokens, L = blocks(c.dit);
  double rows = p + T;
  switch (s) {
    case Strategy::Single: case Strategy::Tensor: break;
    case Strategy::Ulysses: case Strategy::Ring: case Strategy::UlyssesRing: case Strategy::DistriFusion:
      rows = c.dit.single_layers > 0 ? (p + T) / N : p / N + T;  // joint sequences split their text too
      break;
    case Strategy::PipeFusion: rows = p / c.patches + T; break;
  }
  // One block's working set: q, k, v, attention out and the MLP's inner activations.
  m.activations = B * rows * hs * kBytes * (4 + c.dit.mlp_ratio) / (s == Strategy::Tensor ? N : 1.0);
  if (s == Strategy::DistriFusion) m.kv_buffers = 2 * B * p * hs * kBytes * L;  // stale K/V of every layer, whole image
  if (s == Strategy::PipeFusion) m.kv_buffers = 2 * B * p * hs * kBytes * std::ceil(L / N);  // its layers' stale K/V
  if (s == Strategy::Ring || s == Strategy::UlyssesRing) m.kv_buffers = 2 * B * (p / N) * hs * kBytes;  // the K/V block in flight
  return m;
}

}  // namespace sluice::diffusion
