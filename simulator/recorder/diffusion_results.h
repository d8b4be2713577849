// What a diffusion workload hands the recorder: plain figures (its results) and a plain
// description of it (its setup), so that the report needs nothing from the workload's headers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::diffusion {

// One device's memory (bytes), by what holds it.
struct DiffusionMemory {
  double weights = 0, activations = 0, kv_buffers = 0;
  double total() const { return weights + activations + kv_buffers; }
};

struct DiffusionResults {
  std::vector<double> latency_s, queue_s;  // per image, in completion order
  double makespan_s = 0;
  double first_arrival_s = 0;
  int completed = 0;
  std::vector<double> device_busy_s;       // compute time per device
  double step_compute_ms = 0;              // one step's compute on one device of a group (batch 1 branch set)
  double single_step_ms = 0;               // dit_step on one device (the same batch)
  uint64_t flows = 0;
  double fabric_bytes = 0;                 // every byte this workload put on the fabric
  double comm_bytes_per_step_per_device = 0;  // of the strategy's transfers (mean over steps)
  double formula_bytes_per_step_per_device = 0;  // the formula at each step's batch, mean over steps
  double pipefusion_stage_io_bytes_per_step = 0;  // an interior stage's activations in + out per step
  long batch_steps = 0;
  double mean_batch = 0;
  DiffusionMemory memory;
};

// The workload as the report names it.
struct DiffusionSetup {
  std::string model, hardware, strategy, implementation, cost_source;
  double hbm_bytes = 0;
  int devices = 1;
  int cfg_degree = 1, tensor = 1, ulysses = 1, ring = 1, distrifusion = 1, pipefusion = 1, patches = 1, warmup_steps = 1;
  int resolution = 0;
  long patch_tokens = 0;
  int text_tokens = 0;
  int steps = 0;
  bool cfg = false;
  int requests = 0;
  double rate_per_s = 0;
  int max_batch = 1;
};

}  // namespace sluice::diffusion
