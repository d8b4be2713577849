// The memory-bound per-token layer work: RMSNorm, residual add, SiLU·mul, rotary embedding,
// each with 16-byte loads and stores (8 bf16 per access) and fp32 arithmetic.
#include "common.cuh"
#include "kernels.h"

namespace sluice::calib::gpu {

namespace {

union Pack8 {
  uint4 u;
  __nv_bfloat162 h[4];
};

__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  Pack8 p;
  p.u = u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(p.h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  Pack8 p;
#pragma unroll
  for (int i = 0; i < 4; ++i) p.h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return p.u;
}

constexpr int kNormThreads = 256;

// One block per row: sum of squares (the row stays in L1 for the second pass), then scale.
__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(const bf16* x, const bf16* w, bf16* y, int hidden,
                                                               float eps) {
  const long long row = blockIdx.x;
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * hidden);
  const uint4* wr = reinterpret_cast<const uint4*>(w);
  uint4* yr = reinterpret_cast<uint4*>(y + row * hidden);
  const int chunks = hidden / 8;
  float ss = 0.f;
  for (int c = threadIdx.x; c < chunks; c += kNormThreads) {
    float f[8];
    unpack8(xr[c], f);
#pragma unroll
    for (int i = 0; i < 8; ++i) ss += f[i] * f[i];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  __shared__ float warp_sums[kNormThreads / 32];
  __shared__ float inv_rms;
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int i = 0; i < kNormThreads / 32; ++i) t += warp_sums[i];
    inv_rms = rsqrtf(t / hidden + eps);
  }
  __syncthreads();
  const float inv = inv_rms;
  for (int c = threadIdx.x; c < chunks; c += kNormThreads) {
    float f[8], g[8];
    unpack8(xr[c], f);
    unpack8(wr[c], g);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = f[i] * inv * g[i];
    yr[c] = pack8(f);
  }
}

__global__ void residual_add_kernel(const uint4* x, const uint4* r, uint4* y, long long chunks) {
  for (long long c = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; c < chunks;
       c += static_cast<long long>(gridDim.x) * blockDim.x) {
    float a[8], b[8];
    unpack8(x[c], a);
    unpack8(r[c], b);
#pragma unroll
    for (int i = 0; i < 8; ++i) a[i] += b[i];
    y[c] = pack8(a);
  }
}

__global__ void silu_mul_kernel(const bf16* gu, bf16* y, int ffn, long long chunks) {
  const int per_row = ffn / 8;
  for (long long c = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; c < chunks;
       c += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = c / per_row;
    const int col = static_cast<int>(c % per_row) * 8;
    float g[8], u[8];
    unpack8(*reinterpret_cast<const uint4*>(gu + row * 2 * ffn + col), g);
    unpack8(*reinterpret_cast<const uint4*>(gu + row * 2 * ffn + ffn + col), u);
#pragma unroll
    for (int i = 0; i < 8; ++i) g[i] = g[i] / (1.f + __expf(-g[i])) * u[i];
    *reinterpret_cast<uint4*>(y + row * ffn + col) = pack8(g);
  }
}

// One thread per 8 consecutive pairs (i, i + D/2) of one head of one token.
__global__ void rope_kernel(const bf16* x, bf16* y, const std::int32_t* pos, const float2* cos_sin, int heads,
                            int head_dim, long long work) {
  const int half = head_dim / 2, per_head = half / 8;
  for (long long w = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; w < work;
       w += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long th = w / per_head;  // token * heads + head
    const int i0 = static_cast<int>(w % per_head) * 8;
    const long long t = th / heads;
    const bf16* xr = x + th * head_dim;
    bf16* yr = y + th * head_dim;
    float a[8], b[8];
    unpack8(*reinterpret_cast<const uint4*>(xr + i0), a);
    unpack8(*reinterpret_cast<const uint4*>(xr + half + i0), b);
    const float2* cs = cos_sin + static_cast<long long>(pos[t]) * half + i0;
    float ra[8], rb[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float2 c = cs[i];
      ra[i] = a[i] * c.x - b[i] * c.y;
      rb[i] = b[i] * c.x + a[i] * c.y;
    }
    *reinterpret_cast<uint4*>(yr + i0) = pack8(ra);
    *reinterpret_cast<uint4*>(yr + half + i0) = pack8(rb);
  }
}

__device__ __forceinline__ unsigned long long splitmix64(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void fill_random_kernel(bf16* p, long long n, unsigned long long seed, float scale) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const unsigned long long r = splitmix64(seed ^ (static_cast<unsigned long long>(i) * 0x2545f4914f6cdd1dull));
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    const float mag = scale / 64 + u * (scale - scale / 64);
    p[i] = __float2bfloat16((r & 1) ? -mag : mag);
  }
}

int grid_for(long long work, int threads) {
  const long long blocks = (work + threads - 1) / threads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > 132 * 64 ? 132 * 64 : blocks));
}

}  // namespace

cudaError_t rmsnorm(const bf16_t* x, const bf16_t* w, bf16_t* y, int tokens, int hidden, float eps,
                    cudaStream_t stream) {
  if (tokens <= 0 || hidden <= 0 || hidden % 8) return cudaErrorInvalidValue;
  rmsnorm_kernel<<<tokens, kNormThreads, 0, stream>>>(reinterpret_cast<const bf16*>(x), reinterpret_cast<const bf16*>(w),
                                                      reinterpret_cast<bf16*>(y), hidden, eps);
  return cudaGetLastError();
}

cudaError_t residual_add(const bf16_t* x, const bf16_t* r, bf16_t* y, std::size_t n, cudaStream_t stream) {
  if (n == 0 || n % 8) return cudaErrorInvalidValue;
  const long long chunks = static_cast<long long>(n / 8);
  residual_add_kernel<<<grid_for(chunks, 256), 256, 0, stream>>>(
      reinterpret_cast<const uint4*>(x), reinterpret_cast<const uint4*>(r), reinterpret_cast<uint4*>(y), chunks);
  return cudaGetLastError();
}

cudaError_t silu_mul(const bf16_t* gu, bf16_t* y, int tokens, int ffn, cudaStream_t stream) {
  if (tokens <= 0 || ffn <= 0 || ffn % 8) return cudaErrorInvalidValue;
  const long long chunks = static_cast<long long>(tokens) * (ffn / 8);
  silu_mul_kernel<<<grid_for(chunks, 256), 256, 0, stream>>>(reinterpret_cast<const bf16*>(gu),
                                                             reinterpret_cast<bf16*>(y), ffn, chunks);
  return cudaGetLastError();
}

cudaError_t rope(const bf16_t* x, bf16_t* y, const std::int32_t* pos, const float* cos_sin, int tokens, int heads,
                 int head_dim, cudaStream_t stream) {
  if (tokens <= 0 || heads <= 0 || head_dim <= 0 || head_dim % 16) return cudaErrorInvalidValue;
  const long long work = static_cast<long long>(tokens) * heads * (head_dim / 16);
  rope_kernel<<<grid_for(work, 256), 256, 0, stream>>>(reinterpret_cast<const bf16*>(x), reinterpret_cast<bf16*>(y),
                                                       pos, reinterpret_cast<const float2*>(cos_sin), heads, head_dim,
                                                       work);
  return cudaGetLastError();
}

cudaError_t fill_random_bf16(bf16_t* p, std::size_t n, std::uint64_t seed, float scale, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  fill_random_kernel<<<grid_for(static_cast<long long>(n), 256), 256, 0, stream>>>(
      reinterpret_cast<bf16*>(p), static_cast<long long>(n), seed, scale);
  return cudaGetLastError();
}

}  // namespace sluice::calib::gpu
