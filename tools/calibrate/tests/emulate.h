// Host stand-ins for the CUDA built-ins and warp instructions that the attention kernels use,
// so the CPU unit tests can run the kernels' own code (prefill_kernel.cuh, decode_kernel.cuh)
// and check their index arithmetic (fragment layouts, masks, paging, split merging) against
// the float64 references without a GPU. One block runs at a time, one std::thread per CUDA
// thread; barriers stand in for __syncthreads/__syncwarp; ldmatrix and mma.sync are
// computed from the fragment layouts of the PTX ISA. cp.async copies synchronously, so
// pipeline races are not modeled: the GPU checks cover those.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "bf16.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define CAL_DYNAMIC_SMEM(name) unsigned char* name = ::emu::dynamic_smem()

struct __nv_bfloat16 {
  std::uint16_t bits;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline __nv_bfloat16 __float2bfloat16(float f) { return {sluice::calib::float_to_bf16(f)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16(a), __float2bfloat16(b)}; }
struct uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
using std::max;
using std::min;

namespace emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

// What the threads of the running block share.
struct Block {
  std::vector<unsigned char> smem;
  std::unique_ptr<std::barrier<>> block_bar;
  std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
  struct Scratch {
    const void* addr[32];
    unsigned a[32][4], b[32][2];
    float f[32];
  };
  std::vector<Scratch> warp;
};

inline Block* g_block = nullptr;
inline Dim3 g_grid, g_dim;
inline thread_local Dim3 tl_thread, tl_block;

inline unsigned char* dynamic_smem() { return g_block->smem.data(); }
inline int lane() { return static_cast<int>(tl_thread.x % 32); }
inline int warp() { return static_cast<int>(tl_thread.x / 32); }
inline Block::Scratch& scratch() { return g_block->warp[warp()]; }
inline float bf(std::uint16_t b) { return sluice::calib::bf16_to_float(b); }

// Runs `body` for every thread of every block of `grid`, `threads` threads per block, with
// `smem_bytes` of dynamic shared memory filled with NaN bits (0xff) before each block.
template <class F>
void launch(Dim3 grid, int threads, std::size_t smem_bytes, F body) {
  Block blk;
  blk.block_bar = std::make_unique<std::barrier<>>(threads);
  for (int w = 0; w < threads / 32; ++w) blk.warp_bar.push_back(std::make_unique<std::barrier<>>(32));
  blk.warp.resize(threads / 32);
  g_block = &blk;
  g_grid = grid;
  g_dim = {static_cast<unsigned>(threads), 1, 1};
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blk.smem.assign(smem_bytes, 0xff);
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t)
          ts.emplace_back([&, t] {
            tl_thread = {static_cast<unsigned>(t), 0, 0};
            tl_block = {x, y, z};
            body();
          });
        for (auto& th : ts) th.join();
      }
  g_block = nullptr;
}

}  // namespace emu

#define threadIdx (::emu::tl_thread)
#define blockIdx (::emu::tl_block)
#define gridDim (::emu::g_grid)
#define blockDim (::emu::g_dim)

inline void __syncthreads() { emu::g_block->block_bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::g_block->warp_bar[emu::warp()]->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int mask) {
  auto& s = emu::scratch();
  s.f[emu::lane()] = v;
  __syncwarp();
  const float r = s.f[emu::lane() ^ mask];
  __syncwarp();
  return r;
}

namespace sluice::calib::gpu {

inline void cp_async16(void* smem, const void* gmem, bool pred) {
  if (pred)
    std::memcpy(smem, gmem, 16);
  else
    std::memset(smem, 0, 16);
}
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}

// Matrix i's row r comes from the address lane 8i + r gave; each lane receives, of every
// matrix, row lane/4 and columns 2(lane%4), 2(lane%4)+1 (transposed: rows 2(lane%4),
// 2(lane%4)+1 of column lane/4).
inline void ldmatrix_common(unsigned (&r)[4], const void* smem, bool trans) {
  auto& s = emu::scratch();
  const int l = emu::lane(), g = l / 4, t = l % 4;
  s.addr[l] = smem;
  __syncwarp();
  for (int i = 0; i < 4; ++i) {
    std::uint16_t lo, hi;
    if (!trans) {
      const auto* row = static_cast<const std::uint16_t*>(s.addr[8 * i + g]);
      lo = row[2 * t];
      hi = row[2 * t + 1];
    } else {
      lo = static_cast<const std::uint16_t*>(s.addr[8 * i + 2 * t])[g];
      hi = static_cast<const std::uint16_t*>(s.addr[8 * i + 2 * t + 1])[g];
    }
    r[i] = static_cast<unsigned>(lo) | (static_cast<unsigned>(hi) << 16);
  }
  __syncwarp();
}
inline void ldmatrix_x4(unsigned (&r)[4], const void* smem) { ldmatrix_common(r, smem, false); }
inline void ldmatrix_x4_trans(unsigned (&r)[4], const void* smem) { ldmatrix_common(r, smem, true); }

// D = A B + C for A 16x16 (row), B 16x8 (col), fragments as in the PTX ISA for
// mma.m16n8k16 with .bf16 inputs and .f32 accumulators.
inline void mma_16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  auto& s = emu::scratch();
  const int l = emu::lane();
  for (int i = 0; i < 4; ++i) s.a[l][i] = a[i];
  s.b[l][0] = b0;
  s.b[l][1] = b1;
  __syncwarp();
  float A[16][16], B[16][8];
  for (int L = 0; L < 32; ++L) {
    const int g = L / 4, t = L % 4;
    auto put_a = [&](unsigned v, int row, int col) {
      A[row][col] = emu::bf(v & 0xffff);
      A[row][col + 1] = emu::bf(v >> 16);
    };
    put_a(s.a[L][0], g, 2 * t);
    put_a(s.a[L][1], g + 8, 2 * t);
    put_a(s.a[L][2], g, 2 * t + 8);
    put_a(s.a[L][3], g + 8, 2 * t + 8);
    B[2 * t][g] = emu::bf(s.b[L][0] & 0xffff);
    B[2 * t + 1][g] = emu::bf(s.b[L][0] >> 16);
    B[2 * t + 8][g] = emu::bf(s.b[L][1] & 0xffff);
    B[2 * t + 9][g] = emu::bf(s.b[L][1] >> 16);
  }
  __syncwarp();
  const int g = l / 4, t = l % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
    float acc = c[e];
    for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
    c[e] = acc;
  }
}

}  // namespace sluice::calib::gpu
