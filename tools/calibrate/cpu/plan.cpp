#include "plan.h"

#include <cstdio>

namespace sluice::calib {

namespace {

std::string describe(const PrefillPoint& p) {
  char b[128];
  std::snprintf(b, sizeof b, "heads=%d kv_heads=%d head_dim=%d batch=%d seq=%d causal=%d", p.heads, p.kv_heads,
                p.head_dim, p.batch, p.seq, p.causal ? 1 : 0);
  return b;
}
std::string describe(const DecodePoint& p) {
  char b[128];
  std::snprintf(b, sizeof b, "heads=%d kv_heads=%d head_dim=%d batch=%d kv_len=%d", p.heads, p.kv_heads,
                p.head_dim, p.batch, p.kv_len);
  return b;
}
std::string describe(const SlicePoint& p) {
  char b[128];
  std::snprintf(b, sizeof b, "heads=%d head_dim=%d slice=%d prefix=%d", p.heads, p.head_dim, p.slice, p.prefix);
  return b;
}

std::string heads_problem(int heads, int kv_heads, int head_dim) {
  if (heads <= 0 || kv_heads <= 0) return "heads and kv_heads must be positive";
  if (heads % kv_heads != 0) return "kv_heads does not divide heads";
  if (!supported_head_dim(head_dim)) return "head_dim must be 64 or 128";
  return "";
}

std::string over_budget(std::uint64_t bytes, double budget) {
  if (double(bytes) <= budget) return "";
  char b[96];
  std::snprintf(b, sizeof b, "needs %.1f GB, over the %.1f GB memory budget", bytes / 1e9, budget / 1e9);
  return b;
}

template <class P>
void add_if_valid(std::vector<P>& out, std::vector<std::string>& skipped, const char* table, const P& p,
                  double budget) {
  const auto why = why_invalid(p, budget);
  if (why.empty())
    out.push_back(p);
  else
    skipped.push_back(std::string(table) + ": " + describe(p) + ": " + why);
}

}  // namespace

std::uint64_t prefill_bytes(const PrefillPoint& p) {
  const std::uint64_t tok = std::uint64_t(p.batch) * p.seq;
  return tok * (2ull * p.heads + 2ull * p.kv_heads) * p.head_dim * 2;  // q, out, k, v in bf16
}

std::uint64_t decode_bytes(const DecodePoint& p) {
  // The KV cache (pages rounded up to 16 tokens), q, out, and fp32 split partials (at most
  // 64 splits of head_dim + 1 floats per query head).
  const std::uint64_t pages = std::uint64_t(p.batch) * ((p.kv_len + 15) / 16);
  const std::uint64_t kv = pages * 16 * 2ull * p.kv_heads * p.head_dim * 2;
  const std::uint64_t qo = 2ull * p.batch * p.heads * p.head_dim * 2;
  const std::uint64_t part = std::uint64_t(p.batch) * p.heads * 64 * (p.head_dim + 1) * 4;
  return kv + qo + part;
}

std::uint64_t slice_bytes(const SlicePoint& p) {
  const std::uint64_t kv_len = std::uint64_t(p.slice) + p.prefix;
  return (2ull * p.slice + 2ull * kv_len) * p.heads * p.head_dim * 2;
}

double attention_flops(int batch, int heads, int head_dim, int q_len, int kv_len, bool causal) {
  double pairs = double(q_len) * kv_len;
  if (causal) {
    // Query i sees kv_len - q_len + i + 1 keys.
    const double first = double(kv_len) - q_len + 1;
    pairs = q_len * first + double(q_len) * (q_len - 1) / 2;
  }
  return 4.0 * batch * heads * head_dim * pairs;
}

double decode_min_bytes(const DecodePoint& p) {
  return 2.0 * p.batch * p.kv_len * p.kv_heads * p.head_dim * 2 + 2.0 * p.batch * p.heads * p.head_dim * 2;
}

std::uint64_t elementwise_min_bytes(const ElementwisePoint& p) {
  const std::uint64_t t = p.tokens;
  if (p.op == "rmsnorm") return t * p.hidden * 2 * 2;               // read x, write y
  if (p.op == "residual_add") return t * p.hidden * 3 * 2;          // read x, r; write y
  if (p.op == "silu_mul") return t * std::uint64_t(p.ffn) * 3 * 2;  // read g, u; write y
  if (p.op == "rope") return t * std::uint64_t(p.heads) * p.head_dim * 2 * 2;  // read q, write q
  return 0;
}

std::string why_invalid(const PrefillPoint& p, double budget) {
  if (auto w = heads_problem(p.heads, p.kv_heads, p.head_dim); !w.empty()) return w;
  if (p.batch <= 0 || p.seq <= 0) return "batch and seq must be positive";
  return over_budget(prefill_bytes(p), budget);
}

std::string why_invalid(const DecodePoint& p, double budget) {
  if (auto w = heads_problem(p.heads, p.kv_heads, p.head_dim); !w.empty()) return w;
  if (p.batch <= 0 || p.kv_len <= 0) return "batch and kv_len must be positive";
  return over_budget(decode_bytes(p), budget);
}

std::string why_invalid(const SlicePoint& p, double budget) {
  if (auto w = heads_problem(p.heads, p.heads, p.head_dim); !w.empty()) return w;
  if (p.slice <= 0 || p.prefix < 0) return "slice must be positive and prefix not negative";
  return over_budget(slice_bytes(p), budget);
}

std::vector<LinearShape> catalog_linear_shapes() {
  std::vector<LinearShape> s = {
      // Llama-2-7B: hidden 4096, 32 heads (MHA), FFN 11008.
      {"llama7b.qkv", 4096, 12288},
      {"llama7b.o", 4096, 4096},
      {"llama7b.gate_up", 4096, 22016},
      {"llama7b.down", 11008, 4096},
      // Llama-3-8B: hidden 4096, 32 heads, 8 KV heads, FFN 14336, vocab 128256.
      {"llama8b.qkv", 4096, 6144},
      {"llama8b.o", 4096, 4096},
      {"llama8b.gate_up", 4096, 28672},
      {"llama8b.down", 14336, 4096},
      {"lm_head32k", 4096, 32000},
      {"lm_head128k", 4096, 128256},
      // DiT-XL/2: hidden 1152, MLP 4608.
      {"dit_xl.qkv", 1152, 3456},
      {"dit_xl.mlp1", 1152, 4608},
      {"dit_xl.mlp2", 4608, 1152},
  };
  // Llama-2-70B: hidden 8192, 64 heads, 8 KV heads of 128, FFN 28672; tensor parallel
  // splits qkv and gate_up by output and o and down by input (Megatron).
  for (int tp : {1, 2, 4, 8}) {
    const std::string pre = "llama70b.tp" + std::to_string(tp) + ".";
    s.push_back({pre + "qkv", 8192, (64 + 2 * 8) * 128 / tp});
    s.push_back({pre + "o", 8192 / tp, 8192});
    s.push_back({pre + "gate_up", 8192, 2 * 28672 / tp});
    s.push_back({pre + "down", 28672 / tp, 8192});
  }
  return s;
}

Plan make_plan(const PlanOptions& opt) {
  Plan plan;
  const double budget = opt.memory_budget_bytes;
  const std::vector<int> seqs = opt.quick ? std::vector<int>{550, 4096} : std::vector<int>{128, 512, 550, 2048, 4096, 8192, 16384};
  const std::vector<int> kv_heads = opt.quick ? std::vector<int>{8} : std::vector<int>{32, 8, 1};
  const std::vector<int> head_dims = opt.quick ? std::vector<int>{128} : std::vector<int>{128, 64};
  for (int d : head_dims)
    for (int kvh : kv_heads)
      for (bool causal : {true, false})
        for (int s : seqs) add_if_valid(plan.prefill, plan.skipped, "attention_prefill", PrefillPoint{32, kvh, d, 1, s, causal}, budget);

  const std::vector<int> dkv = opt.quick ? std::vector<int>{8} : std::vector<int>{32, 8, 2, 1};
  const std::vector<int> dbatch = opt.quick ? std::vector<int>{1, 64} : std::vector<int>{1, 2, 8, 32, 64, 128};
  const std::vector<int> dlen = opt.quick ? std::vector<int>{1024, 16384} : std::vector<int>{256, 1024, 4096, 16384, 32768};
  for (int d : head_dims)
    for (int kvh : dkv)
      for (int b : dbatch)
        for (int l : dlen) {
          // head_dim 64 gets a lighter grid: its points are for models with small heads.
          if (d == 64 && (kvh == 2 || b == 2 || b == 128)) continue;
          add_if_valid(plan.decode, plan.skipped, "attention_decode", DecodePoint{32, kvh, d, b, l}, budget);
        }

  const std::vector<int> slices = opt.quick ? std::vector<int>{128, 1024} : std::vector<int>{64, 128, 256, 512, 1024, 2048};
  const std::vector<int> prefixes = opt.quick ? std::vector<int>{0, 4096} : std::vector<int>{0, 512, 1024, 2048, 4096, 8192};
  for (int l : slices)
    for (int c : prefixes) add_if_valid(plan.slice, plan.skipped, "attention_slice", SlicePoint{32, 128, l, c}, budget);

  const std::vector<int> tokens = opt.quick ? std::vector<int>{1, 2048} : std::vector<int>{1, 8, 64, 512, 2048, 8192};
  for (int t : tokens)
    for (const char* op : {"rmsnorm", "residual_add", "silu_mul", "rope"})
      plan.elementwise.push_back({op, t, 4096, 11008, 32, 128});

  const std::vector<int> ms = opt.quick ? std::vector<int>{1, 2048} : std::vector<int>{1, 8, 32, 128, 512, 2048, 8192};
  for (const auto& l : catalog_linear_shapes()) {
    if (opt.quick && l.op != "llama7b.qkv" && l.op != "llama70b.tp4.down") continue;
    for (int m : ms) plan.gemm.push_back({l.op, m, l.k, l.n});
  }

  for (int b : opt.quick ? std::vector<int>{1, 64} : std::vector<int>{1, 8, 64, 256})
    for (const char* mode : {"pageable", "pinned", "item"}) plan.d2h.push_back({b, mode});
  return plan;
}

}  // namespace sluice::calib
