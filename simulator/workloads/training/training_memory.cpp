// A training job's memory per device (Megatron's accounting): weights, gradients, Adam's
// fp32 state, and the activations the schedule keeps in flight.
#include <algorithm>
#include <cmath>

#include "hardware/cost_model_experts.h"
#include "workloads/training/training.h"

namespace sluice::training {

// One decoder layer's parameters, as ModelSpec::parameters() counts them (a MoE layer's router,
// shared and routed experts included): the model cut to that one layer, less what lies outside
// the layers (the embedding, an untied LM head, the final norm, learned positions).
static double one_layer_parameters(const ModelSpec& m, bool moe_layer) {
  ModelSpec one = m;
  one.layers = 1;
  one.dense_layers = moe_layer ? 0 : 1;
  one.learned_positions = false;
  const double h = m.hidden;
  return one.parameters() - static_cast<double>(m.vocab) * h * (m.tied_embeddings ? 1 : 2) - h * (m.layernorm ? 2 : 1);
}

RankParameters rank_parameters(const TrainingConfig& c, int rank) {
  const ModelSpec& m = c.model;
  const double h = m.hidden, tp = c.tp;
  const double dense_layer = one_layer_parameters(m, false);
  const double moe_layer = m.moe() ? one_layer_parameters(m, true) : 0;
  const double routed_layer = m.moe() ? static_cast<double>(m.experts) * 3.0 * h * m.expert_ffn : 0;  // of moe_layer
  const double replicated_layer = m.mla() ? m.replicated_parameters() / m.layers : 0;
  RankParameters out;
  const int stages = c.pp * c.virtual_stages;
  for (int k = 0; k < c.virtual_stages; ++k) {  // the rank's chunks
    const LayerRange r = pipeline_stage_layers(m.layers, stages, k * c.pp + rank, c.first_stage_layers, c.last_stage_layers);
    const int moe = m.moe_layers_in(r.first, r.count), dense = r.count - moe;
    out.dense += (dense * dense_layer + moe * (moe_layer - routed_layer)) / tp + r.count * replicated_layer * (1 - 1 / tp);
    // The routed experts: 1/ep of them a device under expert parallelism (split over tp as the
    // rest is); without it they shard with the dense parameters.
    (c.ep > 1 ? out.experts : out.dense) += moe * routed_layer / c.ep / tp;
  }
  // Megatron's first stage holds the (vocabulary-parallel) embedding and the learned positions,
  // the last the LM head and the final norm; a tied embedding is held on both when they differ
  // (its gradients summed between them), once otherwise.
  const double table = static_cast<double>(m.vocab) * h;
  if (rank == 0) out.dense += (table + (m.learned_positions ? static_cast<double>(m.max_context) * h : 0.0)) / tp;
  if (rank == c.pp - 1) out.dense += ((m.tied_embeddings && c.pp == 1 ? 0.0 : table) + h * (m.layernorm ? 2 : 1)) / tp;
  // Multi-token prediction on the last rank (Megatron-Core's MTP block): each module a decoder
  // layer of the last layer's kind, its 2h x h projection and three norms; it shares the LM head
  // and the embedding, which the last rank then holds too (a copy, as a tied one is).
  if (rank == c.pp - 1 && c.mtp_layers > 0) {
    const bool moe_kind = m.moe();
    const double layer = (moe_kind ? moe_layer - routed_layer : dense_layer) + 2 * h * h + 3 * h;
    out.dense += c.mtp_layers * (layer / tp + replicated_layer * (1 - 1 / tp)) + (c.pp > 1 && !m.tied_embeddings ? table / tp : 0.0);
    (c.ep > 1 ? out.experts : out.dense) += c.mtp_layers * (moe_kind ? routed_layer : 0.0) / c.ep / tp;
  }
  return out;
}

int rank_layers(const TrainingConfig& c, int rank) {
  int n = 0;
  for (int k = 0; k < c.virtual_stages; ++k)
    n += pipeline_stage_layers(c.model.layers, c.pp * c.virtual_stages, k * c.pp + rank, c.first_stage_layers, c.last_stage_layers).count;
  return n;
}

int heaviest_rank(const TrainingConfig& c) {
  int best = 0;
  double most = -1;
  for (int r = 0; r < c.pp; ++r)
    if (const double p = rank_parameters(c, r).total(); p > most) most = p, best = r;
  return best;
}

double params_per_device(const TrainingConfig& c) { return rank_parameters(c, heaviest_rank(c)).total(); }

// (The most over the ranks: a rank of MoE layers may hold more experts, and under ZeRO a larger
// shard, than the rank holding the most parameters, whose embedding or dense layers shard wider.)
double expert_params_per_device(const TrainingConfig& c) {
  double most = 0;
  for (int r = 0; r < c.pp; ++r) most = std::max(most, rank_parameters(c, r).experts);
  return most;
}

double sharded_params_per_device(const RankParameters& p, const TrainingConfig& c, double bytes_per_param) {
  return p.dense * bytes_per_param / (static_cast<double>(c.dp) * c.cp) + p.experts * bytes_per_param / (c.dp * c.cp / c.ep);
}

double sharded_params_per_device(const TrainingConfig& c, double bytes_per_param) {
  double most = 0;
  for (int r = 0; r < c.pp; ++r) most = std::max(most, sharded_params_per_device(rank_parameters(c, r), c, bytes_per_param));
  return most;
}

double model_flops_per_token(const TrainingConfig& c) {
  const ModelSpec& m = c.model;
  // Megatron's count (num_floating_point_operations): 6 a token for every GEMM weight a token
  // passes through, the LM head's logits once (6 V h); the embedding's lookup (an untied model's
  // second table) and learned positions are gathers, not GEMMs, and are not counted.
  const double h = m.hidden;
  double active = m.active_parameters() - (m.tied_embeddings ? 0.0 : static_cast<double>(m.vocab) * h) -
                  (m.learned_positions ? static_cast<double>(m.max_context) * h : 0.0);
  // Multi-token prediction modules (Megatron counts them): each one's layer (the experts a token
  // passes through), its projection and the LM head again, and the layer's attention.
  if (c.mtp_layers > 0) {
    const double idle = m.moe() ? static_cast<double>(m.experts - m.experts_per_token) * 3.0 * h * m.expert_ffn : 0.0;
    active += c.mtp_layers * (one_layer_parameters(m, m.moe()) - idle + 2 * h * h + static_cast<double>(m.vocab) * h);
  }
  const double L = m.layers + c.mtp_layers;
  if (m.mla()) return 6 * active + 6.0 * L * c.sequence * m.heads * (m.head_dim + m.qk_rope_head_dim + m.v_head_dim);
  return 6 * active + 12.0 * L * m.hidden * c.sequence;
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
  // Without dropout (TrainingConfig::dropout_masks) neither mask is kept: 2sbh where it says 3.
  const double in_mask = (c.dropout_masks() ? 3 : 2) * sbh;
  double attention = in_mask + 2 * s * b * (2 * q + 2 * kv) + 4 * a * s * b;
  // Latent attention (MLA, trained as Megatron-Core does, keys and values up-projected per head):
  // the queries and keys of a x (head_dim + rope) each (the rotated key inside them), the values
  // and the attention output of a x v_head_dim; and the query's bottleneck and the key-value
  // latent, each the input of its norm and of its up projection (4sb x their widths, as the layer
  // norms' 4sbh below). All split over the tensor-parallel ranks: with sequence parallelism the
  // latents too are s / tp rows a rank.
  if (m.mla()) {
    const double qk = a * (m.head_dim + m.qk_rope_head_dim), v = a * m.v_head_dim;
    attention = in_mask + 2 * s * b * (2 * qk + 2 * v) + 4 * a * s * b + 4 * s * b * (m.q_lora_rank + m.kv_lora_rank);
  }
  // An MLP of width f: its input 2sbh and dropout mask sbh, then a plain one (GPT's GeLU) keeps
  // the activation's input and the second matrix's input, 2sbf each (f = 4h: Korthikanti's
  // 19sbh); a gated one (SwiGLU) the gate's and the up projection's outputs and the down
  // projection's input, 2sbf each.
  auto mlp = [&](double f, bool gated) { return in_mask + (gated ? 6 : 4) * s * b * f; };
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
    const double moe = in_mask / tp + k * (2 * sbh + 6 * s * b * fe / tp) + m.shared_experts * 6 * s * b * fe / tp;
    const double dense_layers = std::min(m.dense_layers, m.layers);
    mlp_mean = (dense_layers * mlp_mean + (m.layers - dense_layers) * moe) / m.layers;
  }
  return per_device + mlp_mean;
}

// One pipeline rank's memory: its parameters' states and the activations its schedule keeps.
static TrainingMemory rank_memory(const TrainingConfig& c, int rank) {
  const ModelSpec& m = c.model;
  TrainingMemory mem;
  const RankParameters p = rank_parameters(c, rank);
  const double params = p.total();
  const int layers = rank_layers(c, rank) + (rank == c.pp - 1 ? c.mtp_layers : 0);  // its layers and, on the last rank, the MTP modules (their logits not counted)
  mem.weights = params * m.dtype_bytes;
  // ZeRO-3: the shard (the dense parameters over dp, a device's experts over dp x cp / ep), plus
  // FSDP's buffer of the layers gathered whole: the one computing and those prefetched
  // (zero3_prefetch: FSDP's one). (A stage of few layers gathers no more than itself; with
  // nothing to shard over, nothing is.)
  if (c.zero >= 3 && c.dp * c.cp > 1)
    mem.weights = sharded_params_per_device(p, c, m.dtype_bytes) +
                  std::min((1 + c.zero3_prefetch) * params / layers, params) * m.dtype_bytes;
  // ZeRO shards the optimizer state (stage 1) and the gradients (stage 2) over the ranks that
  // hold the same parameters: dp x cp for the dense ones, dp x cp / ep for a device's experts.
  mem.gradients = c.zero >= 2 ? sharded_params_per_device(p, c, m.dtype_bytes) : params * m.dtype_bytes;
  mem.optimizer = c.zero >= 1 ? sharded_params_per_device(p, c, 12) : params * 12;  // fp32 master weights, Adam's m and v
  // Context parallelism: each rank keeps its s / cp tokens' activations.
  const double per_layer = (c.recompute ? 2.0 * c.sequence * c.micro_batch_size * m.hidden : layer_activation_bytes(c)) / c.cp;
  // Micro-batches in flight on pipeline rank r (Megatron's warm-up plus the one in its steady
  // state). GPipe holds all m; 1F1B pp - r at most. Interleaved over v chunks, rank r holds
  // Kv + K - 1 - 2r chunks (its warm-up and one more) at most, each of a chunk's layers:
  // (Kv + K - 1 - 2r) / v micro-batches of all its layers.
  const int K = c.pp, v = c.virtual_stages;
  const double in_flight = c.schedule == Schedule::GPipe ? c.micro_batches
                           : v > 1 ? std::min(static_cast<double>(c.micro_batches) * v, static_cast<double>(K * v + K - 1 - 2 * rank)) / v
                                   : std::min(c.micro_batches, c.pp - rank);
  mem.activations = per_layer * layers * in_flight;
  // The loss: the last rank keeps, for every micro-batch whose backward has not run, the fp32
  // softmax of its logits that the cross-entropy's backward needs (Megatron's vocabulary-parallel
  // cross-entropy upcasts the bf16 logits: s·b / cp tokens x vocab / tp), one for the main head
  // and one for each multi-token prediction module. GPipe holds all m; 1F1B and interleaving run
  // the last chunk's backward right after its forward, so one.
  if (rank == c.pp - 1) {
    const double tokens = static_cast<double>(c.sequence) * c.micro_batch_size / c.cp;
    const double held = c.schedule == Schedule::GPipe ? c.micro_batches : 1;
    mem.activations += held * (1 + c.mtp_layers) * tokens * static_cast<double>(m.vocab) / c.tp * 4;
  }
  return mem;
}

// The fullest pipeline rank's (the first of equals): the first holds the most activations, the
// first and last the embedding and the LM head, a rank the most MoE layers their experts.
TrainingMemory training_memory(const TrainingConfig& c) {
  TrainingMemory best = rank_memory(c, 0);
  for (int r = 1; r < c.pp; ++r)
    if (const TrainingMemory mem = rank_memory(c, r); mem.total() > best.total()) best = mem;
  return best;
}

}  // namespace sluice::training
