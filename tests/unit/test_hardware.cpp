// Hardware and model catalogs: schemas, units, validation, and the derived model quantities
// pinned to published figures.
#include <doctest/doctest.h>

#include <string>

#include "config/node.h"
#include "config/schema.h"
#include "hardware/spec.h"

using namespace sluice;

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0, kMiB = 1024.0 * 1024.0;
ModelSpec model_yaml(const std::string& text) {
  Node n = load_yaml_string(text, "inline.yaml");
  return model_from_params(parse_params(n, *model_schema(), "model"));
}
}  // namespace

TEST_CASE("hardware catalog: every entry loads, with units resolved") {
  for (const auto& name : catalog_names("models/hardware")) {
    CAPTURE(name);
    const HardwareSpec h = load_hardware(name);
    CHECK(h.name == name);
    CHECK(h.peak_bf16_flops > 0);
    CHECK(h.hbm_bytes > 0);
    CHECK(h.effective_flops() > 0);
    CHECK(h.effective_bandwidth_Bps() > 0);
    CHECK(h.price_usd > 0);
  }
  const HardwareSpec h200 = load_hardware("h200");
  CHECK(h200.kind == "gpu");
  CHECK(h200.peak_bf16_flops == doctest::Approx(989e12));
  CHECK(h200.hbm_bytes == doctest::Approx(139.8 * kGiB));
  CHECK(h200.hbm_bandwidth_Bps == doctest::Approx(4.8e12));
  CHECK(h200.measured_copy_Bps == doctest::Approx(4.2293e12));
  CHECK(h200.measured_gemm_flops == doctest::Approx(767.32e12));
  CHECK(h200.effective_bandwidth_Bps() == doctest::Approx(4.2293e12));
  CHECK(h200.interconnect_Bps == doctest::Approx(450e9));
  CHECK(h200.calibration == "h200-torch");
  const HardwareSpec tpu = load_hardware("tpu-v4");
  CHECK(tpu.peak_bf16_flops == doctest::Approx(275e12));
  CHECK(tpu.hbm_bytes == doctest::Approx(32.0 * 1024 * 1024 * 1024));
  CHECK(tpu.hbm_bandwidth_Bps == doctest::Approx(1200e9));
  CHECK(tpu.interconnect_links == 6);
  CHECK(tpu.interconnect_Bps == doctest::Approx(300e9));
  // No measured ceilings: the datasheet, derated.
  const HardwareSpec h100 = load_hardware("h100-sxm");
  CHECK(h100.effective_flops() < h100.peak_bf16_flops);
  CHECK(h100.effective_bandwidth_Bps() < h100.hbm_bandwidth_Bps);
  CHECK(load_hardware("host-cpu").kind == "cpu");
}

TEST_CASE("hardware memory: each device's capacity in exact binary bytes, and what the runtime reports") {
  // nvidia-smi's MiB, and the total PyTorch reports (what frameworks plan with).
  struct Want {
    const char* name;
    double physical_mib, runtime_gib;
  };
  for (const Want& w : {Want{"h200", 143771, 139.8}, Want{"h100-sxm", 81559, 79.11}, Want{"a100-80gb", 81920, 79.15},
                        Want{"tpu-v4", 32768, 32}, Want{"host-cpu", 2097152, 2048}}) {
    CAPTURE(w.name);
    const HardwareSpec h = load_hardware(w.name);
    CHECK(h.hbm_physical_bytes == doctest::Approx(w.physical_mib * kMiB).epsilon(1e-12));
    CHECK(h.hbm_bytes == doctest::Approx(w.runtime_gib * kGiB).epsilon(1e-12));
    CHECK(h.hbm_bytes <= h.hbm_physical_bytes);
  }
  // An "A100 80GB" holds 80 GiB, 85.9e9 bytes, not 80e9: about 7% more than a decimal reading.
  const HardwareSpec a100 = load_hardware("a100-80gb");
  CHECK(a100.hbm_physical_bytes == doctest::Approx(85899345920.0));
  CHECK(a100.hbm_physical_bytes / 80e9 == doctest::Approx(1.0737).epsilon(1e-4));
}

TEST_CASE("hardware derates: each device its own, with A100 from Vidur's measured rows") {
  const HardwareSpec a100 = load_hardware("a100-80gb"), h100 = load_hardware("h100-sxm"), h200 = load_hardware("h200");
  CHECK(a100.effective_flops() == doctest::Approx(210e12).epsilon(0.002));
  CHECK(a100.effective_bandwidth_Bps() == doctest::Approx(1.49e12).epsilon(0.002));
  CHECK(h100.effective_flops() == doctest::Approx(767.3e12).epsilon(0.002));  // the H200's measured ratio
  // Prefill attention efficiency: the A100 at 550 tokens runs 8.6x under its FLOP ceiling.
  CHECK(1 / a100.attention_efficiency(550) == doctest::Approx(8.6).epsilon(0.01));
  CHECK(h200.attention_efficiency(2048) == doctest::Approx(0.53).epsilon(0.01));
  CHECK(h200.attention_efficiency(16384) > h200.attention_efficiency(512));
}

TEST_CASE("hardware catalog: a bad name lists the valid ones") {
  try {
    load_hardware("h300");
    FAIL("no error");
  } catch (const ConfigError& e) {
    const std::string w = e.what();
    CHECK(w.find("h200") != std::string::npos);
    CHECK(w.find("tpu-v4") != std::string::npos);
  }
  CHECK_THROWS_AS(load_model("llama9-7b"), ConfigError);
}

TEST_CASE("hardware schema: wrong units and unknown keys fail with file:line") {
  Node n = load_yaml_string("kind: gpu\npeak_bf16: 989TB/s\nhbm_capacity: 141GB\nhbm_bandwidth: 4.8TB/s\n", "hw.yaml");
  try {
    hardware_from_params(parse_params(n, *hardware_schema(), "hardware"));
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.origin().line == 2);
    CHECK(e.key_path() == "hardware.peak_bf16");
  }
  Node u = load_yaml_string("kind: gpu\npeak_bf16: 1TFLOP/s\nhbm_capacity: 1GB\nhbm_bandwidth: 1TB/s\nhbm_bw: 3\n", "hw.yaml");
  CHECK_THROWS_AS(parse_params(u, *hardware_schema(), "hardware"), ConfigError);
}

TEST_CASE("hardware model catalog: every entry loads and validates") {
  for (const auto& name : catalog_names("models/llm")) {
    CAPTURE(name);
    const ModelSpec m = load_model(name);
    CHECK(m.name == name);
    CHECK(m.heads % m.kv_heads == 0);
    CHECK(m.parameters() > 1e8);
  }
}

TEST_CASE("hardware model shapes: parameters and KV bytes per token match published figures") {
  const ModelSpec glm = load_model("chatglm2-6b");
  CHECK(glm.kv_bytes_per_token() == doctest::Approx(28.0 * 1024));
  CHECK(glm.parameters() == doctest::Approx(6.24e9).epsilon(0.01));
  const ModelSpec l7 = load_model("llama2-7b");
  CHECK(l7.kv_bytes_per_token() == doctest::Approx(512.0 * 1024));
  CHECK(l7.parameters() == doctest::Approx(6.74e9).epsilon(0.01));
  CHECK(l7.weight_bytes() == doctest::Approx(2 * l7.parameters()));
  // MQA shrinks ChatGLM2's cache 16x against 32 KV heads of the same width.
  CHECK(448.0 * 1024 / glm.kv_bytes_per_token() == doctest::Approx(16));
  CHECK(load_model("llama3-8b").parameters() == doctest::Approx(8.03e9).epsilon(0.01));
  CHECK(load_model("llama3-8b").kv_bytes_per_token() == doctest::Approx(128.0 * 1024));
  CHECK(load_model("llama2-70b").parameters() == doctest::Approx(68.98e9).epsilon(0.01));
  CHECK(load_model("llama3-70b").parameters() == doctest::Approx(70.55e9).epsilon(0.01));
  CHECK(load_model("tinyllama-1.1b").parameters() == doctest::Approx(1.10e9).epsilon(0.01));
  CHECK(load_model("gpt3-175b").parameters() == doctest::Approx(175e9).epsilon(0.01));
  CHECK(load_model("gpt3-13b").parameters() == doctest::Approx(12.85e9).epsilon(0.02));
}

TEST_CASE("hardware model memory: ChatGLM2-6B bf16 against its README (12.8 GB decode at 8192, 13.1 GB encode 2048)") {
  const ModelSpec glm = load_model("chatglm2-6b");
  // Decoding at 8192 tokens: the weights, 8192 tokens of KV, one token's forward pass.
  const double decode = glm.weight_bytes() + 8192 * glm.kv_bytes_per_token() + glm.activation_bytes(1);
  CHECK(decode == doctest::Approx(12.8e9).epsilon(0.05));
  // Encoding a 2048-token prompt: the logits of every position dominate the activation.
  const double encode = glm.weight_bytes() + 2048 * glm.kv_bytes_per_token() + glm.activation_bytes(2048);
  CHECK(encode == doctest::Approx(13.1e9).epsilon(0.05));
  CHECK(glm.activation_bytes(2048) > glm.activation_bytes(1));
  CHECK(glm.activation_bytes(0) == 0);
}

TEST_CASE("hardware model schema: inconsistent heads fail at the key, with file:line") {
  try {
    model_yaml("layers: 2\nhidden: 64\nheads: 8\nkv_heads: 3\nffn: 128\nvocab: 100\n");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.key_path() == "model.kv_heads");
    CHECK(e.origin().line == 4);
    CHECK(e.origin().file == "inline.yaml");
  }
  CHECK_THROWS_AS(model_yaml("layers: 0\nhidden: 64\nheads: 8\nffn: 128\nvocab: 100\n"), ConfigError);
  CHECK_THROWS_AS(model_yaml("layers: 2\nhidden: 65\nheads: 8\nffn: 128\nvocab: 100\n"), ConfigError);
  const ModelSpec m = model_yaml("layers: 2\nhidden: 64\nheads: 8\nffn: 128\nvocab: 100\n");
  CHECK(m.kv_heads == 8);
  CHECK(m.head_dim == 8);
  CHECK(m.kv_bytes_per_token() == doctest::Approx(2.0 * 2 * 8 * 8 * 2));
}
