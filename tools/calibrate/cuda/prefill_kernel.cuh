// Prefill attention, FlashAttention-2 style: each block takes 64 queries of one head and
// streams the visible keys in tiles of 64 through shared memory (cp.async, two stages),
// with an online softmax in registers; both products (QK^T and PV) run on the tensor cores
// (mma.sync m16n8k16 bf16, fp32 accumulate). Four warps, 16 query rows each. Causal masks
// are bottom-right, so the same kernel computes a slice of new tokens after a cached prefix.
// The launcher is attention_prefill.cu; the CPU tests also run this header under an
// emulation of the warp instructions (tests/emulate.h).
#pragma once
#include "common.cuh"

namespace sluice::calib::gpu::prefill {

constexpr int kBM = 64;       // queries per block
constexpr int kBN = 64;       // keys per tile
constexpr int kThreads = 128;  // 4 warps x 16 query rows

struct PrefillParams {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  bf16* out;
  int heads, kv_heads, q_len, kv_len;
  bool causal;
  float scale_log2;  // log2(e) / sqrt(head_dim)
};

template <int D>
__host__ __device__ constexpr int smem_ld() {
  return D + 8;  // a 16-byte pad per row: ldmatrix rows land in distinct banks
}

template <int D>
constexpr int prefill_smem_bytes() {
  return (kBM + 4 * kBN) * smem_ld<D>() * 2;  // Q + two stages of K and V
}

// Copies rows [row0, row0 + 64) of a [rows][stride] bf16 matrix (D columns used) into a
// 64 x LD shared tile; rows at or past `limit` are zero-filled.
template <int D>
__device__ __forceinline__ void load_tile(bf16* s, const bf16* g, int row0, int limit, long long stride) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  for (int c = threadIdx.x; c < 64 * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool ok = row0 + r < limit;
    const bf16* src = g + (ok ? (row0 + r) * stride : 0) + col;
    cp_async16(s + r * smem_ld<D>() + col, src, ok);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads, 2) prefill_kernel(const PrefillParams p) {
  constexpr int LD = smem_ld<D>();
  CAL_DYNAMIC_SMEM(smem_raw);
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sK = sQ + kBM * LD;      // 2 stages
  bf16* sV = sK + 2 * kBN * LD;  // 2 stages

  const int num_m_blocks = (p.q_len + kBM - 1) / kBM;
  const int m_block = num_m_blocks - 1 - static_cast<int>(blockIdx.x);  // longest rows first
  const int h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (p.heads / p.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int offset = p.kv_len - p.q_len;  // query i sits at position i + offset
  const int m0 = m_block * kBM;
  const int n_end = p.causal ? min(p.kv_len, min(m0 + kBM, p.q_len) + offset) : p.kv_len;
  const int n_blocks = (n_end + kBN - 1) / kBN;

  const long long q_stride = static_cast<long long>(p.heads) * D;
  const long long kv_stride = static_cast<long long>(p.kv_heads) * D;
  const bf16* qg = p.q + (static_cast<long long>(b) * p.q_len * p.heads + h) * D;
  const bf16* kg = p.k + (static_cast<long long>(b) * p.kv_len * p.kv_heads + kvh) * D;
  const bf16* vg = p.v + (static_cast<long long>(b) * p.kv_len * p.kv_heads + kvh) * D;

  load_tile<D>(sQ, qg, m0, p.q_len, q_stride);
  load_tile<D>(sK, kg, 0, p.kv_len, kv_stride);
  load_tile<D>(sV, vg, 0, p.kv_len, kv_stride);
  cp_async_commit();

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // log2 domain, rows g and g + 8
  float row_sum[2] = {0.f, 0.f};              // this thread's share
  unsigned qf[D / 16][4];

  const int row0 = m0 + warp * 16 + lane / 4;  // this thread's first row (query index)
  for (int nb = 0; nb < n_blocks; ++nb) {
    cp_async_wait<0>();
    __syncthreads();
    if (nb == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        ldmatrix_x4(qf[kk], sQ + (warp * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
    }
    if (nb + 1 < n_blocks) {
      const int st = (nb + 1) & 1;
      load_tile<D>(sK + st * kBN * LD, kg, (nb + 1) * kBN, p.kv_len, kv_stride);
      load_tile<D>(sV + st * kBN * LD, vg, (nb + 1) * kBN, p.kv_len, kv_stride);
    }
    cp_async_commit();
    const bf16* cK = sK + (nb & 1) * kBN * LD;
    const bf16* cV = sV + (nb & 1) * kBN * LD;

    // S = Q K^T: 16 rows x 64 keys per warp, as 8 n-tiles of 8.
    float s[kBN / 8][4];
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < kBN / 16; ++np) {
        unsigned kf[4];
        ldmatrix_x4(kf, cK + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
        mma_16816(s[2 * np], qf[kk], kf[0], kf[1]);
        mma_16816(s[2 * np + 1], qf[kk], kf[2], kf[3]);
      }
    }

    const int n0 = nb * kBN;
    const bool mask = n0 + kBN > p.kv_len || (p.causal && n0 + kBN - 1 > m0 + warp * 16 + offset);
    if (mask) {
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = n0 + nt * 8 + (lane & 3) * 2 + (e & 1);
          const int row = row0 + (e >= 2 ? 8 : 0);
          const int last = p.causal ? row + offset : p.kv_len - 1;
          if (col > last || col >= p.kv_len) s[nt][e] = -INFINITY;
        }
    }

    // Online softmax, rows g (r = 0) and g + 8 (r = 1).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = quad_max(mx) * p.scale_log2;
      const float m_new = fmaxf(row_max[r], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = exp2f(row_max[r] - m_use);
      row_max[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < kBN / 8; ++nt) {
        s[nt][2 * r] = exp2f(s[nt][2 * r] * p.scale_log2 - m_use);
        s[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] * p.scale_log2 - m_use);
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      row_sum[r] = row_sum[r] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][2 * r] *= alpha;
        o[dt][2 * r + 1] *= alpha;
      }
    }

    // O += P V: P from the score registers (C layout of n-tiles 2kk, 2kk+1 = A layout of k-chunk kk).
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const unsigned a[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                             pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        unsigned vf[4];
        ldmatrix_x4_trans(vf, cV + (kk * 16 + (lane & 15)) * LD + dp * 16 + (lane >> 4) * 8);
        mma_16816(o[2 * dp], a, vf[0], vf[1]);
        mma_16816(o[2 * dp + 1], a, vf[2], vf[3]);
      }
    }
  }

  // Normalize and store: thread holds rows g, g + 8 and columns 2t, 2t + 1 of each d-tile.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(row_sum[r]);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int row = row0 + 8 * r;
    if (row >= p.q_len) continue;
    bf16* og = p.out + ((static_cast<long long>(b) * p.q_len + row) * p.heads + h) * D + (lane & 3) * 2;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<__nv_bfloat162*>(og + dt * 8) =
          __floats2bfloat162_rn(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
  }
}

}  // namespace sluice::calib::gpu::prefill
