// The MoE block of the cost model (part of hardware/cost_model.cpp's translation unit, as
// cost_model_attention.h): the dispatch and combine all-to-alls' bytes and the layer's parts.
#pragma once

#include "hardware/cost_model_impl.h"

namespace sluice {

// Rows one device's tokens send to their experts in one dispatch (the same come back in the
// combine): its 1/tp of the M tokens, a hidden state to each device holding one of its experts.
// (Data-parallel attention: each device's own tokens, the batch's 1/dp.)
inline double CostModel::Impl::a2a_rows(double M) const { return M / ep_size() * experts.a2a_dest; }

// Bytes an element of a dispatched row: with FP8 or FP4 GEMMs the tokens are quantized before
// the dispatch and cross as FP8 (E4M3, an fp32 scale per 128 channels: 1 + 4/128 bytes), as
// DeepSeek-V3 dispatches and DeepEP's kernels send them (an FP4 dispatch is not modelled:
// DeepEP sends FP8 or BF16); the combine brings the experts' outputs back in the activations'
// dtype (DeepSeek-V3 keeps it in BF16). So in FP8 an all-to-all pair moves about 3/4 of BF16's.
inline double CostModel::Impl::dispatch_b() const { return prec == Precision::FP8 || prec == Precision::FP4 ? 1.0 + 4.0 / 128 : b; }

// The dispatch's part of a layer's dispatch and combine bytes (1/2 when both are in the activations' dtype).
inline double CostModel::Impl::dispatch_fraction() const { return dispatch_b() / (dispatch_b() + b); }

// Bytes of one dispatch and its combine (an MoE layer's two all-to-alls) from one device.
inline double CostModel::Impl::a2a_pair_bytes(double M) const { return a2a_rows(M) * hidden * (dispatch_b() + b); }

// The MoE block of one layer in place of the dense MLP: the router (a GEMM to the expert
// logits and its top-k), the shared experts, the routed experts, and, with all-to-all
// dispatch, the two all-to-alls.
template <class Layer>
void CostModel::Impl::moe_parts(double M, Layer& layer) const {
  layer(gemm_part(Op::Router, router, M));
  layer(kernels_part(Op::TopK, 1, M * m.experts * 4 * 2));  // softmax + top-k over the fp32 logits
  if (m.shared_experts > 0) {
    layer(layer_gemm(Op::SharedGateUp, sh_up, M));
    layer(layer_gemm(Op::SharedDown, sh_down, M));
    layer(kernels_part(Op::Act, 1, M * 3 * sh_down.K * b));
  }
  if (dp == 1) layer(experts_part(M));  // (data-parallel attention: every device's tokens at once, experts_dp_ns)
  if (a2a) {
    const double bytes = a2a_pair_bytes(M * dp);  // (data-parallel attention: M is one device's own tokens)
    const double t = opt.comm_on_fabric ? 0
                                        : bytes * experts.a2a_busiest(dispatch_fraction()) * (ep_n() - 1) / ep_n() / hw.interconnect_Bps * 1e9 +
                                              2 * hw.interconnect_latency_ns;  // the busiest device's share, both all-to-alls
    layer(Part{Op::AllToAll, opt.comm_on_fabric ? Src::Network : Src::Analytic, File::None, t, 0, bytes, 2});
  }
}

}  // namespace sluice
