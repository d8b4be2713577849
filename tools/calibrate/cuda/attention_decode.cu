// Launcher of the decode attention kernels (decode_kernel.cuh) and the split heuristic.
#include <algorithm>
#include <cmath>

#include "decode_kernel.cuh"
#include "kernels.h"

namespace sluice::calib::gpu {

namespace {

using namespace decode;

template <int D, int MT>
cudaError_t launch_decode(const DecodeArgs& a, cudaStream_t stream) {
  constexpr int smem = decode_smem_bytes<D, MT>();
  static bool configured = false;
  if (!configured) {
    const cudaError_t e = cudaFuncSetAttribute(decode_kernel<D, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    configured = true;
  }
  const int group = a.heads / a.kv_heads;
  const int chunks = (group + MT * 16 - 1) / (MT * 16);
  const int max_tiles = (a.max_seq_len + kTile - 1) / kTile;
  const int tiles_per_split = (max_tiles + a.num_splits - 1) / a.num_splits;
  float* partial_o = a.partial;
  float* partial_lse = a.partial + static_cast<std::size_t>(a.batch) * a.heads * a.num_splits * D;
  DecodeParams p{reinterpret_cast<const bf16*>(a.q), reinterpret_cast<const bf16*>(a.k_cache),
                 reinterpret_cast<const bf16*>(a.v_cache), a.block_table, a.seq_lens, partial_o, partial_lse,
                 a.heads, a.kv_heads, a.page_size, a.max_pages, a.num_splits, tiles_per_split, chunks,
                 static_cast<float>(1.4426950408889634 / std::sqrt(double(D)))};
  decode_kernel<D, MT><<<dim3(a.num_splits, a.kv_heads * chunks, a.batch), kThreads, smem, stream>>>(p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  decode_reduce_kernel<D><<<dim3(a.heads, a.batch), D, 0, stream>>>(partial_o, partial_lse,
                                                                    reinterpret_cast<bf16*>(a.out), a.heads,
                                                                    a.num_splits);
  return cudaGetLastError();
}

}  // namespace

int decode_num_splits(int batch, int heads, int kv_heads, int max_seq_len, int sm_count) {
  const int group = heads / std::max(kv_heads, 1);
  const int chunks = (group + 31) / 32;  // a bound: MT = 2 above 16 heads per group
  const long long blocks = static_cast<long long>(batch) * kv_heads * std::max(chunks, 1);
  const int max_tiles = (max_seq_len + kTile - 1) / kTile;
  const long long want = (2LL * sm_count + blocks - 1) / blocks;
  const int by_length = std::max(1, max_tiles / (2 * kWarps));  // at least 2 tiles per warp
  return static_cast<int>(std::clamp<long long>(std::min<long long>(want, by_length), 1, kMaxSplits));
}

std::size_t decode_partial_floats(int batch, int heads, int head_dim, int num_splits) {
  return static_cast<std::size_t>(batch) * heads * num_splits * (head_dim + 1);
}

cudaError_t attention_decode(const DecodeArgs& a, cudaStream_t stream) {
  if (a.batch <= 0 || a.heads <= 0 || a.kv_heads <= 0 || a.heads % a.kv_heads != 0 || a.page_size <= 0 ||
      a.max_pages <= 0 || a.max_seq_len <= 0 || a.max_seq_len > a.max_pages * a.page_size || a.num_splits <= 0 ||
      a.num_splits > kMaxSplits || a.batch > 65535)
    return cudaErrorInvalidValue;
  const bool small_group = a.heads / a.kv_heads <= 16;
  switch (a.head_dim) {
    case 64: return small_group ? launch_decode<64, 1>(a, stream) : launch_decode<64, 2>(a, stream);
    case 128: return small_group ? launch_decode<128, 1>(a, stream) : launch_decode<128, 2>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace sluice::calib::gpu
