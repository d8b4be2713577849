// The host side of the harness: CUDA error checks, timing by CUDA-graph replay, the
// correctness checks against the float64 references, and one sweep per table.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels.h"
#include "plan.h"
#include "tables.h"

namespace sluice::calib::gpu {

// Throws std::runtime_error naming the call and the CUDA error.
void check_cuda(cudaError_t e, const char* what, const char* file, int line);
#define CAL_CUDA(expr) ::sluice::calib::gpu::check_cuda((expr), #expr, __FILE__, __LINE__)

struct TimingOptions {
  double graph_target_ms = 2.0;  // back-to-back calls per graph: about this long
  int repeats = 10;              // timed replays; the median is taken
  int warmup = 2;                // untimed replays first
};

// Milliseconds per call of `launch` (which enqueues one call on the stream): one untimed
// call, an estimate, then a CUDA graph of enough calls to run ~graph_target_ms, replayed
// warmup + repeats times; the median replay divided by the calls in it.
double time_per_call_ms(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream,
                        const TimingOptions& opt);

struct CheckResult {
  std::string kernel, shape;
  double rel_error = 0;
  bool pass = false;
};
// Each check runs the kernel on random bf16 inputs (never zero) with its output poisoned
// (NaN) first, and compares with the float64 reference: ||out - ref|| / ||ref|| <= 1e-2, no NaN.
constexpr double kTolerance = 1e-2;
std::vector<CheckResult> check_prefill(cudaStream_t s);
std::vector<CheckResult> check_decode(int sm_count, cudaStream_t s);
std::vector<CheckResult> check_elementwise(cudaStream_t s);
std::vector<CheckResult> check_gemm(Gemm& gemm, cudaStream_t s);
std::vector<CheckResult> check_d2h(cudaStream_t s);

// Figures for the summary (meta.json and the closing lines of the run).
using Summary = std::map<std::string, double>;

CsvTable sweep_prefill(const std::vector<PrefillPoint>& pts, const TimingOptions& t, cudaStream_t s, Summary& sum);
CsvTable sweep_slice(const std::vector<SlicePoint>& pts, const TimingOptions& t, cudaStream_t s, Summary& sum);
CsvTable sweep_decode(const std::vector<DecodePoint>& pts, int sm_count, const TimingOptions& t, cudaStream_t s,
                      Summary& sum);
CsvTable sweep_elementwise(const std::vector<ElementwisePoint>& pts, const TimingOptions& t, cudaStream_t s,
                           Summary& sum);
CsvTable sweep_gemm(const std::vector<GemmPoint>& pts, Gemm& gemm, const TimingOptions& t, cudaStream_t s,
                    Summary& sum);
CsvTable sweep_d2h(const std::vector<D2hPoint>& pts, cudaStream_t s);
// Device-to-device copy (bytes read + written per second) and an 8192^3 bf16 GEMM.
CsvTable measure_ceilings(Gemm& gemm, const TimingOptions& t, cudaStream_t s, Summary& sum);

}  // namespace sluice::calib::gpu
