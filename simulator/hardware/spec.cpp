// Hardware and model catalogs: their schemas (documented, unit-checked keys), the
// conversion to HardwareSpec / ModelSpec, and the quantities derived from a model's shape.
#include "hardware/spec.h"

#include <algorithm>

#include <fmt/format.h>

namespace sluice {

// Datasheet ceilings are never reached. Where a device has no measured ceiling the roofline
// derates its datasheet by the device's own figures (flops_derate, bandwidth_derate in its
// catalog file, each with its source); 0.75 and 0.85 where the file gives none.
double HardwareSpec::effective_flops() const {
  return measured_gemm_flops > 0 ? measured_gemm_flops : flops_derate * peak_bf16_flops;
}

double HardwareSpec::effective_bandwidth_Bps() const {
  return measured_copy_Bps > 0 ? measured_copy_Bps : bandwidth_derate * hbm_bandwidth_Bps;
}

double HardwareSpec::attention_efficiency(double tokens) const {
  return tokens <= 0 ? attention_peak : attention_peak * tokens / (tokens + attention_half_tokens);
}

std::shared_ptr<Schema> hardware_schema() {
  static const std::shared_ptr<Schema> s = [] {
    auto h = std::make_shared<Schema>();
    h->add("name", ParamType::String, "device name as reports print it").def("");
    h->enumeration("kind", {"gpu", "tpu", "cpu"}, "what the device is");
    h->quantity("peak_bf16", UnitKind::FlopRate, "datasheet dense bf16 rate, e.g. 989TFLOP/s").positive();
    h->quantity("hbm_capacity", UnitKind::Bytes,
                "device memory as nvidia-smi shows it, in exact binary units (a datasheet's \"80 GB\" is 80GiB); host "
                "DRAM for a cpu")
        .positive();
    h->quantity("runtime_capacity", UnitKind::Bytes,
                "the total the CUDA runtime reports (torch.cuda.get_device_properties().total_memory), which "
                "frameworks plan with; 0 = hbm_capacity")
        .def("0B")
        .nonneg();
    h->quantity("hbm_bandwidth", UnitKind::Bandwidth, "datasheet memory bandwidth, e.g. 4.8TB/s").positive();
    h->quantity("measured_copy", UnitKind::Bandwidth,
                "measured device-copy ceiling, bytes read + written per second; 0 = unknown (datasheet x 0.85)")
        .def("0B/s")
        .nonneg();
    h->quantity("measured_gemm", UnitKind::FlopRate,
                "measured large bf16 GEMM ceiling; 0 = unknown (datasheet x 0.75)")
        .def("0FLOP/s")
        .nonneg();
    h->quantity("kernel_launch", UnitKind::Time,
                "per-kernel floor and gap under CUDA-graph replay (a kernel no table measures costs at least this); "
                "0 = unknown (the cost source's kernel_floor)")
        .def("0ns")
        .nonneg();
    h->add("sustained_clock", ParamType::Real,
           "clock a long compute-bound step sustains over the clock of the 2 ms bursts its tables were timed in; "
           "compute-bound kernel time stretches by its inverse (1 = no difference)")
        .def("1")
        .range(0.1, 1);
    h->add("flops_derate", ParamType::Real, "achieved over datasheet FLOP/s where measured_gemm is 0").def("0.75").range(0.01, 1);
    h->add("bandwidth_derate", ParamType::Real, "achieved over datasheet bandwidth where measured_copy is 0")
        .def("0.85")
        .range(0.01, 1);
    h->add("attention_peak", ParamType::Real,
           "fraction of the FLOP ceiling long causal prefill attention reaches (roofline where no table covers it)")
        .def("0.9")
        .range(0.01, 1);
    h->add("attention_half_tokens", ParamType::Real, "prompt length at which prefill attention reaches half its peak fraction")
        .def("1430")
        .range(0, 1e9);
    h->add("interconnect_links", ParamType::Int, "scale-up links per device (NVLink, ICI); 0 = none").def("0").range(0, 1024);
    h->quantity("interconnect_link_bandwidth", UnitKind::Bandwidth, "one scale-up link, one direction")
        .def("0B/s")
        .nonneg();
    h->quantity("interconnect_latency", UnitKind::Time, "latency of one hop over the scale-up links").def("0ns").range(0, 1e9);  // at most 1 s: it is added per hop or token
    h->quantity("pcie_bandwidth", UnitKind::Bandwidth, "host link, one direction").def("0B/s").nonneg();
    h->quantity("price_usd", UnitKind::Money, "unit price (an estimate unless the file cites a quote)").def("0").nonneg();
    h->add("calibration", ParamType::String, "folder under results/calibration/ with measured cost tables; \"\" = none")
        .def("");
    h->add("derive_tables_from", ParamType::String,
           "a catalog device with measured tables that `--tables derived` scales to this one by the ratio of their "
           "ceilings; \"\" = none")
        .def("");
    return h;
  }();
  return s;
}

HardwareSpec hardware_from_params(const Params& p) {
  HardwareSpec h;
  h.name = p.str("name");
  h.kind = p.str("kind");
  h.peak_bf16_flops = p.real("peak_bf16");
  h.hbm_physical_bytes = p.real("hbm_capacity");
  h.hbm_bytes = p.real("runtime_capacity") > 0 ? p.real("runtime_capacity") : h.hbm_physical_bytes;
  if (h.hbm_bytes > h.hbm_physical_bytes)
    p.fail("runtime_capacity", "exceeds hbm_capacity", "at most the device memory nvidia-smi shows");
  h.flops_derate = p.real("flops_derate");
  h.bandwidth_derate = p.real("bandwidth_derate");
  h.attention_peak = p.real("attention_peak");
  h.attention_half_tokens = p.real("attention_half_tokens");
  h.hbm_bandwidth_Bps = p.real("hbm_bandwidth");
  h.measured_copy_Bps = p.real("measured_copy");
  h.measured_gemm_flops = p.real("measured_gemm");
  h.kernel_launch_ns = p.real("kernel_launch");
  h.sustained_clock = p.real("sustained_clock");
  h.interconnect_links = static_cast<int>(p.integer("interconnect_links"));
  h.interconnect_link_Bps = p.real("interconnect_link_bandwidth");
  h.interconnect_Bps = h.interconnect_links * h.interconnect_link_Bps;
  h.interconnect_latency_ns = p.real("interconnect_latency");
  h.pcie_Bps = p.real("pcie_bandwidth");
  h.price_usd = p.real("price_usd");
  h.calibration = p.str("calibration");
  h.derive_tables_from = p.str("derive_tables_from");
  if (h.interconnect_links > 0 && h.interconnect_link_Bps <= 0)
    p.fail("interconnect_link_bandwidth", "a device with interconnect links needs their bandwidth",
           "a bandwidth > 0, e.g. 25GB/s");
  if (h.calibration.find('/') != std::string::npos || h.calibration.find("..") != std::string::npos)
    p.fail("calibration", "must be a folder name under results/calibration/, not a path", "a name such as h200-torch");
  return h;
}

std::shared_ptr<Schema> model_schema() {
  static const std::shared_ptr<Schema> s = [] {
    auto m = std::make_shared<Schema>();
    m->add("name", ParamType::String, "model name as reports print it").def("");
    m->add("layers", ParamType::Int, "transformer blocks").range(1, 1e6);
    m->add("hidden", ParamType::Int, "model width (embedding size)").range(1, 1e7);
    m->add("heads", ParamType::Int, "query heads").range(1, 1e5);
    m->add("kv_heads", ParamType::Int, "key/value heads (= heads for MHA, fewer for GQA/MQA); default: heads")
        .optional()
        .range(1, 1e5);
    m->add("head_dim", ParamType::Int, "width of one head; default: hidden / heads").optional().range(1, 1e5);
    m->add("ffn", ParamType::Int, "MLP inner width (per gate/up matrix when gated)").range(1, 1e8);
    m->add("vocab", ParamType::Int, "vocabulary size (LM head rows)").range(1, 1e8);
    // Only 16-bit types: the tables and the roofline ceilings are bf16 (fp16 runs at the same
    // tensor-core rate); fp32/fp8/int8 would need their own ceilings.
    m->enumeration("dtype", {"bf16", "fp16"}, "weight, activation and KV-cache type").def("bf16");
    m->add("gated_ffn", ParamType::Bool, "SwiGLU MLP (gate, up, down); false: plain up/down MLP (GPT-3)").def("true");
    m->add("tied_embeddings", ParamType::Bool, "the LM head shares the input embedding matrix").def("false");
    m->add("linear_bias", ParamType::Bool, "every linear layer carries a bias (GPT-3)").def("false");
    m->enumeration("norm", {"rmsnorm", "layernorm"}, "normalisation layer").def("rmsnorm");
    m->enumeration("positions", {"rope", "learned"}, "rotary embedding, or a learned position table").def("rope");
    m->add("max_context", ParamType::Int, "longest sequence the model accepts, in tokens").def("4096").range(1, 1e9);
    m->add("tokenizer", ParamType::String, "tokenizer family (llama, llama3, chatglm2, gpt2): token counts depend on it")
        .def("llama");
    return m;
  }();
  return s;
}

ModelSpec model_from_params(const Params& p) {
  ModelSpec m;
  m.name = p.str("name");
  m.layers = static_cast<int>(p.integer("layers"));
  m.hidden = static_cast<int>(p.integer("hidden"));
  m.heads = static_cast<int>(p.integer("heads"));
  m.kv_heads = p.has("kv_heads") ? static_cast<int>(p.integer("kv_heads")) : m.heads;
  if (p.has("head_dim")) {
    m.head_dim = static_cast<int>(p.integer("head_dim"));
  } else {
    if (m.hidden % m.heads != 0)
      p.fail("heads", fmt::format("hidden {} is not a multiple of heads {}, so head_dim cannot be derived", m.hidden, m.heads),
             "give head_dim explicitly, or heads dividing hidden");
    m.head_dim = m.hidden / m.heads;
  }
  m.ffn = static_cast<int>(p.integer("ffn"));
  m.vocab = static_cast<int>(p.integer("vocab"));
  const std::string& dt = p.str("dtype");
  m.dtype_bytes = dt == "fp32" ? 4 : (dt == "fp8" || dt == "int8") ? 1 : 2;
  m.gated_ffn = p.flag("gated_ffn");
  m.tied_embeddings = p.flag("tied_embeddings");
  m.linear_bias = p.flag("linear_bias");
  m.layernorm = p.str("norm") == "layernorm";
  m.learned_positions = p.str("positions") == "learned";
  m.max_context = static_cast<int>(p.integer("max_context"));
  m.tokenizer = p.str("tokenizer");
  if (m.kv_heads > m.heads)
    p.fail("kv_heads", fmt::format("more KV heads ({}) than query heads ({})", m.kv_heads, m.heads),
           fmt::format("a divisor of heads ({})", m.heads));
  if (m.heads % m.kv_heads != 0)
    p.fail("kv_heads", fmt::format("heads ({}) is not a multiple of kv_heads ({}): query heads must share KV heads evenly",
                                   m.heads, m.kv_heads),
           fmt::format("a divisor of heads ({})", m.heads));
  return m;
}

double ModelSpec::parameters() const {
  const double h = hidden, q = static_cast<double>(heads) * head_dim, kv = static_cast<double>(kv_heads) * head_dim;
  const double f = ffn;
  // Attention: q, k, v projections in, o projection out.
  double attn = h * (q + 2 * kv) + q * h;
  double mlp = (gated_ffn ? 3 : 2) * h * f;
  double norms = 2 * h * (layernorm ? 2 : 1);
  if (linear_bias) {
    attn += (q + 2 * kv) + h;
    mlp += (gated_ffn ? 2 : 1) * f + h;
  }
  const double per_layer = attn + mlp + norms;
  double total = layers * per_layer;
  total += static_cast<double>(vocab) * h * (tied_embeddings ? 1 : 2);  // embedding (+ LM head)
  total += h * (layernorm ? 2 : 1);                                     // final norm
  if (learned_positions) total += static_cast<double>(max_context) * h;
  return total;
}

double ModelSpec::weight_bytes() const { return parameters() * dtype_bytes; }

double ModelSpec::kv_bytes_per_token() const {
  return 2.0 * layers * kv_heads * head_dim * dtype_bytes;
}

double ModelSpec::kv_bytes_per_token_per_gpu(int tp, int pp) const {
  const int stage_layers = (layers + pp - 1) / pp;
  return 2.0 * stage_layers * std::max(1, kv_heads / tp) * head_dim * dtype_bytes;
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
  const double mlp = t * (hidden + (gated_ffn ? 2.0 : 1.0) * ffn + ffn) * b;
  const double logits = t * static_cast<double>(vocab) * 4.0;
  return residual + std::max({attention, mlp, logits});
}

HardwareSpec load_hardware(const std::string& name, const Origin& at) {
  Node n = load_catalog_entry({"models/hardware"}, name, at, "hardware");
  HardwareSpec h = hardware_from_params(parse_params(n, *hardware_schema(), "hardware"));
  if (h.name.empty()) h.name = name;
  return h;
}

ModelSpec load_model(const std::string& name, const Origin& at) {
  Node n = load_catalog_entry({"models/llm"}, name, at, "model");
  ModelSpec m = model_from_params(parse_params(n, *model_schema(), "model"));
  if (m.name.empty()) m.name = name;
  return m;
}

}  // namespace sluice
