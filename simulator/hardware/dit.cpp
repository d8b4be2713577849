// One DiT denoising step, kernel by kernel. The code it follows:
//   DiT-XL/2 (facebookresearch/DiT models.py) per block: c -> SiLU -> Linear(h, 6h) (adaLN),
//   LayerNorm -> modulate x * (1 + scale) + shift (3 kernels) -> qkv Linear(h, 3h) -> SDPA
//   (non-causal) -> transpose back (a copy) -> proj Linear(h, h) -> x + gate * out (2 kernels)
//   -> LayerNorm -> modulate -> fc1 Linear(h, 4h) -> GELU(tanh) -> fc2 Linear(4h, h) -> gate +
//   residual. Around the blocks: patch embedding (a GEMM over patch pixels), position add,
//   timestep / class embedders (batch rows), final adaLN, LayerNorm, modulate, Linear to
//   patch^2 x channels, unpatchify (a copy).
//   PixArt-Sigma adds per block q Linear(h, h), kv Linear(h, 2h) over the text tokens, SDPA of
//   the patches over the text, a copy, proj and a residual add; its adaLN-single makes the
//   per-block modulation an add of a learned table to one shared Linear(h, 6h).
//   Flux.1 double-stream blocks run image and text streams with their own weights (modulation
//   Linear(h, 6h), LayerNorm + modulate, qkv, QK RMSNorm, proj, MLP) around one joint SDPA over
//   both (concatenated: 3 copies; RoPE on q and k); single-stream blocks run one Linear(h, 7h)
//   (q, k, v and the MLP in), QK norm, RoPE, SDPA, GELU, a concat and Linear(5h, h).
// Memory-bound kernels read elementwise.csv at the same traffic where it measures a kernel of
// that kind (layernorm ~ rmsnorm, broadcast multiply / add ~ residual_add, rope), else cost
// physics at the copy ceiling with the device's launch floor.
#include "hardware/dit.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "config/binding.h"
#include "config/paths.h"

namespace sluice {

namespace {

struct DitBinding {
  std::shared_ptr<Schema> schema = std::make_shared<Schema>();
  Binding<DitSpec> bind{*schema};
};

const DitBinding& dit_binding() {
  static const DitBinding db = [] {
    DitBinding r;
    auto& m = r.bind;
    using D = DitSpec;
    m.text("name", &D::name, "model name as reports print it").def("");
    m.integer("layers", &D::layers, "transformer blocks (Flux: double-stream blocks)").range(1, 1e5);
    m.integer("single_layers", &D::single_layers, "single-stream blocks after the double-stream ones (Flux)").def("0").range(0, 1e5);
    m.integer("hidden", &D::hidden, "model width").range(1, 1e6);
    m.integer("heads", &D::heads, "attention heads").range(1, 1e4);
    m.real("mlp_ratio", &D::mlp_ratio, "MLP inner width over hidden").def("4").range(0.1, 64);
    m.integer("patch", &D::patch, "patch side in latent pixels").def("2").range(1, 64);
    m.integer("latent_channels", &D::latent_channels, "channels of the latent image").def("4").range(1, 1024);
    m.flag("learn_sigma", &D::learn_sigma, "the final layer predicts noise and variance (twice the channels)").def("false");
    m.flag("cross_attention", &D::cross_attention, "each block cross-attends to text tokens (PixArt)").def("false");
    m.integer("text_tokens", &D::text_tokens, "text tokens conditioning the step (0: class-conditional)").def("0").range(0, 1e6);
    m.integer("text_width", &D::text_width, "width of the text encoder's tokens").def("0").range(0, 1e6);
    m.flag("adaln_single", &D::adaln_single, "one shared modulation linear per step instead of one per block (PixArt)").def("false");
    m.flag("rope", &D::rope, "rotary embedding on q and k (Flux)").def("false");
    m.flag("qk_norm", &D::qk_norm, "RMSNorm on q and k before attention (Flux)").def("false");
    return r;
  }();
  return db;
}

}  // namespace

std::shared_ptr<Schema> dit_schema() { return dit_binding().schema; }

DitSpec dit_from_params(const Params& p, const std::string& fallback_name) {
  DitSpec d = dit_binding().bind.make(p);
  if (d.name.empty()) d.name = fallback_name;
  if (d.hidden % d.heads != 0) p.fail("heads", "does not divide hidden", "a divisor of hidden");
  d.head_dim = d.hidden / d.heads;
  if (d.cross_attention && d.text_tokens <= 0) p.fail("text_tokens", "cross-attention needs text tokens", "> 0, e.g. 300");
  return d;
}

DitSpec load_dit(const std::string& name, const Origin& at) {
  Node n = load_catalog_entry({"models/dit"}, name, at, "dit");
  return dit_from_params(parse_params(n, *dit_schema(), "dit"), name);
}

bool is_dit(const std::string& name) {
  for (const auto& n : catalog_names("models/dit"))
    if (n == name) return true;
  return false;
}

double DitSpec::parameters() const {
  const double h = hidden, f = mlp_ratio * hidden;
  const double block = 4 * h * h + 2 * h * f + (adaln_single ? 0 : 6 * h * h) + (cross_attention ? 4 * h * h : 0);
  const double dbl = single_layers > 0 ? 2 * block : block;  // Flux: two streams per double block
  const double single = 3 * h * h + h * f + (h + f) * h + 3 * h * h;
  return layers * dbl + single_layers * single + (adaln_single ? 6 * h * h : 0) + text_width * h;
}

ModelSpec DitSpec::as_model() const {
  ModelSpec m;
  m.name = name;
  m.layers = layers + single_layers;
  m.hidden = hidden;
  m.heads = m.kv_heads = heads;
  m.head_dim = head_dim;
  m.ffn = static_cast<int>(mlp_ratio * hidden);
  m.vocab = 1;
  m.gated_ffn = false;
  m.layernorm = true;
  m.learned_positions = !rope;
  return m;
}

namespace {

// Accumulates ops by name, each repeated `times`.
struct Step {
  IterationCost it;
  void add(OpCost o, double times = 1) {
    o.ns *= times;
    o.flops *= times;
    o.bytes *= times;
    o.kernels *= times;
    for (auto& q : it.ops)
      if (q.op == o.op && q.source == o.source) {
        q.ns += o.ns, q.flops += o.flops, q.bytes += o.bytes, q.kernels += o.kernels;
        it.total_ns += o.ns, it.kernels += o.kernels;
        return;
      }
    it.total_ns += o.ns;
    it.kernels += o.kernels;
    it.ops.push_back(std::move(o));
  }
};

}  // namespace

bool is_attention_op(const std::string& op) { return op.rfind("attention.", 0) == 0 && op != "attention.layout_copy" && op != "attention.concat"; }

IterationCost dit_step(const CostModel& cm, const DitSpec& d, long patch_tokens, int batch) {
  return dit_step_part(cm, d, patch_tokens, batch, DitPart{});
}

IterationCost dit_step_part(const CostModel& cm, const DitSpec& d, long patch_tokens, int batch, const DitPart& part) {
  const bool fused = cm.implementation() == Implementation::Fused;
  const double B = batch, img = static_cast<double>(patch_tokens);
  // Rows of this device's linear layers and elementwise kernels (all images of the batch).
  const double P = (part.rows < 0 ? img : part.rows) * B, T = (part.text_rows < 0 ? d.text_tokens : part.text_rows) * B,
               h = d.hidden, f = d.mlp_ratio * d.hidden, b = 2;
  // One attention call: image-token queries and keys per image.
  const double q_img = part.q < 0 ? P / B : part.q, kv_img = part.kv < 0 ? img : part.kv;
  const int tp = std::max(1, part.tp), heads = d.heads / std::max(1, part.heads_div), calls = std::max(1, part.attention_calls);
  const double ht = h / tp, ft = f / tp;  // GEMM widths split by tensor parallelism
  const double L = part.double_blocks < 0 ? d.layers : part.double_blocks,
               S = part.single_blocks < 0 ? d.single_layers : part.single_blocks;
  const bool flux = d.single_layers > 0;
  Step st;
  // LayerNorm then modulate over `rows`: lean 1 + 3 kernels; fused one.
  auto norm_modulate = [&](const std::string& tag, double rows, double times) {
    if (fused) {
      st.add(cm.elementwise("elementwise.layernorm_modulate" + tag, "", rows, 2 * h * b, 1), times);
      return;
    }
    st.add(cm.elementwise("elementwise.layernorm" + tag, "rmsnorm", rows, 2 * h * b, 1), times);
    st.add(cm.elementwise("elementwise.modulate" + tag, "residual_add", rows, 4 * h * b, 2), times);
    st.add(cm.elementwise("elementwise.modulate" + tag, "", B, 2 * h * b, 1), times);  // 1 + scale
  };
  // x + gate * y: lean 2 kernels, fused 1.
  auto gate_residual = [&](const std::string& tag, double rows, double times) {
    st.add(cm.elementwise("elementwise.gate_residual" + tag, fused ? "" : "residual_add", rows, (fused ? 3 : 5) * h * b,
                          fused ? 1 : 2),
           times);
  };
  auto gelu = [&](double rows, double width, double times) {
    st.add(cm.elementwise("elementwise.gelu", "", rows, 2 * width * b, 1), times);
  };
  auto rope_qk = [&](double rows, double times) {
    if (fused) st.add(cm.elementwise("elementwise.rope", "", rows, 4 * ht * b, 1), times);
    else st.add(cm.elementwise("elementwise.rope", "rope", rows, 4 * ht * b, 14), times);
  };
  auto qk_norm = [&](double rows, double times) {
    st.add(cm.elementwise("elementwise.qk_rmsnorm", "rmsnorm", rows, 4 * ht * b, 2), times);
  };
  auto modulation = [&](double width, double times) {
    if (!fused) st.add(cm.elementwise("elementwise.silu", "", B, 2 * h * b, 1), times);
    st.add(cm.gemm("gemm.adaln", B, h, width), times);
  };

  // Embedders: patches in (first stage only), timestep (and class or pooled text) conditioning
  // (every device: the blocks' modulation needs it).
  const double patch_in = static_cast<double>(d.latent_channels) * d.patch * d.patch;
  if (part.embed) {
    st.add(cm.gemm("gemm.patch_embed", P, patch_in, h));
    if (!flux) st.add(cm.elementwise("elementwise.pos_embed", "residual_add", P, 3 * h * b, 1));
  }
  st.add(cm.elementwise("embed.timestep", "", B, 256 * 4, 6));  // sinusoid: arange, exp, mul, cos, sin, cat
  st.add(cm.gemm("gemm.timestep_mlp", B, 256, h));
  st.add(cm.gemm("gemm.timestep_mlp", B, h, h));
  if (d.text_tokens > 0) {
    st.add(cm.gemm("gemm.text_embed", T, d.text_width, h));
    if (!flux) st.add(cm.gemm("gemm.text_embed", T, h, h));
  }
  if (d.adaln_single) st.add(cm.gemm("gemm.adaln", B, h, 6 * h));

  // Blocks: attention over `rows` tokens of a stream.
  auto attention_block = [&](double q_rows, const std::string& tag, double times) {
    st.add(cm.gemm("gemm.qkv" + tag, q_rows, h, 3 * ht), times);
    if (d.qk_norm) qk_norm(q_rows, times);
  };
  // One device's attention: `calls` calls (Ring: one per key block) of q queries over kv keys per image.
  auto attend = [&](const std::string& name, double q, double kv, double times) {
    st.add(cm.attention(name, q, kv, heads * batch, d.head_dim, false), times * calls);
    // Ring attention merges each further key block's partial output into the running one by
    // its log-sum-exp (yunchang's update_out_and_lse, the ring attention xDiT runs). The
    // reference code is separate PyTorch kernels, each a full pass over the output, which is
    // fp32: block_out.to(fp32) (2 B read, 4 written an element), out - block_out (8, 4),
    // sigmoid(block_lse - lse) * that (4, 4), out - that (8, 4): 38 B an element; and four
    // kernels over the per-head log-sum-exps (sub, sigmoid, logsigmoid, sub), small. Around
    // the loop: the first block cast to fp32 and the result cast back to bf16 (6 B an element
    // each). A fused engine merges in one pass: out read and written, the block read (10 B).
    if (calls > 1) {
      const double elems = heads * d.head_dim;  // output elements per query row
      if (fused) {
        st.add(cm.elementwise("attention.ring_merge", "", q * B, 10 * elems, 1), times * (calls - 1));
      } else {
        st.add(cm.elementwise("attention.ring_merge", "", q * B, 38 * elems + 4 * 3 * 4 * heads, 8), times * (calls - 1));
        st.add(cm.elementwise("attention.ring_merge", "", q * B, 12 * elems, 2), times);
      }
    }
  };
  // Text tokens per image among a joint attention call's queries and keys.
  const double Tq = part.text_q < 0 ? T / B : part.text_q, Tk = part.text_kv < 0 ? T / B / calls : part.text_kv;
  if (!flux) {
    if (d.adaln_single) st.add(cm.elementwise("elementwise.modulate", "", B, 12 * h * b, 1), L);
    else modulation(6 * h, L);
    norm_modulate("", P, L);
    attention_block(P, "", L);
    attend("attention.self", q_img, kv_img, L);
    if (!fused) st.add(cm.elementwise("attention.layout_copy", "", P, 2 * ht * b, 1), L);
    st.add(cm.gemm("gemm.o", P, ht, h), L);
    gate_residual("", P, L);
    if (d.cross_attention) {
      st.add(cm.gemm("gemm.cross_q", P, h, ht), L);
      st.add(cm.gemm("gemm.cross_kv", T, h, 2 * ht), L);
      st.add(cm.attention("attention.cross", P / B, T / B, heads * batch, d.head_dim, false), L);
      if (!fused) st.add(cm.elementwise("attention.layout_copy", "", P, 2 * ht * b, 1), L);
      st.add(cm.gemm("gemm.cross_o", P, ht, h), L);
      st.add(cm.elementwise("elementwise.residual_add", fused ? "" : "residual_add", P, 3 * h * b, 1), L);
    }
    norm_modulate("", P, L);
    st.add(cm.gemm("gemm.fc1", P, h, ft), L);
    gelu(P, ft, L);
    st.add(cm.gemm("gemm.fc2", P, ft, h), L);
    gate_residual("", P, L);
  } else {
    // Double-stream blocks: image (P rows) and text (T rows) streams, joint attention.
    for (const auto& [rows, tag] : {std::pair<double, std::string>{P, ".img"}, {T, ".txt"}}) {
      modulation(6 * h, L);  // per stream: its own
      norm_modulate(tag, rows, L);
      attention_block(rows, tag, L);
    }
    if (!fused) st.add(cm.elementwise("attention.concat", "", P + T, 6 * ht * b, 3), L);
    rope_qk(P + T, L);
    attend("attention.joint", q_img + Tq, kv_img + Tk, L);
    if (!fused) st.add(cm.elementwise("attention.layout_copy", "", P + T, 2 * ht * b, 1), L);
    for (const auto& [rows, tag] : {std::pair<double, std::string>{P, ".img"}, {T, ".txt"}}) {
      st.add(cm.gemm("gemm.o" + tag, rows, ht, h), L);
      gate_residual(tag, rows, L);
      norm_modulate(tag, rows, L);
      st.add(cm.gemm("gemm.fc1" + tag, rows, h, ft), L);
      gelu(rows, ft, L);
      st.add(cm.gemm("gemm.fc2" + tag, rows, ft, h), L);
      gate_residual(tag, rows, L);
    }
    // Single-stream blocks over P + T rows.
    const double R = P + T;
    modulation(3 * h, S);
    norm_modulate(".single", R, S);
    st.add(cm.gemm("gemm.linear1", R, h, (3 * h + f) / tp), S);
    qk_norm(R, S);
    rope_qk(R, S);
    attend("attention.single", q_img + Tq, kv_img + Tk, S);
    if (!fused) st.add(cm.elementwise("attention.layout_copy", "", R, 2 * ht * b, 1), S);
    gelu(R, ft, S);
    if (!fused) st.add(cm.elementwise("elementwise.concat", "", R, 2 * (h + f) / tp * b, 1), S);
    st.add(cm.gemm("gemm.linear2", R, (h + f) / tp, h), S);
    gate_residual(".single", R, S);
  }
  // Final layer: adaLN (2h), LayerNorm + modulate, linear to patch pixels, unpatchify.
  if (part.final_layer) {
    modulation(2 * h, 1);
    norm_modulate(".final", P, 1);
    const double out = patch_in * (d.learn_sigma ? 2 : 1);
    st.add(cm.gemm("gemm.final", P, h, out));
    st.add(cm.elementwise("unpatchify", "", P, 2 * out * b, 1));
  }
  return st.it;
}

}  // namespace sluice
