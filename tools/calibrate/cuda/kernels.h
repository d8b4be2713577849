// Host entry points of the harness's CUDA kernels. Plain C++ (bf16 buffers are passed as
// raw 16-bit words), so the host code compiles with the C++ compiler.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

namespace sluice::calib::gpu {

using bf16_t = std::uint16_t;  // bit layout of __nv_bfloat16

// Attention over contiguous tensors, q/out [batch][q_len][heads][head_dim], k/v
// [batch][kv_len][kv_heads][head_dim]; bottom-right causal mask when `causal` (q_len new
// tokens after kv_len - q_len cached ones). head_dim 64 or 128; kv_heads divides heads.
struct PrefillArgs {
  const bf16_t* q;
  const bf16_t* k;
  const bf16_t* v;
  bf16_t* out;
  int batch, heads, kv_heads, head_dim, q_len, kv_len;
  bool causal;
};
cudaError_t attention_prefill(const PrefillArgs& a, cudaStream_t stream);

// Decode attention (flash-decoding): one query per sequence, q/out [batch][heads][head_dim],
// over a paged cache k/v [pages][page_size][kv_heads][head_dim] with
// block_table[batch][max_pages] and per-sequence lengths seq_lens[batch] (each >= 1). The KV
// range is split num_splits ways; partial_o / partial_lse hold each split's result
// (decode_partial_floats floats) and a second kernel reduces them.
struct DecodeArgs {
  const bf16_t* q;
  const bf16_t* k_cache;
  const bf16_t* v_cache;
  const std::int32_t* block_table;
  const std::int32_t* seq_lens;
  bf16_t* out;
  float* partial;  // decode_partial_floats(...) floats
  int batch, heads, kv_heads, head_dim, page_size, max_pages, max_seq_len, num_splits;
};
// A split count that fills the device: about two blocks per SM, at least 4 tiles of 32 keys
// per split, at most 64 splits.
int decode_num_splits(int batch, int heads, int kv_heads, int max_seq_len, int sm_count);
std::size_t decode_partial_floats(int batch, int heads, int head_dim, int num_splits);
cudaError_t attention_decode(const DecodeArgs& a, cudaStream_t stream);

// y = x / sqrt(mean(x^2) + eps) * w, rows of `hidden` (a multiple of 8).
cudaError_t rmsnorm(const bf16_t* x, const bf16_t* w, bf16_t* y, int tokens, int hidden, float eps,
                    cudaStream_t stream);
// y = x + r over n elements (n a multiple of 8).
cudaError_t residual_add(const bf16_t* x, const bf16_t* r, bf16_t* y, std::size_t n, cudaStream_t stream);
// y[t][i] = silu(gu[t][i]) * gu[t][ffn + i] (ffn a multiple of 8).
cudaError_t silu_mul(const bf16_t* gu, bf16_t* y, int tokens, int ffn, cudaStream_t stream);
// Rotary embedding (rotate-half) of x [tokens][heads][head_dim] into y (may equal x), at
// positions pos[tokens], from a cos/sin table cos_sin[max_pos][head_dim/2][2] (float).
cudaError_t rope(const bf16_t* x, bf16_t* y, const std::int32_t* pos, const float* cos_sin, int tokens, int heads,
                 int head_dim, cudaStream_t stream);

// n random bf16 values in [-scale, -scale/64] U [scale/64, scale] (never zero), from a hash of
// (seed, index): inputs for timing without a host round trip.
cudaError_t fill_random_bf16(bf16_t* p, std::size_t n, std::uint64_t seed, float scale, cudaStream_t stream);

// GEMMs through cuBLASLt: y[M][N] = x[M][K] * W[N][K]^T in bf16 with fp32 accumulation.
class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  // Picks the algorithm for a shape (cached); call before graph capture. Throws on failure.
  void prepare(int m, int k, int n);
  // Enqueues one GEMM of a prepared shape.
  cudaError_t run(const bf16_t* x, const bf16_t* w, bf16_t* y, int m, int k, int n, cudaStream_t stream);
  static std::string version();

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace sluice::calib::gpu
