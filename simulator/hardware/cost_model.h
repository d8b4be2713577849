// The cost model: the only place that knows kernel timings. It turns one forward pass
// (iteration) of a batch into a duration, from measured tables first (interpolated) and a
// roofline over the device's ceilings where no table covers the point.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hardware/spec.h"

namespace sluice {

// The work of one sequence in an iteration: `new_tokens` computed after `context` cached ones.
// Decode: new_tokens = 1, context = tokens already in the KV cache. Prefill chunk: new_tokens
// = chunk length, context = prefix already cached (0 for a fresh prompt).
struct SeqWork {
  int new_tokens = 1;
  int context = 0;
};

// One operation's share of an iteration.
struct OpCost {
  std::string op;      // gemm.qkv, gemm.o, gemm.gate_up, gemm.down, attention.prefill, attention.decode,
                       // elementwise.rmsnorm, ..., lm_head, sampling, allreduce
  double ns = 0;
  std::string source;  // "table:<file>" or "roofline" or "analytic"
  double flops = 0;
  double bytes = 0;
};

struct IterationCost {
  double total_ns = 0;
  std::vector<OpCost> ops;
};

struct CostOptions {
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  std::string tables_dir;  // results/calibration/<device>; "" = roofline only
};

class CostModel {
 public:
  CostModel(HardwareSpec hw, ModelSpec model, CostOptions opt);
  ~CostModel();
  CostModel(CostModel&&) noexcept;
  // Full breakdown of one iteration of one pipeline stage's share of layers (plus the LM head
  // on the last stage), summed over operations, for `sluice cost` and tests.
  IterationCost iteration(std::span<const SeqWork> batch) const;
  // The same total, without building strings: the serving simulator's hot path.
  double iteration_ns(std::span<const SeqWork> batch) const;
  const HardwareSpec& hardware() const;
  const ModelSpec& model() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
