// Hardware and model descriptions, loaded from the catalogs (models/hardware/, models/llm/).
// Quantities are in base units with the unit in the name.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/schema.h"

namespace sluice {

// The number format a deployment runs its decoder layers' GEMMs and weights in:
//   bf16   weights and GEMM inputs in bf16 (or fp16) at the bf16 tensor-core rate
//   fp8    weights and GEMM inputs in FP8 E4M3 (W8A8, per-token activation scales) at the FP8 rate
//   fp4    NVFP4: 4-bit values with an FP8 scale per 16 (4.5 bits a weight) at the FP4 rate
//   w4a16  weight-only INT4 (AWQ/GPTQ, a bf16 scale per 128): weights 4.125 bits, dequantized
//          inside the GEMM, which runs at the bf16 rate
// The embedding and the LM head stay in the model's dtype, as FP8 and FP4 checkpoints keep them.
enum class Precision { BF16, FP8, FP4, W4A16 };
const char* precision_name(Precision p);
// Every precision by name ("bf16", "fp8", "fp4", "w4a16"), for keys and flags.
const std::vector<std::pair<std::string, Precision>>& precision_names();
// Bytes one weight takes in memory and traffic (bf16: the model's dtype).
double weight_bytes_per_element(Precision p, int dtype_bytes);

// One accelerator or host CPU (models/hardware/<name>.yaml).
struct HardwareSpec {
  std::string name;
  std::string catalog;                // the catalog entry it was loaded from (models/hardware/<catalog>.yaml), "" if inline
  std::string kind;                   // gpu | tpu | cpu
  double peak_bf16_flops = 0;         // FLOP/s, datasheet dense bf16
  double peak_fp8_flops = 0;          // FLOP/s, datasheet dense FP8 (0: the device has no FP8 tensor cores)
  double peak_fp4_flops = 0;          // FLOP/s, datasheet dense FP4 (0: none)
  double hbm_bytes = 0;               // device memory the runtime reports as its total (what frameworks plan with)
  double hbm_physical_bytes = 0;      // device memory as nvidia-smi shows it (vendors' "GB" are GiB)
  double hbm_bandwidth_Bps = 0;       // datasheet memory bandwidth
  double measured_copy_Bps = 0;       // measured device copy ceiling (read+write bytes/s); 0 if unknown
  double measured_gemm_flops = 0;     // measured large-GEMM ceiling; 0 if unknown
  double flops_derate = 0.75;         // achieved / datasheet FLOP/s where nothing is measured
  double bandwidth_derate = 0.85;     // achieved / datasheet bandwidth where nothing is measured
  // Causal prefill attention (roofline, where no table covers it) reaches a fraction of the
  // FLOP ceiling that grows with the prompt: peak * l / (l + half_length).
  double attention_peak = 0.9;
  double attention_half_tokens = 1430;
  double interconnect_Bps = 0;        // scale-up link bandwidth per device per direction (NVLink / ICI)
  double interconnect_latency_ns = 0; // per hop
  bool nvls = false;                  // its NVSwitch reduces in the network (NVLink SHARP): the implicit cluster's servers get it
  double pcie_Bps = 0;                // host link per direction
  double ssd_read_Bps = 0;            // the host's local NVMe drives, read, per device (a KV tier below host memory)
  double price_usd = 0;
  // Power (hardware/power.h): the board's limit (drawn by a compute-bound step at the sustained
  // clock), what it draws idle with its weights loaded, and what a memory-bound step streaming
  // HBM draws. 0: unknown (the device's energy is then not reported).
  double tdp_w = 0, idle_w = 0, memory_bound_w = 0;
  // A host node of this device's servers, at full load and with its devices idle (0: the
  // scenario's economics.host_power and host_idle_power, whose defaults describe a GPU server's).
  double host_w = 0, host_idle_w = 0;
  std::string calibration;            // folder under results/calibration/ with measured tables, or ""
  std::string derive_tables_from;     // a catalog device whose tables can be scaled to this one, or ""
  // Clock a long compute-bound step sustains, as a fraction of the clock of the short bursts the
  // kernel tables were timed in; 1 = the same. Tensor-core time stretches by its inverse.
  double sustained_clock = 1;
  double kernel_launch_ns = 0;        // per-kernel floor + gap under CUDA-graph replay; 0 if unknown
  // Streaming multiprocessors, and how many of them NCCL's kernels hold while they move data
  // beside compute (one CTA a channel): overlapped compute runs on the rest. 0 = not modelled
  // (overlap is free).
  int sms = 0;
  int comm_sms = 0;
  // How much longer compute takes while a collective or P2P transfer overlaps it (1 = free).
  double overlap_stretch() const { return sms > 0 && comm_sms > 0 && comm_sms < sms ? static_cast<double>(sms) / (sms - comm_sms) : 1.0; }
  int interconnect_links = 0;         // scale-up links per device (interconnect_Bps = links x per-link rate)
  double interconnect_link_Bps = 0;   // one link, one direction
  // Ceilings the roofline uses: measured where known, else the datasheet derated.
  double effective_flops() const;
  // The GEMM ceiling at a precision: its datasheet peak derated as bf16 is (measured or not);
  // 0 where the device does not run it. Weight-only INT4 computes in bf16.
  double effective_flops(Precision p) const;
  // The datasheet dense peak of the format GEMMs run in (W4A16 computes in bf16): what MFU divides by.
  double peak_flops(Precision p) const {
    return p == Precision::FP8 ? peak_fp8_flops : p == Precision::FP4 ? peak_fp4_flops : peak_bf16_flops;
  }
  bool supports(Precision p) const { return p == Precision::W4A16 ? kind == "gpu" : effective_flops(p) > 0; }
  // "bf16, fp8, fp4, w4a16": what it runs.
  std::string precisions() const;
  double effective_bandwidth_Bps() const;
  // Fraction of the effective FLOP ceiling causal attention over `tokens` queries reaches.
  double attention_efficiency(double tokens) const;
};

// An LLM's shape (models/llm/<name>.yaml). Llama-style decoder: attention + gated FFN.
struct ModelSpec {
  std::string name;
  int layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  int dtype_bytes = 2;
  bool gated_ffn = true;      // SwiGLU (gate, up, down) vs a plain 2-matrix MLP (GPT-3)
  bool tied_embeddings = false;
  int max_context = 4096;
  std::string tokenizer;      // e.g. llama, llama3, chatglm2, gpt2
  bool linear_bias = false;        // every linear layer has a bias (GPT-3)
  bool layernorm = false;          // LayerNorm (weight + bias) instead of RMSNorm
  bool learned_positions = false;  // a learned position table of max_context rows instead of RoPE
  // Trained with dropout (GPT's 0.1): each layer keeps its attention and MLP outputs' dropout
  // masks for the backward. false where the reference code has none (Llama, Mixtral, DeepSeek).
  bool dropout = true;
  // How a deployment stores it (set by the deployment, not the model file): the decoder layers'
  // weights and GEMMs, and the KV cache in FP8 (one byte an element) or in dtype.
  Precision weights = Precision::BF16;
  bool kv_fp8 = false;
  double kv_element_bytes() const { return kv_fp8 ? 1.0 : dtype_bytes; }
  double weight_element_bytes() const { return weight_bytes_per_element(weights, dtype_bytes); }
  // Mixture of experts (0 experts: a dense model). Every layer from `dense_layers` on replaces
  // its MLP by a router over `experts` routed experts, each token going to `experts_per_token`
  // of them, plus `shared_experts` that every token passes through; an expert is a gated MLP of
  // inner width `expert_ffn`. The first `dense_layers` keep the dense MLP of width `ffn`.
  int experts = 0, experts_per_token = 0, expert_ffn = 0, shared_experts = 0, dense_layers = 0;
  // Group-limited routing (DeepSeek-V2/V3's n_group and topk_group; "node-limited" when a group
  // is a node's experts): the experts form `expert_groups` runs of consecutive experts, a token
  // first picks `groups_per_token` of them and then its experts_per_token among theirs. 0: none.
  int expert_groups = 0, groups_per_token = 0;
  bool group_limited() const { return experts > 0 && expert_groups > 0 && groups_per_token >= 1 && groups_per_token < expert_groups; }
  bool moe() const { return experts > 0; }
  // Multi-head latent attention (DeepSeek-V2/V3; kv_lora_rank 0: none). Keys and values are
  // cached as one compressed latent of kv_lora_rank plus a shared rotary key of qk_rope_head_dim
  // per token and layer; queries pass through a q_lora_rank bottleneck (0: a direct projection).
  // head_dim is then the query/key's non-rotary part per head, v_head_dim the value's.
  int q_lora_rank = 0, kv_lora_rank = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool mla() const { return kv_lora_rank > 0; }
  // Parameters every tensor-parallel device holds whole rather than a share of: latent
  // attention's down projections (query bottleneck, latent) and their norms, all layers.
  double replicated_parameters() const;
  // MoE layers among [first, first + count).
  int moe_layers_in(int first, int count) const;
  double parameters() const;           // count
  double active_parameters() const;    // those one token passes through (all, for a dense model)
  double routed_expert_parameters() const;  // the routed experts' of every MoE layer (0 for a dense model)
  double weight_bytes() const;
  double kv_bytes_per_token() const;   // 2 * layers * kv_heads * head_dim * dtype_bytes
  // KV bytes one GPU holds per token under tensor parallelism tp and pipeline parallelism pp:
  // the heaviest stage's layers and its share of the KV heads, which are replicated rather
  // than split once tp exceeds their count.
  double kv_bytes_per_token_per_gpu(int tp, int pp) const;
  // Weight bytes one GPU holds under tensor parallelism tp and pipeline parallelism pp: its share
  // of the whole, latent attention's replicated projections whole, and `expert_copies` more
  // experts on every MoE layer spread over the tp x pp GPUs (EPLB's redundant copies).
  double weight_bytes_per_gpu(int tp, int pp, int expert_copies = 0) const;
  // Under data-parallel attention over `ep` devices: every weight whole on each device but the
  // routed experts (and their `expert_copies` redundant copies), a 1/ep share of those.
  double weight_bytes_dp_attention(int ep, int expert_copies = 0) const;
  // Peak transient activation memory of a forward pass over `tokens` tokens.
  double activation_bytes(long tokens) const;
};

std::shared_ptr<Schema> hardware_schema();
std::shared_ptr<Schema> model_schema();
HardwareSpec hardware_from_params(const Params& p);
// The device of `parent`'s catalog reference `key` (`hardware: h200`, `{catalog: h200, ...}` or
// an inline mapping). A catalog device remembers its entry (HardwareSpec::catalog), and a
// datasheet ceiling the scenario overrides (peak_bf16, hbm_bandwidth) moves the measured one
// with it (measured_gemm, measured_copy keep their measured fraction of the datasheet), unless
// the measured one differs from the catalog's too (the scenario gave it a value of its own; a
// value equal to the catalog's reads as not overridden): an override always changes the costs.
HardwareSpec hardware_from_ref(const Params& parent, const std::string& key);
ModelSpec model_from_params(const Params& p);  // validates consistency (heads % kv_heads, ...)

// Catalog lookups by name (models/hardware/<name>.yaml, models/llm/<name>.yaml); a bad name
// throws the catalog's ConfigError listing the valid names, positioned at `at`.
HardwareSpec load_hardware(const std::string& name, const Origin& at = Origin{"command line", 0, 0});
ModelSpec load_model(const std::string& name, const Origin& at = Origin{"command line", 0, 0});

}  // namespace sluice
