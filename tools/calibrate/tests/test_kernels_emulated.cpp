// The attention kernels' own code (prefill_kernel.cuh, decode_kernel.cuh), run on the CPU
// under tests/emulate.h and compared with the float64 references: fragment layouts, causal
// and prefix masks, GQA/MQA grouping, paging, splits and their merge. Small shapes, since
// every warp instruction is a barrier round among host threads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "decode_kernel.cuh"
#include "prefill_kernel.cuh"
#include "reference.h"

using namespace sluice::calib;
namespace gpu = sluice::calib::gpu;

namespace {

std::vector<__nv_bfloat16> to_device(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), [](float f) { return __nv_bfloat16{float_to_bf16(f)}; });
  return out;
}

std::vector<float> to_host(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), [](__nv_bfloat16 b) { return bf16_to_float(b.bits); });
  return out;
}

template <int D>
double run_prefill(const AttentionDims& d, unsigned seed) {
  std::mt19937_64 rng(seed);
  const auto q = random_bf16_values(std::size_t(d.batch) * d.q_len * d.heads * D, rng, 2.0f);
  const auto k = random_bf16_values(std::size_t(d.batch) * d.kv_len * d.kv_heads * D, rng);
  const auto v = random_bf16_values(k.size(), rng);
  auto dq = to_device(q), dk = to_device(k), dv = to_device(v);
  std::vector<__nv_bfloat16> out(q.size(), __nv_bfloat16{0xffff});  // poisoned
  const gpu::prefill::PrefillParams p{dq.data(), dk.data(), dv.data(), out.data(), d.heads, d.kv_heads, d.q_len,
                                      d.kv_len, d.causal, static_cast<float>(1.4426950408889634 / std::sqrt(double(D)))};
  const emu::Dim3 grid{static_cast<unsigned>((d.q_len + gpu::prefill::kBM - 1) / gpu::prefill::kBM),
                       static_cast<unsigned>(d.heads), static_cast<unsigned>(d.batch)};
  emu::launch(grid, gpu::prefill::kThreads, gpu::prefill::prefill_smem_bytes<D>(),
              [&] { gpu::prefill::prefill_kernel<D>(p); });
  return relative_error(to_host(out), attention_ref(d, q, k, v));
}

template <int D, int MT>
double run_decode(int heads, int kv_heads, int page_size, const std::vector<int>& lens, int splits, unsigned seed) {
  std::mt19937_64 rng(seed);
  const int batch = static_cast<int>(lens.size());
  const int max_len = *std::max_element(lens.begin(), lens.end());
  PagedKv kv;
  kv.page_size = page_size;
  kv.kv_heads = kv_heads;
  kv.head_dim = D;
  kv.max_pages = (max_len + page_size - 1) / page_size;
  const int pages = batch * kv.max_pages + 2;
  std::vector<std::int32_t> perm(pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  kv.block_table.assign(perm.begin(), perm.begin() + batch * kv.max_pages);
  const std::size_t cache = std::size_t(pages) * page_size * kv_heads * D;
  kv.k = random_bf16_values(cache, rng);
  kv.v = random_bf16_values(cache, rng);
  const auto q = random_bf16_values(std::size_t(batch) * heads * D, rng, 2.0f);
  auto dq = to_device(q), dk = to_device(kv.k), dv = to_device(kv.v);
  std::vector<float> partial(std::size_t(batch) * heads * splits * (D + 1), std::nanf(""));
  std::vector<__nv_bfloat16> out(q.size(), __nv_bfloat16{0xffff});
  const int chunks = (heads / kv_heads + MT * 16 - 1) / (MT * 16);
  const int max_tiles = (max_len + gpu::decode::kTile - 1) / gpu::decode::kTile;
  float* partial_o = partial.data();
  float* partial_lse = partial.data() + std::size_t(batch) * heads * splits * D;
  const gpu::decode::DecodeParams p{dq.data(), dk.data(), dv.data(), kv.block_table.data(), lens.data(),
                                    partial_o, partial_lse, heads, kv_heads, page_size, kv.max_pages, splits,
                                    (max_tiles + splits - 1) / splits, chunks,
                                    static_cast<float>(1.4426950408889634 / std::sqrt(double(D)))};
  emu::launch({static_cast<unsigned>(splits), static_cast<unsigned>(kv_heads * chunks), static_cast<unsigned>(batch)},
              gpu::decode::kThreads, gpu::decode::decode_smem_bytes<D, MT>(),
              [&] { gpu::decode::decode_kernel<D, MT>(p); });
  emu::launch({static_cast<unsigned>(heads), static_cast<unsigned>(batch), 1}, D, 0, [&] {
    gpu::decode::decode_reduce_kernel<D>(partial_o, partial_lse, out.data(), heads, splits);
  });
  return relative_error(to_host(out), decode_ref(heads, kv, lens, q));
}

}  // namespace

TEST_CASE("emulated prefill kernel matches the reference: causal, full, prefix slice, GQA, MQA") {
  CHECK(run_prefill<64>({1, 2, 1, 64, 70, 70, true}, 1) < 1e-2);     // MQA, partial last block
  CHECK(run_prefill<64>({1, 2, 2, 64, 65, 65, false}, 2) < 1e-2);    // non-causal, kv tail masked
  CHECK(run_prefill<128>({1, 2, 1, 128, 20, 150, true}, 3) < 1e-2);  // 20 new tokens after 130 cached
  CHECK(run_prefill<64>({2, 4, 2, 64, 3, 3, true}, 4) < 1e-2);       // batch 2, GQA, tiny
}

TEST_CASE("emulated decode kernels match the reference: paging, ragged lengths, splits, GQA and MQA groups") {
  CHECK(run_decode<64, 1>(4, 1, 16, {70, 5}, 2, 5) < 1e-2);
  CHECK(run_decode<64, 1>(4, 4, 8, {33, 140}, 3, 6) < 1e-2);
  CHECK(run_decode<128, 1>(2, 1, 16, {300}, 1, 7) < 1e-2);  // all 4 warps, several tiles each
  CHECK(run_decode<64, 1>(8, 2, 32, {700, 129}, 1, 9) < 1e-2);  // 6 tiles per warp: stages wrap around
  CHECK(run_decode<64, 2>(32, 1, 16, {40}, 1, 8) < 1e-2);   // 32 query heads on one KV head
}
