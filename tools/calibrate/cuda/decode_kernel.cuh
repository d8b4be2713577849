// Decode attention, flash-decoding style. One block per (split of the KV length, KV head,
// group chunk, sequence): the query heads that share a KV head (GQA/MQA) form the M rows of a
// tensor-core MMA, so each K/V tile is loaded once for the whole group. Each of the 4 warps
// streams its own tiles of 32 keys (interleaved) from the paged cache through a private
// three-stage cp.async pipeline, with an online softmax in registers; the warps then merge in
// shared memory and the block writes its split's normalized output and log-sum-exp. A
// second kernel merges the splits into bf16 output. The launcher is attention_decode.cu; the
// CPU tests also run this header under an emulation of the warp instructions (tests/emulate.h).
#pragma once
#include <cstdint>

#include "common.cuh"

namespace sluice::calib::gpu::decode {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = 32;       // keys per warp tile
constexpr int kStages = 3;      // cp.async stages per warp: two tiles in flight while one is used
constexpr int kMaxSplits = 64;

struct DecodeParams {
  const bf16* q;
  const bf16* k_cache;
  const bf16* v_cache;
  const std::int32_t* block_table;
  const std::int32_t* seq_lens;
  float* partial_o;    // [batch][heads][splits][D]
  float* partial_lse;  // [batch][heads][splits], log2 domain
  int heads, kv_heads, page_size, max_pages, num_splits, tiles_per_split, group_chunks;
  float scale_log2;
};

template <int D>
__host__ __device__ constexpr int ld() {
  return D + 8;
}

template <int D, int MT>
constexpr int decode_smem_bytes() {
  constexpr int stages = kWarps * kStages * 2 * kTile * ld<D>() * 2;  // per warp: stages of K and V
  constexpr int merge = kWarps * MT * 16 * (D + 2) * 4;         // per warp: O, max, sum
  constexpr int body = stages > merge ? stages : merge;
  return body + MT * 16 * ld<D>() * 2;  // + Q
}

template <int D, int MT>
__global__ void __launch_bounds__(kThreads) decode_kernel(const DecodeParams p) {
  constexpr int LD = ld<D>();
  constexpr int kRows = MT * 16;  // query heads per block (padded)
  CAL_DYNAMIC_SMEM(smem_raw);
  constexpr int kStageBytes = kWarps * kStages * 2 * kTile * LD * 2;
  constexpr int kMergeBytes = kWarps * kRows * (D + 2) * 4;
  constexpr int kBody = kStageBytes > kMergeBytes ? kStageBytes : kMergeBytes;
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw + kBody);

  const int split = blockIdx.x;
  const int kvh = blockIdx.y / p.group_chunks, chunk = blockIdx.y % p.group_chunks;
  const int b = blockIdx.z;
  const int group = p.heads / p.kv_heads;
  const int h0 = kvh * group + chunk * kRows;         // first query head of this block
  const int rows = min(kRows, group - chunk * kRows);  // real query heads
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int len = p.seq_lens[b];
  const int n_tiles = (len + kTile - 1) / kTile;
  const int tile_begin = split * p.tiles_per_split;
  const int tile_end = min(n_tiles, tile_begin + p.tiles_per_split);

  // Q rows of the group (zero for padding rows).
  for (int c = threadIdx.x; c < kRows * (D / 8); c += kThreads) {
    const int r = c / (D / 8), col = (c % (D / 8)) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < rows) val = *reinterpret_cast<const uint4*>(p.q + (static_cast<long long>(b) * p.heads + h0 + r) * D + col);
    *reinterpret_cast<uint4*>(sQ + r * LD + col) = val;
  }
  __syncthreads();

  bf16* sK = reinterpret_cast<bf16*>(smem_raw) + warp * kStages * 2 * kTile * LD;  // [kStages][kTile][LD]
  bf16* sV = sK + kStages * kTile * LD;
  const long long row_stride = static_cast<long long>(p.kv_heads) * D;  // between tokens of a page
  const std::int32_t* table = p.block_table + static_cast<long long>(b) * p.max_pages;

  auto issue = [&](int tile, int stage) {
    constexpr int kChunks = D / 8;
#pragma unroll
    for (int c = lane; c < kTile * kChunks; c += 32) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      const int key = tile * kTile + r;
      const bool ok = key < len;
      long long off = 0;
      if (ok) {
        const int page = table[key / p.page_size];
        off = (static_cast<long long>(page) * p.page_size + key % p.page_size) * row_stride + kvh * D + col;
      }
      cp_async16(sK + (stage * kTile + r) * LD + col, p.k_cache + off, ok);
      cp_async16(sV + (stage * kTile + r) * LD + col, p.v_cache + off, ok);
    }
  };

  float o[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  float row_max[MT][2], row_sum[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) row_max[mt][0] = row_max[mt][1] = -INFINITY, row_sum[mt][0] = row_sum[mt][1] = 0.f;

  // This warp's tiles: tile_begin + warp, + kWarps, ...; kStages - 1 of them in flight.
  int tile = tile_begin + warp;
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (tile + st * kWarps < tile_end) issue(tile + st * kWarps, st);
    cp_async_commit();
  }
  for (int it = 0; tile < tile_end; tile += kWarps, ++it) {
    const int next = tile + (kStages - 1) * kWarps;
    if (next < tile_end) issue(next, (it + kStages - 1) % kStages);  // the stage used at it - 1
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const bf16* cK = sK + (it % kStages) * kTile * LD;
    const bf16* cV = sV + (it % kStages) * kTile * LD;

    float s[MT][kTile / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < kTile / 8; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      unsigned qf[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        ldmatrix_x4(qf[mt], sQ + (mt * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int np = 0; np < kTile / 16; ++np) {
        unsigned kf[4];
        ldmatrix_x4(kf, cK + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816(s[mt][2 * np], qf[mt], kf[0], kf[1]);
          mma_16816(s[mt][2 * np + 1], qf[mt], kf[2], kf[3]);
        }
      }
    }
    if ((tile + 1) * kTile > len) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (tile * kTile + nt * 8 + (lane & 3) * 2 + (e & 1) >= len) s[mt][nt][e] = -INFINITY;
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kTile / 8; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
        mx = quad_max(mx) * p.scale_log2;
        const float m_new = fmaxf(row_max[mt][r], mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = exp2f(row_max[mt][r] - m_use);
        row_max[mt][r] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kTile / 8; ++nt) {
          s[mt][nt][2 * r] = exp2f(s[mt][nt][2 * r] * p.scale_log2 - m_use);
          s[mt][nt][2 * r + 1] = exp2f(s[mt][nt][2 * r + 1] * p.scale_log2 - m_use);
          sum += s[mt][nt][2 * r] + s[mt][nt][2 * r + 1];
        }
        row_sum[mt][r] = row_sum[mt][r] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          o[mt][dt][2 * r] *= alpha;
          o[mt][dt][2 * r + 1] *= alpha;
        }
      }
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      unsigned a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        a[mt][0] = pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        unsigned vf[4];
        ldmatrix_x4_trans(vf, cV + (kk * 16 + (lane & 15)) * LD + dp * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816(o[mt][2 * dp], a[mt], vf[0], vf[1]);
          mma_16816(o[mt][2 * dp + 1], a[mt], vf[2], vf[3]);
        }
      }
    }
    __syncwarp();
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its stages: reuse them for the merge

  // Merge the warps: each writes its unnormalized O, max and sum per row.
  float* sO = reinterpret_cast<float*>(smem_raw);  // [warps][kRows][D]
  float* sM = sO + kWarps * kRows * D;             // [warps][kRows]
  float* sL = sM + kWarps * kRows;                 // [warps][kRows]
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = mt * 16 + lane / 4 + 8 * r;
      const float l = quad_sum(row_sum[mt][r]);
      if ((lane & 3) == 0) {
        sM[warp * kRows + row] = row_max[mt][r];
        sL[warp * kRows + row] = l;
      }
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        float* dst = sO + (warp * kRows + row) * D + dt * 8 + (lane & 3) * 2;
        dst[0] = o[mt][dt][2 * r];
        dst[1] = o[mt][dt][2 * r + 1];
      }
    }
  __syncthreads();
  for (int c = threadIdx.x; c < rows * D; c += kThreads) {
    const int row = c / D, d = c % D;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sM[w * kRows + row]);
    float l = 0.f, acc = 0.f;
    if (m != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float f = exp2f(sM[w * kRows + row] - m);
        l += f * sL[w * kRows + row];
        acc += f * sO[(w * kRows + row) * D + d];
      }
    }
    const long long bh = static_cast<long long>(b) * p.heads + h0 + row;
    p.partial_o[(bh * p.num_splits + split) * D + d] = l > 0.f ? acc / l : 0.f;
    if (d == 0) p.partial_lse[bh * p.num_splits + split] = l > 0.f ? m + log2f(l) : -INFINITY;
  }
}

// out[b][h] = sum over splits of 2^(lse_s - M) O_s / sum of 2^(lse_s - M).
template <int D>
__global__ void __launch_bounds__(D) decode_reduce_kernel(const float* partial_o, const float* partial_lse, bf16* out,
                                                          int heads, int num_splits) {
  const long long bh = static_cast<long long>(blockIdx.y) * heads + blockIdx.x;
  const int d = threadIdx.x;
  const float* lse = partial_lse + bh * num_splits;
  float m = -INFINITY;
  for (int s = 0; s < num_splits; ++s) m = fmaxf(m, lse[s]);
  float wsum = 0.f, acc = 0.f;
  for (int s = 0; s < num_splits; ++s) {
    if (lse[s] == -INFINITY) continue;
    const float w = exp2f(lse[s] - m);
    wsum += w;
    acc += w * partial_o[(bh * num_splits + s) * D + d];
  }
  out[bh * D + d] = __float2bfloat16(wsum > 0.f ? acc / wsum : 0.f);
}

}  // namespace sluice::calib::gpu::decode
