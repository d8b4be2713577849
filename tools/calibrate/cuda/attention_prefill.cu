// Launcher of the prefill attention kernel (prefill_kernel.cuh).
#include <cmath>

#include "kernels.h"
#include "prefill_kernel.cuh"

namespace sluice::calib::gpu {

namespace {

using namespace prefill;

template <int D>
cudaError_t launch_prefill(const PrefillArgs& a, cudaStream_t stream) {
  constexpr int smem = prefill_smem_bytes<D>();
  static bool configured = false;
  if (!configured) {
    const cudaError_t e = cudaFuncSetAttribute(prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  PrefillParams p{reinterpret_cast<const bf16*>(a.q), reinterpret_cast<const bf16*>(a.k),
                  reinterpret_cast<const bf16*>(a.v), reinterpret_cast<bf16*>(a.out), a.heads, a.kv_heads,
                  a.q_len, a.kv_len, a.causal, static_cast<float>(1.4426950408889634 / std::sqrt(double(D)))};
  const dim3 grid((a.q_len + kBM - 1) / kBM, a.heads, a.batch);
  prefill_kernel<D><<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t attention_prefill(const PrefillArgs& a, cudaStream_t stream) {
  if (a.batch <= 0 || a.heads <= 0 || a.kv_heads <= 0 || a.heads % a.kv_heads != 0 || a.q_len <= 0 ||
      a.kv_len < a.q_len || a.heads > 65535 || a.batch > 65535)
    return cudaErrorInvalidValue;
  switch (a.head_dim) {
    case 64: return launch_prefill<64>(a, stream);
    case 128: return launch_prefill<128>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace sluice::calib::gpu
