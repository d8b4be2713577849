// A decoder layer's memory-bound kernels for the cost model (part of hardware/cost_model.cpp's
// translation unit, as cost_model_attention.h is): each implementation's norms, rotary, cache
// writes, activation and residual adds, and the glue kernels a plain PyTorch layer launches
// that no table holds.
#pragma once

#include "hardware/cost_model_impl.h"

namespace sluice {

template <class Layer>
void CostModel::Impl::layer_elementwise(double M, Layer& layer, bool act) const {
  // One token's k (or v) on this device, as the cache holds it (latent attention: half its latent).
  const double kv_row = mla ? latent / 2 * kvb : KV * hd * kvb;
  // The widths the rotary turns a token: every query head's and every KV head's whole head,
  // or under latent attention only the rope part (qk_rope_head_dim) of each query head and the
  // one rotary key all heads share.
  const double rope_q = mla ? H * m.qk_rope_head_dim : H * hd, rope_k = mla ? m.qk_rope_head_dim : KV * hd;
  // Latent attention's own norms: RMSNorm over the query's bottleneck (q_lora_rank) and over the
  // latent (kv_lora_rank), each on the rows its replicated down projection produced.
  const double Mdown = opt.sequence_parallel ? M / tp : M;
  auto latent_norms = [&](bool fused) {
    for (const int w : {m.q_lora_rank, m.kv_lora_rank}) {
      if (w <= 0) continue;
      layer(fused ? fused_part(Op::Norm, Mdown, 2 * w * b, 1) : elem_part(Op::Norm, e_norm, Mdown, 2 * w * b, 1, 1, true));
    }
  };
  if (impl == Implementation::Fused) {
    layer(fused_part(Op::Norm, M, 4 * hidden * b, 2));  // reads x and residual, writes both
    if (mla) latent_norms(true);
    if (!m.learned_positions) layer(fused_part(Op::Rope, M, 2 * (rope_q + rope_k) * b, 1));
    if (act) layer(fused_part(Op::Act, M, (m.gated_ffn ? 3 : 2) * ffn * b, 1));
    layer(fused_part(Op::KvWrite, M, 4 * kv_row, 1));
    return;
  }
  if (impl == Implementation::PytorchNaive && !m.layernorm) {
    layer(naive_norm_part(Op::Norm, M).times(2));
  } else {
    layer(elem_part(Op::Norm, e_norm, M, 2 * hidden * b, 2, 1, m.layernorm));
  }
  if (mla) latent_norms(false);  // (as the table's norm, moved to their widths, in either PyTorch profile)
  if (!m.learned_positions) {
    const double angles = mla ? m.qk_rope_head_dim : hd;  // the rotary's width
    if (impl == Implementation::PytorchNaive)  // per call: 12 kernels over the step's positions x angles/2
      layer(kernels_part(Op::RopeAngles, 2 * 12, M * angles / 2 * 4 * 2));
    layer(elem_part(Op::Rope, e_rope, M, 2 * rope_q * b, 1, 7));
    layer(elem_part(Op::Rope, e_rope, M, 2 * rope_k * b, 1, 7));
  }
  layer(kernels_part(Op::KvWrite, 2, 2 * M * kv_row));  // cache[:, :, pos:pos+T] = k (and v)
  if (!act) {
  } else if (m.gated_ffn) {
    layer(elem_part(Op::Act, e_act, M, 3 * ffn * b, 1, 2));
  } else {
    layer(elem_part(Op::Act, e_act, M, 2 * ffn * b, 1, 1, true));
  }
  layer(elem_part(Op::Residual, e_res, M, 3 * hidden * b, 2, 1));
  // The glue kernels no table holds (Src::Fitted; see glue_kernels()): each at the launch floor.
  const double g = glue_kernels(M);
  if (g > 0) layer(Part{Op::Glue, Src::Fitted, File::None, g * knl, 0, 0, g});
}

// Kernels a plain PyTorch decoder layer launches beyond the ones costed above, counted in
// launch floors: kGlueAlways per layer, plus kGlueRows when the layer runs more than one token
// row. Not measured kernel by kernel: the two counts are fitted to the whole steps of
// model_steps.csv (Llama-2-7B and TinyLlama-1.1B, lean and naive alike, one pair for both
// models and both profiles), where a step costs more than its kernels' table sum by a nearly
// constant amount per layer: flat in KV length, flat in batch beyond one row, the same in
// microseconds for a 2048-wide and a 4096-wide model (so not traffic), about 5 us per layer
// at one row and 15 us from eight rows on. That is the signature of short kernels at the
// floor, not of any kernel's work: the glue between the fused qkv output, the rotary, the
// cache and SDPA (layout copies of strided views, position gathers) is where a plain decoder
// launches them, and only a profile of the measured steps can name them one by one.
// The fused profile (vLLM) has none: its kernels take the views directly.
inline double CostModel::Impl::glue_kernels(double M) const {
  if (impl == Implementation::Fused) return 0;
  if (opt.glue_kernels) return (*opt.glue_kernels)[0] + (M > 1 ? (*opt.glue_kernels)[1] : 0);
  return kGlueAlways + (M > 1 ? kGlueRows : 0);
}

}  // namespace sluice
