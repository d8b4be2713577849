// The sweep planner: which points each table measures. The default points are those of the
// PyTorch reference tables (results/calibration/h200-torch, copied from the team's measurements) so the two compare row by row,
// plus head_dim 64 and the Llama-3-8B / Llama-2-70B (tensor-parallel) linear layers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::calib {

struct PrefillPoint {
  int heads, kv_heads, head_dim, batch, seq;
  bool causal;
};
struct DecodePoint {
  int heads, kv_heads, head_dim, batch, kv_len;
};
// A slice of `slice` new tokens after `prefix` cached ones; kv_heads = heads (the table has
// no kv_heads column).
struct SlicePoint {
  int heads, head_dim, slice, prefix;
};
struct ElementwisePoint {
  std::string op;  // rmsnorm, residual_add, silu_mul, rope
  int tokens, hidden, ffn, heads, head_dim;
};
struct GemmPoint {
  std::string op;  // <model>.<layer>, e.g. llama70b.tp4.qkv
  int m, k, n;
};
struct D2hPoint {
  int batch;
  std::string mode;  // pageable, pinned, item
};

// A linear layer of the model catalog: y[M, n] = x[M, k] W[n, k]^T.
struct LinearShape {
  std::string op;
  int k, n;
};

struct PlanOptions {
  bool quick = false;                 // a few points per table: a smoke run in seconds
  double memory_budget_bytes = 60e9;  // the largest working set a point may allocate
};

struct Plan {
  std::vector<PrefillPoint> prefill;
  std::vector<DecodePoint> decode;
  std::vector<SlicePoint> slice;
  std::vector<ElementwisePoint> elementwise;
  std::vector<GemmPoint> gemm;
  std::vector<D2hPoint> d2h;
  std::vector<std::string> skipped;  // "table: point: why" for each point left out
};

// Head dims the attention kernels are built for.
inline bool supported_head_dim(int d) { return d == 64 || d == 128; }

// Bytes a point allocates on the device (inputs + outputs + scratch), for the memory budget.
std::uint64_t prefill_bytes(const PrefillPoint& p);
std::uint64_t decode_bytes(const DecodePoint& p);
std::uint64_t slice_bytes(const SlicePoint& p);
// FLOPs of attention (2 GEMMs, 4 flops per q-k pair per head dim), counting only the
// visible (unmasked) pairs; the number used for TFLOP/s.
double attention_flops(int batch, int heads, int head_dim, int q_len, int kv_len, bool causal);
// Least bytes a decode step must read: the KV cache of every sequence, plus q and out.
double decode_min_bytes(const DecodePoint& p);
// Least bytes an elementwise op must move (read + write), as the reference's min_bytes.
std::uint64_t elementwise_min_bytes(const ElementwisePoint& p);

// Empty if the point can run; otherwise why not.
std::string why_invalid(const PrefillPoint& p, double budget);
std::string why_invalid(const DecodePoint& p, double budget);
std::string why_invalid(const SlicePoint& p, double budget);

// The linear layers of the catalog models (Llama-2-7B, Llama-3-8B, Llama-2-70B at tp 1..8,
// DiT-XL, LM heads of 32k and 128k vocab).
std::vector<LinearShape> catalog_linear_shapes();

Plan make_plan(const PlanOptions& opt);

}  // namespace sluice::calib
