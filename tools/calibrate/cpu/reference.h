// CPU references in float64 for every kernel the calibration harness measures. The GPU
// checks compare each kernel's bf16 output with these on random inputs; the unit tests
// check the references themselves against naive formulations and known properties.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace sluice::calib {

// Shapes of one attention call. Layouts (row-major):
//   q, out: [batch][q_len][heads][head_dim]      k, v: [batch][kv_len][kv_heads][head_dim]
// Query i sits at position kv_len - q_len + i; with `causal` it sees keys 0..that position
// (the bottom-right mask: prefill when q_len == kv_len, a slice after a cached prefix when
// q_len < kv_len). Query head h reads kv head h / (heads / kv_heads) (MHA, GQA, MQA).
struct AttentionDims {
  int batch = 1, heads = 1, kv_heads = 1, head_dim = 128, q_len = 1, kv_len = 1;
  bool causal = true;
};

// Softmax attention with scale 1/sqrt(head_dim), per query row: scores, max, exp, sum.
// Throws std::invalid_argument for bad dims (kv_heads not dividing heads, q_len > kv_len...).
std::vector<double> attention_ref(const AttentionDims& d, std::span<const float> q, std::span<const float> k,
                                  std::span<const float> v);

// A paged KV cache: `pages` blocks of `page_size` tokens, each token [kv_heads][head_dim];
// block_table[b * max_pages + i] is the page holding tokens i*page_size.. of sequence b.
struct PagedKv {
  int page_size = 16, kv_heads = 1, head_dim = 128, max_pages = 0;
  std::vector<std::int32_t> block_table;  // [batch][max_pages]
  std::vector<float> k, v;                 // [pages][page_size][kv_heads][head_dim]
};

// The first `len` tokens of sequence b of a paged cache as contiguous [len][kv_heads][head_dim].
std::vector<float> paged_gather(const PagedKv& kv, std::span<const float> cache, int b, int len);

// Decode attention: one query per sequence, q [batch][heads][head_dim], over sequence b's
// first lens[b] cached tokens; out [batch][heads][head_dim].
std::vector<double> decode_ref(int heads, const PagedKv& kv, std::span<const int> lens, std::span<const float> q);

// y = x / sqrt(mean(x^2) + eps) * w over rows of `hidden`.
std::vector<double> rmsnorm_ref(std::span<const float> x, std::span<const float> w, int hidden, double eps);
// Rotary embedding (rotate-half, as Llama in Hugging Face / vLLM's neox style) of
// x [tokens][heads][head_dim] at positions pos[t]: angle = pos * base^(-2i/head_dim).
std::vector<double> rope_ref(std::span<const float> x, std::span<const int> pos, int heads, int head_dim,
                             double base);
// silu(g) * u over gu [tokens][2*ffn] (gate first, then up); out [tokens][ffn].
std::vector<double> silu_mul_ref(std::span<const float> gu, int ffn);
// x + r elementwise.
std::vector<double> residual_add_ref(std::span<const float> x, std::span<const float> r);
// y[M][N] = x[M][K] * W[N][K]^T (the linear layer with weight [out][in]).
std::vector<double> gemm_ref(std::span<const float> x, std::span<const float> w, int m, int k, int n);

// ||out - ref|| / ||ref|| (2-norms); +inf if out has a NaN or the sizes differ.
double relative_error(std::span<const float> out, std::span<const double> ref);
// True if any element is NaN or infinite.
bool has_non_finite(std::span<const float> v);

// n values drawn uniformly from [-scale, -scale/64] U [scale/64, scale], rounded to bf16:
// random, never zero, so a kernel that drops a term cannot pass by multiplying by zero.
std::vector<float> random_bf16_values(std::size_t n, std::mt19937_64& rng, float scale = 1.0f);

}  // namespace sluice::calib
