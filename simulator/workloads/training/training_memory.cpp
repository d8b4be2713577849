// A training job's memory per device (Megatron's accounting): weights, gradients, Adam's
// fp32 state, and the activations the schedule keeps in flight.
#include <algorithm>
#include <cmath>

#include "hardware/cost_model_experts.h"
#include "workloads/training/training.h"

namespace sluice::training {

// A pipeline rank's parameters are taken as the mean rank's, but for the routed experts: a rank
// holding more MoE layers than the mean (dense first layers elsewhere, layers that do not divide
// over the stages) holds their experts too. The heaviest rank's experts beyond the mean, per
// device (0 when every rank holds as many MoE layers).
static double heaviest_experts_extra(const TrainingConfig& c) {
  const ModelSpec& m = c.model;
  if (!m.moe()) return 0;
  const int stages = c.pp * c.virtual_stages;
  int most = 0;
  for (int s = 0; s < c.pp; ++s) {
    int n = 0;
    for (int k = 0; k < c.virtual_stages; ++k) {  // the rank's chunks
      const LayerRange r = pipeline_stage_layers(m.layers, stages, k * c.pp + s);
      n += m.moe_layers_in(r.first, r.count);
    }
    most = std::max(most, n);
  }
  const int total = m.moe_layers_in(0, m.layers);
  if (most * c.pp == total) return 0;
  const double layer = static_cast<double>(m.experts) * 3.0 * m.hidden * m.expert_ffn;  // one MoE layer's routed experts
  return layer * (most - static_cast<double>(total) / c.pp) / c.ep / c.tp;
}

double params_per_device(const TrainingConfig& c) {
  // (Latent attention's down projections are whole on every tensor-parallel rank.)
  return (c.model.parameters() - c.model.routed_expert_parameters() * (1 - 1.0 / c.ep)) / (c.tp * c.pp) + heaviest_experts_extra(c) +
         (c.model.mla() ? c.model.replicated_parameters() * (1 - 1.0 / c.tp) / c.pp : 0.0);
}

double expert_params_per_device(const TrainingConfig& c) {
  return c.ep > 1 ? c.model.routed_expert_parameters() / c.ep / (c.tp * c.pp) + heaviest_experts_extra(c) : 0;
}

double sharded_params_per_device(const TrainingConfig& c, double bytes_per_param) {
  const double experts = expert_params_per_device(c), dense = params_per_device(c) - experts;
  return dense * bytes_per_param / (static_cast<double>(c.dp) * c.cp) + experts * bytes_per_param / (c.dp * c.cp / c.ep);
}

double model_flops_per_token(const TrainingConfig& c) {
  const ModelSpec& m = c.model;
  if (m.mla()) return 6 * m.active_parameters() + 6.0 * m.layers * c.sequence * m.heads * (m.head_dim + m.qk_rope_head_dim + m.v_head_dim);
  return 6 * m.active_parameters() + 12.0 * m.layers * m.hidden * c.sequence;
}

double checkpoint_bytes_per_device(const TrainingConfig& c) {
  // The whole model once (every expert: expert-parallel replicas hold different ones).
  return c.model.parameters() * (c.model.dtype_bytes + 12) / job_devices(c);
}

// The rows the busiest device's experts receive over the mean device's: 1 under uniform routing
// or without expert parallelism; else ep times the largest share of the token-expert rows one
// device's experts take (the cost model's placement: experts in order, E / ep a device).
static double hottest_rows(const TrainingConfig& c) {
  if (c.ep <= 1 || c.routing == MoeOptions::Routing::Uniform || !c.model.moe()) return 1;
  MoeOptions mo;
  mo.routing = c.routing;
  mo.zipf_s = c.zipf_s;
  mo.expert_parallel = mo.alltoall = true;
  const ExpertPlacement place = ExpertPlacement::plan(c.model, mo, c.ep);
  double most = 0;
  for (const auto& shares : place.dev_share) most = std::max(most, ExpertPlacement::rows(shares, 1, 1));
  return std::max(1.0, most * c.ep);
}

double layer_activation_bytes(const TrainingConfig& c) {
  const ModelSpec& m = c.model;
  const double s = c.sequence, b = c.micro_batch_size, h = m.hidden, a = m.heads, tp = c.tp, sbh = s * b * h;
  const double q = a * m.head_dim, kv = static_cast<double>(m.kv_heads) * m.head_dim;  // query and key/value widths
  // Attention: its input 2sbh and the output projection's dropout mask sbh, the queries, keys
  // and values (2sb x their widths: grouped-query attention keeps fewer keys and values) and
  // the output projection's input (2sb x the query width); FlashAttention keeps no s x s
  // scores, only each row's fp32 log-sum-exp. With h = a x head_dim and kv = a: 11sbh.
  double attention = 3 * sbh + 2 * s * b * (2 * q + 2 * kv) + 4 * a * s * b;
  // Latent attention (MLA, trained as Megatron-Core does, keys and values up-projected per head):
  // the queries and keys of a x (head_dim + rope) each (the rotated key inside them), the values
  // and the attention output of a x v_head_dim; and the query's bottleneck and the key-value
  // latent, each the input of its norm and of its up projection (4sb x their widths, as the layer
  // norms' 4sbh below). All split over the tensor-parallel ranks: with sequence parallelism the
  // latents too are s / tp rows a rank.
  if (m.mla()) {
    const double qk = a * (m.head_dim + m.qk_rope_head_dim), v = a * m.v_head_dim;
    attention = 3 * sbh + 2 * s * b * (2 * qk + 2 * v) + 4 * a * s * b + 4 * s * b * (m.q_lora_rank + m.kv_lora_rank);
  }
  // An MLP of width f: its input 2sbh and dropout mask sbh, then a plain one (GPT's GeLU) keeps
  // the activation's input and the second matrix's input, 2sbf each (f = 4h: Korthikanti's
  // 19sbh); a gated one (SwiGLU) the gate's and the up projection's outputs and the down
  // projection's input, 2sbf each.
  auto mlp = [&](double f, bool gated) { return 3 * sbh + (gated ? 6 : 4) * s * b * f; };
  // All of it split over the tensor-parallel ranks (sequence parallelism outside the GEMMs).
  double per_device = (attention + 4 * sbh) / tp;  // and the two layer norms' inputs
  double mlp_mean = mlp(m.ffn, m.gated_ffn) / tp;
  if (m.moe()) {
    // A mixture-of-experts layer: its input and mask, then for each of the k experts a token
    // goes to, the dispatched copy of the token (2sbh, whole on every tensor-parallel rank: the
    // experts' TP gathers the rows before its GEMMs) and the expert's gated MLP inside (split),
    // plus the shared experts'. Under expert parallelism a device's experts receive, on average
    // (uniform routing), as many rows as its own tokens send out; under skewed routing the
    // device of the hottest experts receives more (ep times its experts' share of the rows), and
    // memory is the fullest device's.
    const double k = m.experts_per_token * hottest_rows(c), fe = m.expert_ffn;
    const double moe = 3 * sbh / tp + k * (2 * sbh + 6 * s * b * fe / tp) + m.shared_experts * 6 * s * b * fe / tp;
    const double dense_layers = std::min(m.dense_layers, m.layers);
    mlp_mean = (dense_layers * mlp_mean + (m.layers - dense_layers) * moe) / m.layers;
  }
  return per_device + mlp_mean;
}

TrainingMemory training_memory(const TrainingConfig& c) {
  const ModelSpec& m = c.model;
  TrainingMemory mem;
  const double params = params_per_device(c);
  mem.weights = params * m.dtype_bytes;
  // ZeRO-3: the shard (the dense parameters over dp, a device's experts over dp x cp / ep), plus
  // FSDP's buffer of two layers gathered whole (the one computing and the one prefetched).
  // (A stage of one layer gathers no more than itself; with nothing to shard over, nothing is.)
  if (c.zero >= 3 && c.dp * c.cp > 1)
    mem.weights = sharded_params_per_device(c, m.dtype_bytes) +
                  std::min(2 * params / std::ceil(static_cast<double>(m.layers) / c.pp), params) * m.dtype_bytes;
  // ZeRO shards the optimizer state (stage 1) and the gradients (stage 2) over the ranks that
  // hold the same parameters: dp x cp for the dense ones, dp x cp / ep for a device's experts.
  mem.gradients = c.zero >= 2 ? sharded_params_per_device(c, m.dtype_bytes) : params * m.dtype_bytes;
  mem.optimizer = c.zero >= 1 ? sharded_params_per_device(c, 12) : params * 12;  // fp32 master weights, Adam's m and v
  const double layers = std::ceil(static_cast<double>(m.layers) / c.pp);
  // Context parallelism: each rank keeps its s / cp tokens' activations.
  const double per_layer = (c.recompute ? 2.0 * c.sequence * c.micro_batch_size * m.hidden : layer_activation_bytes(c)) / c.cp;
  // 1F1B: the first stage holds pp micro-batches' activations at most; GPipe holds all m.
  // Interleaved over v chunks: the first rank holds Kv + K - 1 chunks' worth (its warm-up and
  // one more), each of layers / (Kv) layers: K (1 + (K-1)/(Kv)) micro-batches of its layers.
  const int K = c.pp, v = c.virtual_stages;
  const double in_flight = c.schedule == Schedule::GPipe ? c.micro_batches
                           : v > 1 ? std::min(static_cast<double>(c.micro_batches) * v, static_cast<double>(K * v + K - 1)) / v
                                   : std::min(c.micro_batches, c.pp);
  mem.activations = per_layer * layers * in_flight;
  return mem;
}

}  // namespace sluice::training
