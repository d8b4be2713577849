// Hardware and model catalogs: their schemas (documented, unit-checked keys), the
// conversion to HardwareSpec / ModelSpec, and the quantities derived from a model's shape.
#include "hardware/spec.h"

#include <algorithm>

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/binding.h"
#include "config/paths.h"

namespace sluice {

// Datasheet ceilings are never reached. Where a device has no measured ceiling the roofline
// derates its datasheet by the device's own figures (flops_derate, bandwidth_derate in its
// catalog file, each with its source); 0.75 and 0.85 where the file gives none.
double HardwareSpec::effective_flops() const {
  return measured_gemm_flops > 0 ? measured_gemm_flops : flops_derate * peak_bf16_flops;
}

double HardwareSpec::effective_flops(Precision p) const {
  const double bf16 = effective_flops();
  switch (p) {
    case Precision::BF16:
    case Precision::W4A16: return bf16;
    case Precision::FP8: return peak_bf16_flops > 0 ? bf16 * peak_fp8_flops / peak_bf16_flops : 0;
    case Precision::FP4: return peak_bf16_flops > 0 ? bf16 * peak_fp4_flops / peak_bf16_flops : 0;
  }
  return 0;
}

std::string HardwareSpec::precisions() const {
  std::string out = "bf16";
  if (supports(Precision::FP8)) out += ", fp8";
  if (supports(Precision::FP4)) out += ", fp4";
  if (kind == "gpu") out += ", w4a16";
  return out;
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::BF16: return "bf16";
    case Precision::FP8: return "fp8";
    case Precision::FP4: return "fp4";
    case Precision::W4A16: return "w4a16";
  }
  return "?";
}

const std::vector<std::pair<std::string, Precision>>& precision_names() {
  static const std::vector<std::pair<std::string, Precision>> names = {
      {"bf16", Precision::BF16}, {"fp8", Precision::FP8}, {"fp4", Precision::FP4}, {"w4a16", Precision::W4A16}};
  return names;
}

double weight_bytes_per_element(Precision p, int dtype_bytes) {
  switch (p) {
    case Precision::BF16: return dtype_bytes;
    case Precision::FP8: return 1.0;
    case Precision::FP4: return 0.5 + 1.0 / 16;    // a 4-bit value, and an FP8 scale per 16
    case Precision::W4A16: return 0.5 + 2.0 / 128;  // a 4-bit value, and a bf16 scale per 128
  }
  return dtype_bytes;
}

double HardwareSpec::effective_bandwidth_Bps() const {
  return measured_copy_Bps > 0 ? measured_copy_Bps : bandwidth_derate * hbm_bandwidth_Bps;
}

double HardwareSpec::attention_efficiency(double tokens) const {
  return tokens <= 0 ? attention_peak : attention_peak * tokens / (tokens + attention_half_tokens);
}

namespace {

// Each catalog's schema with the binding of its keys to the spec's fields (config/binding.h).
template <class T>
struct Bound {
  std::shared_ptr<Schema> schema = std::make_shared<Schema>();
  Binding<T> bind{*schema};
};

const Bound<HardwareSpec>& hardware_binding() {
  static const Bound<HardwareSpec> hb = [] {
    Bound<HardwareSpec> r;
    auto& h = r.bind;
    using H = HardwareSpec;
    h.text("name", &H::name, "device name as reports print it").def("");
    h.choice("kind", {"gpu", "tpu", "cpu"}, &H::kind, "what the device is");
    h.quantity("peak_bf16", UnitKind::FlopRate, &H::peak_bf16_flops, "datasheet dense bf16 rate, e.g. 989TFLOP/s").positive();
    h.quantity("peak_fp8", UnitKind::FlopRate, &H::peak_fp8_flops,
               "datasheet dense FP8 rate, e.g. 1979TFLOP/s (0: no FP8 tensor cores; deployment.precision fp8 is refused)")
        .def("0FLOP/s")
        .nonneg();
    h.quantity("peak_fp4", UnitKind::FlopRate, &H::peak_fp4_flops, "datasheet dense FP4 rate (0: none; Blackwell has it)")
        .def("0FLOP/s")
        .nonneg();
    h.quantity("hbm_capacity", UnitKind::Bytes, &H::hbm_physical_bytes,
               "device memory as nvidia-smi shows it, in exact binary units (a datasheet's \"80 GB\" is 80GiB); host "
               "DRAM for a cpu")
        .positive();
    h.quantity("runtime_capacity", UnitKind::Bytes, &H::hbm_bytes,
               "the total the CUDA runtime reports (torch.cuda.get_device_properties().total_memory), which "
               "frameworks plan with; 0 = hbm_capacity")
        .def("0B")
        .nonneg();
    h.quantity("hbm_bandwidth", UnitKind::Bandwidth, &H::hbm_bandwidth_Bps, "datasheet memory bandwidth, e.g. 4.8TB/s").positive();
    h.quantity("measured_copy", UnitKind::Bandwidth, &H::measured_copy_Bps,
               "measured device-copy ceiling, bytes read + written per second; 0 = unknown (datasheet x 0.85)")
        .def("0B/s")
        .nonneg();
    h.quantity("measured_gemm", UnitKind::FlopRate, &H::measured_gemm_flops,
               "measured large bf16 GEMM ceiling; 0 = unknown (datasheet x 0.75)")
        .def("0FLOP/s")
        .nonneg();
    h.quantity("kernel_launch", UnitKind::Time, &H::kernel_launch_ns,
               "per-kernel floor and gap under CUDA-graph replay (a kernel no table measures costs at least this); "
               "0 = unknown (the cost source's kernel_floor)")
        .def("0ns")
        .nonneg();
    h.real("sustained_clock", &H::sustained_clock,
           "clock a long compute-bound step sustains over the clock of the 2 ms bursts its tables were timed in; "
           "compute-bound kernel time stretches by its inverse (1 = no difference)")
        .def("1")
        .range(0.1, 1);
    h.integer("sms", &H::sms, "streaming multiprocessors (or cores that run compute kernels); 0 = unknown").def("0").range(0, 100000);
    h.integer("comm_sms", &H::comm_sms,
              "SMs NCCL's kernels hold while a transfer runs beside compute (one CTA a channel); overlapped compute "
              "runs on sms - comm_sms of them; 0 = overlap is free")
        .def("0")
        .range(0, 100000);
    h.real("flops_derate", &H::flops_derate, "achieved over datasheet FLOP/s where measured_gemm is 0").def("0.75").range(0.01, 1);
    h.real("bandwidth_derate", &H::bandwidth_derate, "achieved over datasheet bandwidth where measured_copy is 0")
        .def("0.85")
        .range(0.01, 1);
    h.real("attention_peak", &H::attention_peak,
           "fraction of the FLOP ceiling long causal prefill attention reaches (roofline where no table covers it)")
        .def("0.9")
        .range(0.01, 1);
    h.real("attention_half_tokens", &H::attention_half_tokens, "prompt length at which prefill attention reaches half its peak fraction")
        .def("1430")
        .range(0, 1e9);
    h.integer("interconnect_links", &H::interconnect_links, "scale-up links per device (NVLink, ICI); 0 = none").def("0").range(0, 1024);
    h.quantity("interconnect_link_bandwidth", UnitKind::Bandwidth, &H::interconnect_link_Bps, "one scale-up link, one direction")
        .def("0B/s")
        .nonneg();
    h.quantity("interconnect_latency", UnitKind::Time, &H::interconnect_latency_ns, "latency of one hop over the scale-up links")
        .def("0ns")
        .range(0, 1e9);  // at most 1 s: it is added per hop or token
    h.flag("nvls", &H::nvls,
           "the scale-up switch reduces in the network (NVLink SHARP: third-generation NVSwitch, HGX H100/H200); the servers of "
           "a short form's implicit cluster get it (a named topology says so itself)")
        .def("false");
    h.quantity("pcie_bandwidth", UnitKind::Bandwidth, &H::pcie_Bps, "host link, one direction").def("0B/s").nonneg();
    h.quantity("ssd_read_bandwidth", UnitKind::Bandwidth, &H::ssd_read_Bps,
               "the host's local NVMe drives' read bandwidth, per device (a KV-cache tier below host memory); 0 = none")
        .def("0B/s")
        .nonneg();
    h.quantity("price_usd", UnitKind::Money, &H::price_usd, "unit price (an estimate unless the file cites a quote)").def("0").nonneg();
    h.quantity("tdp", UnitKind::Power, &H::tdp_w,
               "board power limit (datasheet TDP/TBP): what a compute-bound step draws; 0 = unknown (no energy reported)")
        .def("0W")
        .nonneg();
    h.quantity("idle_power", UnitKind::Power, &H::idle_w, "power drawn idle with a model loaded (no kernel running)").def("0W").nonneg();
    h.quantity("memory_bound_power", UnitKind::Power, &H::memory_bound_w,
               "power of a memory-bound step (streaming HBM at its ceiling, tensor cores mostly idle: batched decode)")
        .def("0W")
        .nonneg();
    h.quantity("host_power", UnitKind::Power, &H::host_w,
               "a host node of this device's servers at full load (CPU, memory, fans, drives, switches, power-supply losses); "
               "0 = the scenario's economics.host_power")
        .def("0W")
        .nonneg();
    h.quantity("host_idle_power", UnitKind::Power, &H::host_idle_w,
               "the same with its devices idle; 0 = the scenario's economics.host_idle_power")
        .def("0W")
        .nonneg();
    h.text("calibration", &H::calibration, "folder under results/calibration/ with measured cost tables; \"\" = none").def("");
    h.text("derive_tables_from", &H::derive_tables_from,
           "a catalog device with measured tables that `--tables derived` scales to this one by the ratio of their "
           "ceilings; \"\" = none")
        .def("");
    return r;
  }();
  return hb;
}

const Bound<ModelSpec>& model_binding() {
  static const Bound<ModelSpec> mb = [] {
    Bound<ModelSpec> r;
    auto& m = r.bind;
    using M = ModelSpec;
    m.text("name", &M::name, "model name as reports print it").def("");
    m.integer("layers", &M::layers, "transformer blocks").range(1, 1e6);
    m.integer("hidden", &M::hidden, "model width (embedding size)").range(1, 1e7);
    m.integer("heads", &M::heads, "query heads").range(1, 1e5);
    m.integer("kv_heads", &M::kv_heads, "key/value heads (= heads for MHA, fewer for GQA/MQA); default: heads").optional().range(1, 1e5);
    m.integer("head_dim", &M::head_dim, "width of one head; default: hidden / heads").optional().range(1, 1e5);
    m.integer("ffn", &M::ffn, "MLP inner width (per gate/up matrix when gated)").range(1, 1e8);
    m.integer("vocab", &M::vocab, "vocabulary size (LM head rows)").range(1, 1e8);
    // Only 16-bit types: the tables and the roofline ceilings are bf16 (fp16 runs at the same
    // tensor-core rate); fp32/fp8/int8 would need their own ceilings.
    m.choice<int>("dtype", {{"bf16", 2}, {"fp16", 2}}, &M::dtype_bytes, "weight, activation and KV-cache type").def("bf16");
    m.flag("gated_ffn", &M::gated_ffn, "SwiGLU MLP (gate, up, down); false: plain up/down MLP (GPT-3)").def("true");
    m.flag("tied_embeddings", &M::tied_embeddings, "the LM head shares the input embedding matrix").def("false");
    m.flag("linear_bias", &M::linear_bias, "every linear layer carries a bias (GPT-3)").def("false");
    m.choice<bool>("norm", {{"rmsnorm", false}, {"layernorm", true}}, &M::layernorm, "normalisation layer").def("rmsnorm");
    m.choice<bool>("positions", {{"rope", false}, {"learned", true}}, &M::learned_positions,
                   "rotary embedding, or a learned position table")
        .def("rope");
    m.flag("dropout", &M::dropout,
           "trained with dropout (GPT's attention and hidden dropout, 0.1): a training layer keeps its two outputs' "
           "dropout masks; false where the reference code has none or its config sets them to 0 (Llama, Mixtral, DeepSeek)")
        .def("true");
    m.integer("max_context", &M::max_context, "longest sequence the model accepts, in tokens").def("4096").range(1, 1e9);
    m.integer("q_lora_rank", &M::q_lora_rank, "latent attention: the query bottleneck's width (0: a direct projection)").def("0").range(0, 1e6);
    m.integer("kv_lora_rank", &M::kv_lora_rank,
              "latent attention (MLA): the compressed key/value latent cached per token and layer (0: plain attention)")
        .def("0")
        .range(0, 1e6);
    m.integer("qk_rope_head_dim", &M::qk_rope_head_dim, "latent attention: the rotary key/query part per head (shared key)").def("0").range(0, 1e5);
    m.integer("v_head_dim", &M::v_head_dim, "latent attention: a value head's width").def("0").range(0, 1e5);
    m.integer("experts", &M::experts, "routed experts per MoE layer (0: a dense model)").def("0").range(0, 1e5);
    m.integer("experts_per_token", &M::experts_per_token, "routed experts each token goes to (top-k)").def("0").range(0, 1e5);
    m.integer("expert_ffn", &M::expert_ffn, "one expert's inner width (gated, per gate/up matrix)").def("0").range(0, 1e8);
    m.integer("shared_experts", &M::shared_experts, "experts every token passes through, each of expert_ffn").def("0").range(0, 1e5);
    m.integer("dense_layers", &M::dense_layers, "the first layers keep a dense MLP of width ffn (the rest are MoE)").def("0").range(0, 1e6);
    m.integer("expert_groups", &M::expert_groups,
              "group-limited routing: the routed experts form this many groups of consecutive experts (DeepSeek-V3's n_group; 0: "
              "none)")
        .def("0")
        .range(0, 16);
    m.integer("groups_per_token", &M::groups_per_token,
              "group-limited routing: the groups a token's experts are chosen from (DeepSeek-V3's topk_group)")
        .def("0")
        .range(0, 16);
    m.text("tokenizer", &M::tokenizer, "tokenizer family (llama, llama3, chatglm2, gpt2): token counts depend on it").def("llama");
    return r;
  }();
  return mb;
}

}  // namespace

std::shared_ptr<Schema> hardware_schema() { return hardware_binding().schema; }

HardwareSpec hardware_from_params(const Params& p) {
  HardwareSpec h = hardware_binding().bind.make(p);
  if (h.hbm_bytes <= 0) h.hbm_bytes = h.hbm_physical_bytes;  // runtime_capacity 0: what nvidia-smi shows
  if (h.hbm_bytes > h.hbm_physical_bytes)
    p.fail("runtime_capacity", "exceeds hbm_capacity", "at most the device memory nvidia-smi shows");
  h.interconnect_Bps = h.interconnect_links * h.interconnect_link_Bps;
  if (h.interconnect_links > 0 && h.interconnect_link_Bps <= 0)
    p.fail("interconnect_link_bandwidth", "a device with interconnect links needs their bandwidth",
           "a bandwidth > 0, e.g. 25GB/s");
  if (h.comm_sms > 0 && h.comm_sms >= h.sms)
    p.fail("comm_sms", fmt::format("{} SMs for communication leave none of the device's {} for compute", h.comm_sms, h.sms),
           "fewer than sms (set sms too), or 0 for free overlap");
  // Power: idle <= memory-bound <= TDP, each given once TDP is (0 leaves the device's energy unknown).
  if (h.tdp_w > 0) {
    if (h.idle_w <= 0 || h.idle_w >= h.tdp_w)
      p.fail("idle_power", fmt::format("a device with a TDP ({:.0f} W) needs its idle power below it", h.tdp_w), "e.g. 75W for an H200");
    if (h.memory_bound_w < h.idle_w || h.memory_bound_w > h.tdp_w)
      p.fail("memory_bound_power", fmt::format("must lie between idle_power ({:.0f} W) and tdp ({:.0f} W)", h.idle_w, h.tdp_w),
             "e.g. 450W for an H200");
  } else if (h.idle_w > 0 || h.memory_bound_w > 0) {
    p.fail("tdp", "idle_power or memory_bound_power is given without the board's TDP", "the datasheet's TDP, e.g. 700W");
  }
  if ((h.host_w > 0) != (h.host_idle_w > 0))
    p.fail(h.host_w > 0 ? "host_idle_power" : "host_power", "host_power and host_idle_power are given together or not at all",
           "both, e.g. 400W and 150W");
  if (h.host_idle_w > h.host_w)
    p.fail("host_idle_power", fmt::format("exceeds host_power ({:.0f} W)", h.host_w), fmt::format("at most {:.0f}W", h.host_w));
  if (h.calibration.find('/') != std::string::npos || h.calibration.find("..") != std::string::npos)
    p.fail("calibration", "must be a folder name under results/calibration/, not a path", "a name such as h200-torch");
  // A folder that is not there is found here, at the key, not when a workload loads its tables.
  if (!h.calibration.empty()) {
    const std::filesystem::path root = std::filesystem::path(catalog_root()) / "results" / "calibration";
    if (!path_is_directory(root / h.calibration)) {
      std::vector<std::string> have;
      std::error_code ec;
      for (std::filesystem::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_directory(ec)) have.push_back(it->path().filename().string());
      std::sort(have.begin(), have.end());
      p.fail("calibration", "no such folder under results/calibration/",
             have.empty() ? std::string("\"\" (no measured tables)") : fmt::format("\"\" (no measured tables) or one of {}", fmt::join(have, ", ")));
    }
  }
  return h;
}

std::shared_ptr<Schema> model_schema() { return model_binding().schema; }

ModelSpec model_from_params(const Params& p) {
  ModelSpec m = model_binding().bind.make(p);
  if (m.kv_heads == 0) m.kv_heads = m.heads;  // absent: MHA
  if (m.head_dim == 0) {
    if (m.hidden % m.heads != 0)
      p.fail("heads", fmt::format("hidden {} is not a multiple of heads {}, so head_dim cannot be derived", m.hidden, m.heads),
             "give head_dim explicitly, or heads dividing hidden");
    m.head_dim = m.hidden / m.heads;
  }
  if (m.kv_heads > m.heads)
    p.fail("kv_heads", fmt::format("more KV heads ({}) than query heads ({})", m.kv_heads, m.heads),
           fmt::format("a divisor of heads ({})", m.heads));
  if (m.heads % m.kv_heads != 0)
    p.fail("kv_heads", fmt::format("heads ({}) is not a multiple of kv_heads ({}): query heads must share KV heads evenly",
                                   m.heads, m.kv_heads),
           fmt::format("a divisor of heads ({})", m.heads));
  if (m.kv_lora_rank > 0) {
    if (m.qk_rope_head_dim < 1) p.fail("qk_rope_head_dim", "latent attention needs its rotary part", "a width > 0, e.g. 64");
    if (m.v_head_dim < 1) p.fail("v_head_dim", "latent attention needs its value head width", "a width > 0, e.g. 128");
    if (!p.given("head_dim")) p.fail("head_dim", "latent attention needs the non-rotary query/key width per head", "e.g. 128");
  } else {
    for (const char* k : {"q_lora_rank", "qk_rope_head_dim", "v_head_dim"})
      if (p.given(k) && p.integer(k) != 0) p.fail(k, "only latent attention has it", "kv_lora_rank > 0, or leave it out");
  }
  if (m.experts > 0) {
    if (m.experts_per_token < 1 || m.experts_per_token > m.experts)
      p.fail("experts_per_token", fmt::format("{} of {} experts", m.experts_per_token, m.experts),
             fmt::format("1 to {} (the experts a token goes to)", m.experts));
    if (m.expert_ffn < 1) p.fail("expert_ffn", "an MoE model needs its experts' inner width", "a width > 0, e.g. 2048");
    if (!m.gated_ffn) p.fail("gated_ffn", "experts are gated MLPs here", "true");
    if (m.dense_layers >= m.layers)
      p.fail("dense_layers", fmt::format("{} of {} layers leaves no MoE layer", m.dense_layers, m.layers),
             fmt::format("fewer than layers ({}), or experts: 0 for a dense model", m.layers));
    if (m.expert_groups > 0) {
      if (m.experts % m.expert_groups != 0)
        p.fail("expert_groups", fmt::format("{} groups do not divide the {} experts", m.expert_groups, m.experts),
               fmt::format("a divisor of {} up to 16, or 0 (no group limit)", m.experts));
      const int per_group = m.experts / m.expert_groups;
      if (m.groups_per_token < 1 || m.groups_per_token > m.expert_groups)
        p.fail("groups_per_token", fmt::format("{} of {} groups", m.groups_per_token, m.expert_groups),
               fmt::format("1 to {} (the groups a token's experts come from)", m.expert_groups));
      else if (m.groups_per_token * per_group < m.experts_per_token)
        p.fail("groups_per_token",
               fmt::format("{} of the groups, {} experts each, hold fewer than the {} experts a token goes to", m.groups_per_token, per_group,
                           m.experts_per_token),
               fmt::format("at least {}", (m.experts_per_token + per_group - 1) / per_group));
    } else if (p.given("groups_per_token") && p.integer("groups_per_token") != 0) {
      p.fail("groups_per_token", "chooses among expert_groups, and there are none",
             "expert_groups > 0, or groups_per_token: 0 beside expert_groups: 0 (a catalog model's own groups_per_token stays unless set)");
    }
  } else {
    for (const char* k : {"experts_per_token", "expert_ffn", "shared_experts", "dense_layers", "expert_groups", "groups_per_token"})
      if (p.given(k) && p.integer(k) != 0) p.fail(k, "only an MoE model has it", "experts > 0 (an MoE model), or leave it out");
  }
  return m;
}

int ModelSpec::moe_layers_in(int first, int count) const {
  if (experts <= 0) return 0;
  const int lo = std::max(first, dense_layers), hi = first + count;
  return std::max(0, hi - lo);
}

double ModelSpec::weight_bytes_per_gpu(int tp, int pp, int expert_copies) const {
  double w = weight_bytes() / (tp * pp);
  w += replicated_parameters() * weight_element_bytes() * (1.0 - 1.0 / tp) / pp;
  if (expert_copies > 0)
    w += static_cast<double>(expert_copies) * 3.0 * hidden * expert_ffn * weight_element_bytes() * moe_layers_in(0, layers) / (tp * pp);
  return w;
}

double ModelSpec::weight_bytes_dp_attention(int ep, int expert_copies) const {
  const double routed = routed_expert_parameters() * weight_element_bytes();
  double w = weight_bytes() - routed * (1.0 - 1.0 / ep);
  if (expert_copies > 0) w += static_cast<double>(expert_copies) * 3.0 * hidden * expert_ffn * weight_element_bytes() * moe_layers_in(0, layers) / ep;
  return w;
}

double ModelSpec::replicated_parameters() const {
  if (!mla()) return 0;
  const double h = hidden;
  const double per_layer = (q_lora_rank > 0 ? h * q_lora_rank + q_lora_rank : 0.0) + h * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank;
  return per_layer * layers;
}

double ModelSpec::routed_expert_parameters() const {
  return static_cast<double>(experts) * 3.0 * hidden * expert_ffn * moe_layers_in(0, layers);
}

double ModelSpec::active_parameters() const {
  if (experts <= 0) return parameters();
  const double idle = static_cast<double>(experts - experts_per_token) * 3.0 * hidden * expert_ffn;
  return parameters() - idle * moe_layers_in(0, layers);
}

double ModelSpec::parameters() const {
  const double h = hidden, q = static_cast<double>(heads) * head_dim, kv = static_cast<double>(kv_heads) * head_dim;
  const double f = ffn;
  // Attention: q, k, v projections in, o projection out.
  double attn = h * (q + 2 * kv) + q * h;
  if (mla()) {  // q (through its bottleneck), the latent down, its up-projection to keys and values, o
    const double H = heads, qk = head_dim + qk_rope_head_dim;
    attn = (q_lora_rank > 0 ? h * q_lora_rank + q_lora_rank * H * qk + q_lora_rank : h * H * qk) +
           h * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank + kv_lora_rank * H * (head_dim + v_head_dim) + H * v_head_dim * h;
  }
  double mlp = (gated_ffn ? 3 : 2) * h * f;
  double norms = 2 * h * (layernorm ? 2 : 1);
  if (linear_bias) {
    attn += (q + 2 * kv) + h;
    mlp += (gated_ffn ? 2 : 1) * f + h;
  }
  const double per_layer = attn + mlp + norms;
  double total = layers * per_layer;
  if (experts > 0) {  // MoE layers: a router and every expert in place of the dense MLP
    const double moe = h * experts + static_cast<double>(experts + shared_experts) * 3.0 * h * expert_ffn;
    total += moe_layers_in(0, layers) * (moe - mlp);
  }
  total += static_cast<double>(vocab) * h * (tied_embeddings ? 1 : 2);  // embedding (+ LM head)
  total += h * (layernorm ? 2 : 1);                                     // final norm
  if (learned_positions) total += static_cast<double>(max_context) * h;
  return total;
}

double ModelSpec::weight_bytes() const {
  if (weights == Precision::BF16) return parameters() * dtype_bytes;
  // The embedding (and an untied LM head) stay in dtype; the decoder layers at the precision.
  const double outer = static_cast<double>(vocab) * hidden * (tied_embeddings ? 1 : 2);
  return (parameters() - outer) * weight_bytes_per_element(weights, dtype_bytes) + outer * dtype_bytes;
}

double ModelSpec::kv_bytes_per_token() const {
  if (mla()) return static_cast<double>(layers) * (kv_lora_rank + qk_rope_head_dim) * kv_element_bytes();
  return 2.0 * layers * kv_heads * head_dim * kv_element_bytes();
}

double ModelSpec::kv_bytes_per_token_per_gpu(int tp, int pp) const {
  const int stage_layers = (layers + pp - 1) / pp;
  // Latent attention: one latent per token, the same on every tensor-parallel device (it is not
  // split by heads), as vLLM and SGLang hold it without data-parallel attention.
  if (mla()) return static_cast<double>(stage_layers) * (kv_lora_rank + qk_rope_head_dim) * kv_element_bytes();
  return 2.0 * stage_layers * std::max(1, kv_heads / tp) * head_dim * kv_element_bytes();
}

// An estimate of the transient memory of one inference forward pass over `tokens` tokens
// (no activations are kept for a backward pass). Live at the peak of one layer: the residual
// stream, plus the larger of the attention block (normed input, q|k|v, attention output; flash
// attention keeps no score matrix) and the MLP block (normed input, gate|up output, activated
// output). After the last layer the logits are computed in fp32 for every position, as the
// Hugging Face reference implementations do: an upper bound for engines that compute logits
// only for the sampled rows (vLLM), and the term that dominates a long prompt. With it,
// ChatGLM2-6B in bf16 lands on its README's 13.1 GB to encode 2048 tokens and 12.8 GB to
// decode at 8192 tokens (tests/unit/test_hardware.cpp).
double ModelSpec::activation_bytes(long tokens) const {
  const double t = static_cast<double>(std::max(0L, tokens)), b = dtype_bytes;
  const double q = static_cast<double>(heads) * head_dim, kv = static_cast<double>(kv_heads) * head_dim;
  const double residual = t * hidden * b;
  const double attention = t * (hidden + q + 2 * kv + q) * b;
  double mlp = t * (hidden + (gated_ffn ? 2.0 : 1.0) * ffn + ffn) * b;
  if (experts > 0) {  // an MoE layer: each token's rows through its k routed experts and the shared ones
    const double moe = t * (hidden + 3.0 * (experts_per_token + shared_experts) * expert_ffn) * b;
    mlp = dense_layers > 0 ? std::max(mlp, moe) : moe;
  }
  const double logits = t * static_cast<double>(vocab) * 4.0;
  return residual + std::max({attention, mlp, logits});
}

HardwareSpec load_hardware(const std::string& name, const Origin& at) {
  Node n = load_catalog_entry({"models/hardware"}, name, at, "hardware");
  HardwareSpec h = hardware_from_params(parse_params(n, *hardware_schema(), "hardware"));
  if (h.name.empty()) h.name = name;
  h.catalog = name;
  return h;
}

HardwareSpec hardware_from_ref(const Params& parent, const std::string& key) {
  HardwareSpec h = hardware_from_params(parent.section(key));
  const Params::Value& v = parent.value(key);
  if (v.catalog.empty()) return h;
  h.catalog = v.catalog;
  const HardwareSpec base = load_hardware(v.catalog, v.origin);
  if (h.name.empty()) h.name = base.name;
  if (h.measured_gemm_flops == base.measured_gemm_flops && h.peak_bf16_flops != base.peak_bf16_flops && base.peak_bf16_flops > 0)
    h.measured_gemm_flops *= h.peak_bf16_flops / base.peak_bf16_flops;
  if (h.measured_copy_Bps == base.measured_copy_Bps && h.hbm_bandwidth_Bps != base.hbm_bandwidth_Bps && base.hbm_bandwidth_Bps > 0)
    h.measured_copy_Bps *= h.hbm_bandwidth_Bps / base.hbm_bandwidth_Bps;
  return h;
}

ModelSpec load_model(const std::string& name, const Origin& at) {
  Node n = load_catalog_entry({"models/llm"}, name, at, "model");
  ModelSpec m = model_from_params(parse_params(n, *model_schema(), "model"));
  if (m.name.empty()) m.name = name;
  return m;
}

}  // namespace sluice
