// What a deployment is built from before it runs: the cost model's options and the memory plan
// (weights, activations and the KV cache each GPU holds, and the blocks each engine gets).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "config/units.h"
#include "workloads/serving/serving_sim.h"

namespace sluice::serving {

CostOptions cost_options(const ServingConfig& cfg, const PoolSpec* pool) {
  CostOptions o;
  o.tensor_parallel = pool ? pool->tensor_parallel : cfg.tensor_parallel;
  o.pipeline_parallel = cfg.pipeline_parallel;
  o.moe = cfg.moe;
  o.moe.data_parallel_attention = data_parallel_attention(cfg, pool);
  o.tables_dir = pool ? pool->tables_dir : cfg.tables_dir;
  o.tables_device = pool ? pool->tables_device : cfg.tables_device;
  o.time_scale = pool ? pool->cost_time_scale : cfg.cost_time_scale;
  o.allreduce_ns = cfg.allreduce_ns;
  o.fused_elementwise = cfg.fused_elementwise;
  o.implementation = cfg.implementation;
  return o;
}

bool data_parallel_attention(const ServingConfig& cfg, const PoolSpec* pool) {
  // (deployment.moe's is the decode pool's; a prefill pool of its own says its own.)
  return cfg.model.moe() && (pool ? pool->data_parallel_attention : cfg.moe.data_parallel_attention);
}

int kv_shards(const ServingConfig& cfg, const PoolSpec* pool) {
  // Data-parallel attention: a sequence's KV cache is on the one device that runs its attention.
  return data_parallel_attention(cfg, pool) ? 1 : (pool ? pool->tensor_parallel : cfg.tensor_parallel) * cfg.pipeline_parallel;
}

bool two_batch_halves(std::span<const SeqWork> work, std::span<const int32_t> ranks, int dp, std::vector<SeqWork> (&halves)[2],
                      std::vector<int32_t> (&half_ranks)[2], std::vector<uint32_t>& parity) {
  for (int h = 0; h < 2; ++h) {
    halves[h].clear();
    half_ranks[h].clear();
  }
  if (ranks.empty()) {
    for (size_t i = 0; i < work.size(); ++i) halves[i % 2].push_back(work[i]);
  } else {
    parity.assign(static_cast<size_t>(dp), 0);
    for (size_t i = 0; i < work.size(); ++i) {
      const int32_t r = i < ranks.size() && ranks[i] >= 0 && ranks[i] < dp ? ranks[i] : static_cast<int32_t>(i % static_cast<size_t>(dp));
      const int h = parity[static_cast<size_t>(r)]++ & 1;
      halves[h].push_back(work[i]);
      half_ranks[h].push_back(r);
    }
  }
  return !halves[0].empty() && !halves[1].empty();
}

double kv_bytes_per_token_per_gpu(const ServingConfig& cfg, const PoolSpec* pool) {
  const int tp = data_parallel_attention(cfg, pool) ? 1 : pool ? pool->tensor_parallel : cfg.tensor_parallel;
  return cfg.model.kv_bytes_per_token_per_gpu(tp, cfg.pipeline_parallel) +
         speculative_kv_bytes_per_token_per_gpu(cfg.speculative, cfg.model, tp);
}

MemoryPlan ServingSim::plan_memory(const ServingConfig& cfg, int64_t max_tokens_per_iteration, const PoolSpec* pool) {
  MemoryPlan m;
  const HardwareSpec& hw = pool ? pool->hardware : cfg.hardware;
  const int tp = pool ? pool->tensor_parallel : cfg.tensor_parallel;
  const std::string which = pool ? "the prefill pool: " : "";
  m.capacity_per_gpu = hw.hbm_bytes * cfg.gpu_memory_utilization;
  const bool copies = cfg.model.moe() && cfg.moe.expert_parallel && cfg.moe.eplb;  // EPLB's redundant experts
  // Data-parallel attention: every device holds all but the routed experts whole, and a 1/tp share
  // of the KV cache of the replica's sequences (its own); the replica's cache is tp devices' worth.
  const bool dp = data_parallel_attention(cfg, pool);
  m.weights_per_gpu = (dp ? cfg.model.weight_bytes_dp_attention(tp, copies ? cfg.moe.redundant_experts : 0)
                          : cfg.model.weight_bytes_per_gpu(tp, cfg.pipeline_parallel, copies ? cfg.moe.redundant_experts : 0)) +
                      speculative_weight_bytes_per_gpu(cfg.speculative, cfg.model, tp);  // a drafter beside it
  // Activations of the largest iteration, split across tensor-parallel ranks; capped at
  // 16k tokens (beyond that frameworks chunk the work rather than reserve more).
  m.activation_per_gpu = cfg.model.activation_bytes(std::min<int64_t>(max_tokens_per_iteration, 16384)) / tp;
  m.kv_per_gpu = m.capacity_per_gpu - m.weights_per_gpu - m.activation_per_gpu;
  const double kv_per_token_per_gpu = kv_bytes_per_token_per_gpu(cfg, pool);
  if (m.kv_per_gpu <= kv_per_token_per_gpu * cfg.block_size)
    throw std::runtime_error(fmt::format(
        "{}{} does not fit on {} × tp={} pp={}: each GPU needs {} of weights + {} of activations + KV cache, "
        "but has {} ({} HBM × gpu_memory_utilization {}); short by {} before any KV cache. "
        "Use more tensor/pipeline parallelism, a larger GPU, or a smaller model.",
        which, cfg.model.name, hw.name, tp, cfg.pipeline_parallel, format_bytes(m.weights_per_gpu),
        format_bytes(m.activation_per_gpu), format_bytes(m.capacity_per_gpu), format_bytes(hw.hbm_bytes),
        cfg.gpu_memory_utilization, format_bytes(m.weights_per_gpu + m.activation_per_gpu + kv_per_token_per_gpu * cfg.block_size - m.capacity_per_gpu)));
  m.kv_tokens_per_replica = static_cast<int64_t>(std::floor(m.kv_per_gpu / kv_per_token_per_gpu)) * (dp ? tp : 1);
  m.blocks_per_replica = m.kv_tokens_per_replica / cfg.block_size;
  // With pipeline parallelism the replica runs pp virtual engines (pp batches in flight, as
  // vLLM does), each with its own scheduler and 1/pp of the blocks.
  m.blocks_per_engine = m.blocks_per_replica / cfg.pipeline_parallel;
  // As vLLM does: an engine must hold at least one sequence of the model's full context,
  // beyond the blocks kept free at admission (the watermark); under data-parallel attention,
  // one device's share must.
  const int64_t own_blocks = m.blocks_per_engine / (dp ? tp : 1);
  const int64_t admissible = own_blocks - static_cast<int64_t>(std::floor(cfg.watermark * static_cast<double>(own_blocks)));
  if (admissible * cfg.block_size < cfg.model.max_context)
    throw std::runtime_error(fmt::format(
        "{}the KV cache of {} holds {} tokens ({} per GPU after {} of weights and {} of activations), fewer than "
        "one sequence of {}'s context of {} tokens ({} of KV needed per replica); give the server more memory or "
        "parallelism, or lower the model's max_context",
        which, dp ? "one GPU (data-parallel attention: its own sequences')" : "a replica", admissible * cfg.block_size, format_bytes(m.kv_per_gpu), format_bytes(m.weights_per_gpu),
        format_bytes(m.activation_per_gpu), cfg.model.name, cfg.model.max_context,
        format_bytes(cfg.model.kv_bytes_per_token() * cfg.model.max_context)));
  return m;
}

}  // namespace sluice::serving
