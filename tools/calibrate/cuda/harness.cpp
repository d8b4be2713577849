#include "harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include "bf16.h"
#include "reference.h"

namespace sluice::calib::gpu {

void check_cuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " +
                           cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

namespace {

// A device allocation freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) { CAL_CUDA(cudaMalloc(&p_, std::max<std::size_t>(bytes, 16))); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_;
};

class Events {
 public:
  Events() {
    CAL_CUDA(cudaEventCreate(&start));
    CAL_CUDA(cudaEventCreate(&stop));
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  cudaEvent_t start, stop;
};

std::vector<bf16_t> to_bits(const std::vector<float>& v) {
  std::vector<bf16_t> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), float_to_bf16);
  return out;
}

std::vector<float> from_bits(const std::vector<bf16_t>& v) {
  std::vector<float> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), bf16_to_float);
  return out;
}

// Uploads bf16 values to a new device buffer.
template <class T>
void upload(const DeviceBuffer& d, const std::vector<T>& h) {
  CAL_CUDA(cudaMemcpy(d.as<void>(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

std::vector<float> download_bf16(const DeviceBuffer& d, std::size_t n) {
  std::vector<bf16_t> bits(n);
  CAL_CUDA(cudaMemcpy(bits.data(), d.as<void>(), n * sizeof(bf16_t), cudaMemcpyDeviceToHost));
  return from_bits(bits);
}

// NaN in every bf16 (0xffff), so an output element the kernel never writes fails the check.
void poison(const DeviceBuffer& d, cudaStream_t s) {
  CAL_CUDA(cudaMemsetAsync(d.as<void>(), 0xff, d.bytes(), s));
  CAL_CUDA(cudaStreamSynchronize(s));
}

CheckResult judge(const std::string& kernel, const std::string& shape, const std::vector<float>& out,
                  const std::vector<double>& ref) {
  CheckResult r{kernel, shape, relative_error(out, ref), false};
  r.pass = r.rel_error <= kTolerance && !has_non_finite(out);
  std::printf("  check %-14s %-58s rel_err %.2e  %s\n", kernel.c_str(), shape.c_str(), r.rel_error,
              r.pass ? "ok" : "FAIL");
  std::fflush(stdout);
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The cos/sin table of rotary embedding, [max_pos][head_dim/2] pairs, base 10000.
std::vector<float> rope_table(int max_pos, int head_dim) {
  const int half = head_dim / 2;
  std::vector<float> t(std::size_t(max_pos) * half * 2);
  for (int p = 0; p < max_pos; ++p)
    for (int i = 0; i < half; ++i) {
      const double ang = p * std::pow(10000.0, -2.0 * i / head_dim);
      t[(std::size_t(p) * half + i) * 2] = static_cast<float>(std::cos(ang));
      t[(std::size_t(p) * half + i) * 2 + 1] = static_cast<float>(std::sin(ang));
    }
  return t;
}

std::string fmt(const char* f, auto... args) {
  char b[256];
  std::snprintf(b, sizeof b, f, args...);
  return b;
}

void progress(const std::string& table, std::size_t i, std::size_t n, const std::string& what) {
  std::printf("  [%s %zu/%zu] %s\n", table.c_str(), i + 1, n, what.c_str());
  std::fflush(stdout);
}

std::uint64_t seed_counter = 1;
void fill(const DeviceBuffer& d, cudaStream_t s, float scale = 1.0f) {
  CAL_CUDA(fill_random_bf16(d.as<bf16_t>(), d.bytes() / 2, 0x5eed0000 + seed_counter++, scale, s));
}

}  // namespace

double time_per_call_ms(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream,
                        const TimingOptions& opt) {
  Events ev;
  launch(stream);
  CAL_CUDA(cudaStreamSynchronize(stream));
  CAL_CUDA(cudaEventRecord(ev.start, stream));
  for (int i = 0; i < 3; ++i) launch(stream);
  CAL_CUDA(cudaEventRecord(ev.stop, stream));
  CAL_CUDA(cudaEventSynchronize(ev.stop));
  float est = 0;
  CAL_CUDA(cudaEventElapsedTime(&est, ev.start, ev.stop));
  const double per_call = std::max(double(est) / 3, 1e-4);
  const int calls = static_cast<int>(std::clamp(opt.graph_target_ms / per_call, 1.0, 1000.0));

  cudaGraph_t graph = nullptr;
  CAL_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  try {
    for (int i = 0; i < calls; ++i) launch(stream);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  CAL_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CAL_CUDA(inst);
  std::vector<double> times;
  try {
    for (int i = 0; i < opt.warmup; ++i) CAL_CUDA(cudaGraphLaunch(exec, stream));
    CAL_CUDA(cudaStreamSynchronize(stream));
    for (int i = 0; i < opt.repeats; ++i) {
      CAL_CUDA(cudaEventRecord(ev.start, stream));
      CAL_CUDA(cudaGraphLaunch(exec, stream));
      CAL_CUDA(cudaEventRecord(ev.stop, stream));
      CAL_CUDA(cudaEventSynchronize(ev.stop));
      float ms = 0;
      CAL_CUDA(cudaEventElapsedTime(&ms, ev.start, ev.stop));
      times.push_back(ms);
    }
  } catch (...) {
    cudaGraphExecDestroy(exec);
    throw;
  }
  cudaGraphExecDestroy(exec);
  return median(times) / calls;
}

// ---------------------------------------------------------------------------------------
// Checks

std::vector<CheckResult> check_prefill(cudaStream_t s) {
  const std::vector<AttentionDims> cases = {
      {2, 4, 4, 128, 300, 300, true},   {1, 8, 2, 64, 517, 517, false}, {1, 4, 1, 128, 200, 533, true},
      {1, 2, 2, 64, 64, 64, true},      {1, 4, 1, 128, 1000, 1000, true}, {2, 2, 1, 64, 37, 165, true},
      {1, 2, 2, 128, 130, 130, false},  {1, 6, 3, 128, 1, 77, true},
  };
  std::vector<CheckResult> out;
  std::mt19937_64 rng(101);
  for (const auto& d : cases) {
    const auto q = random_bf16_values(std::size_t(d.batch) * d.q_len * d.heads * d.head_dim, rng, 2.0f);
    const auto k = random_bf16_values(std::size_t(d.batch) * d.kv_len * d.kv_heads * d.head_dim, rng);
    const auto v = random_bf16_values(k.size(), rng);
    DeviceBuffer dq(q.size() * 2), dk(k.size() * 2), dv(v.size() * 2), dout(q.size() * 2);
    upload(dq, to_bits(q));
    upload(dk, to_bits(k));
    upload(dv, to_bits(v));
    poison(dout, s);
    CAL_CUDA(attention_prefill({dq.as<bf16_t>(), dk.as<bf16_t>(), dv.as<bf16_t>(), dout.as<bf16_t>(), d.batch,
                                d.heads, d.kv_heads, d.head_dim, d.q_len, d.kv_len, d.causal},
                               s));
    CAL_CUDA(cudaStreamSynchronize(s));
    const auto got = download_bf16(dout, q.size());
    out.push_back(judge("prefill", fmt("b%d h%d kv%d d%d q%d kv_len%d %s", d.batch, d.heads, d.kv_heads, d.head_dim,
                                       d.q_len, d.kv_len, d.causal ? "causal" : "full"),
                        got, attention_ref(d, q, k, v)));
  }
  return out;
}

std::vector<CheckResult> check_decode(int sm_count, cudaStream_t s) {
  struct Case {
    int heads, kv_heads, head_dim, page_size;
    std::vector<int> lens;
  };
  const std::vector<Case> cases = {
      {8, 2, 128, 16, {1, 37, 700, 256, 513}}, {32, 1, 128, 16, {100, 2000, 33}}, {4, 4, 64, 32, {64, 1, 999, 128}},
      {16, 2, 64, 64, {3000, 17}},             {8, 8, 128, 16, {5000}},           {64, 1, 64, 16, {300, 45}},
  };
  std::vector<CheckResult> out;
  std::mt19937_64 rng(202);
  for (const auto& c : cases) {
    const int batch = static_cast<int>(c.lens.size());
    const int max_len = *std::max_element(c.lens.begin(), c.lens.end());
    PagedKv kv;
    kv.page_size = c.page_size;
    kv.kv_heads = c.kv_heads;
    kv.head_dim = c.head_dim;
    kv.max_pages = (max_len + c.page_size - 1) / c.page_size;
    const int pages = batch * kv.max_pages + 3;  // a few pages no sequence uses
    std::vector<std::int32_t> perm(pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    kv.block_table.assign(perm.begin(), perm.begin() + batch * kv.max_pages);
    const std::size_t cache = std::size_t(pages) * c.page_size * c.kv_heads * c.head_dim;
    kv.k = random_bf16_values(cache, rng);
    kv.v = random_bf16_values(cache, rng);
    const auto q = random_bf16_values(std::size_t(batch) * c.heads * c.head_dim, rng, 2.0f);
    const auto ref = decode_ref(c.heads, kv, c.lens, q);

    DeviceBuffer dq(q.size() * 2), dk(cache * 2), dv(cache * 2), dout(q.size() * 2);
    DeviceBuffer dtable(kv.block_table.size() * 4), dlens(c.lens.size() * 4);
    upload(dq, to_bits(q));
    upload(dk, to_bits(kv.k));
    upload(dv, to_bits(kv.v));
    upload(dtable, kv.block_table);
    upload(dlens, c.lens);
    const int auto_splits = decode_num_splits(batch, c.heads, c.kv_heads, max_len, sm_count);
    for (int splits : {auto_splits, 1, 5}) {
      DeviceBuffer part(decode_partial_floats(batch, c.heads, c.head_dim, splits) * 4);
      poison(dout, s);
      CAL_CUDA(cudaMemsetAsync(part.as<void>(), 0xff, part.bytes(), s));
      CAL_CUDA(attention_decode({dq.as<bf16_t>(), dk.as<bf16_t>(), dv.as<bf16_t>(), dtable.as<std::int32_t>(),
                                 dlens.as<std::int32_t>(), dout.as<bf16_t>(), part.as<float>(), batch, c.heads,
                                 c.kv_heads, c.head_dim, c.page_size, kv.max_pages, max_len, splits},
                                s));
      CAL_CUDA(cudaStreamSynchronize(s));
      out.push_back(judge("decode", fmt("b%d h%d kv%d d%d page%d max_len%d splits%d", batch, c.heads, c.kv_heads,
                                        c.head_dim, c.page_size, max_len, splits),
                          download_bf16(dout, q.size()), ref));
    }
  }
  return out;
}

std::vector<CheckResult> check_elementwise(cudaStream_t s) {
  std::vector<CheckResult> out;
  std::mt19937_64 rng(303);
  for (auto [tokens, hidden] : {std::pair{3, 4096}, std::pair{5, 1024}}) {
    const auto x = random_bf16_values(std::size_t(tokens) * hidden, rng);
    const auto w = random_bf16_values(hidden, rng);
    DeviceBuffer dx(x.size() * 2), dw(w.size() * 2), dy(x.size() * 2);
    upload(dx, to_bits(x));
    upload(dw, to_bits(w));
    poison(dy, s);
    CAL_CUDA(rmsnorm(dx.as<bf16_t>(), dw.as<bf16_t>(), dy.as<bf16_t>(), tokens, hidden, 1e-6f, s));
    CAL_CUDA(cudaStreamSynchronize(s));
    out.push_back(judge("rmsnorm", fmt("tokens%d hidden%d", tokens, hidden), download_bf16(dy, x.size()),
                        rmsnorm_ref(x, w, hidden, 1e-6)));
  }
  {
    const std::size_t n = 3 * 4096 + 8 * 40;
    const auto x = random_bf16_values(n, rng), r = random_bf16_values(n, rng);
    DeviceBuffer dx(n * 2), dr(n * 2), dy(n * 2);
    upload(dx, to_bits(x));
    upload(dr, to_bits(r));
    poison(dy, s);
    CAL_CUDA(residual_add(dx.as<bf16_t>(), dr.as<bf16_t>(), dy.as<bf16_t>(), n, s));
    CAL_CUDA(cudaStreamSynchronize(s));
    out.push_back(judge("residual_add", fmt("n%zu", n), download_bf16(dy, n), residual_add_ref(x, r)));
  }
  for (auto [tokens, ffn] : {std::pair{3, 11008}, std::pair{2, 14336}}) {
    const auto gu = random_bf16_values(std::size_t(tokens) * 2 * ffn, rng, 4.0f);
    DeviceBuffer dg(gu.size() * 2), dy(std::size_t(tokens) * ffn * 2);
    upload(dg, to_bits(gu));
    poison(dy, s);
    CAL_CUDA(silu_mul(dg.as<bf16_t>(), dy.as<bf16_t>(), tokens, ffn, s));
    CAL_CUDA(cudaStreamSynchronize(s));
    out.push_back(judge("silu_mul", fmt("tokens%d ffn%d", tokens, ffn), download_bf16(dy, std::size_t(tokens) * ffn),
                        silu_mul_ref(gu, ffn)));
  }
  for (int head_dim : {128, 64}) {
    const std::vector<int> pos = {0, 1, 5, 100, 2047, 8191, 3};
    const int tokens = static_cast<int>(pos.size()), heads = 4;
    const auto x = random_bf16_values(std::size_t(tokens) * heads * head_dim, rng);
    const auto table = rope_table(8192, head_dim);
    DeviceBuffer dx(x.size() * 2), dy(x.size() * 2), dpos(pos.size() * 4), dtab(table.size() * 4);
    upload(dx, to_bits(x));
    upload(dpos, pos);
    upload(dtab, table);
    poison(dy, s);
    CAL_CUDA(rope(dx.as<bf16_t>(), dy.as<bf16_t>(), dpos.as<std::int32_t>(), dtab.as<float>(), tokens, heads, head_dim, s));
    CAL_CUDA(cudaStreamSynchronize(s));
    out.push_back(judge("rope", fmt("tokens%d heads%d head_dim%d", tokens, heads, head_dim), download_bf16(dy, x.size()),
                        rope_ref(x, pos, heads, head_dim, 10000.0)));
  }
  return out;
}

std::vector<CheckResult> check_gemm(Gemm& gemm, cudaStream_t s) {
  std::vector<CheckResult> out;
  std::mt19937_64 rng(404);
  for (auto [m, k, n] : {std::tuple{3, 256, 128}, std::tuple{64, 1024, 384}, std::tuple{200, 4096, 96},
                         std::tuple{1, 4096, 512}}) {
    const auto x = random_bf16_values(std::size_t(m) * k, rng), w = random_bf16_values(std::size_t(n) * k, rng);
    DeviceBuffer dx(x.size() * 2), dw(w.size() * 2), dy(std::size_t(m) * n * 2);
    upload(dx, to_bits(x));
    upload(dw, to_bits(w));
    poison(dy, s);
    gemm.prepare(m, k, n);
    CAL_CUDA(gemm.run(dx.as<bf16_t>(), dw.as<bf16_t>(), dy.as<bf16_t>(), m, k, n, s));
    CAL_CUDA(cudaStreamSynchronize(s));
    out.push_back(judge("gemm", fmt("M%d K%d N%d", m, k, n), download_bf16(dy, std::size_t(m) * n),
                        gemm_ref(x, w, m, k, n)));
  }
  return out;
}

std::vector<CheckResult> check_d2h(cudaStream_t s) {
  std::vector<CheckResult> out;
  const int n = 256;
  std::vector<std::int64_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = 7LL * i + 3 + (std::int64_t(i) << 33);
  DeviceBuffer d(n * 8);
  upload(d, ids);
  std::int64_t* pinned = nullptr;
  CAL_CUDA(cudaMallocHost(reinterpret_cast<void**>(&pinned), n * 8));
  std::vector<std::int64_t> pageable(n, -1);
  std::fill(pinned, pinned + n, -1);
  CAL_CUDA(cudaMemcpy(pageable.data(), d.as<void>(), n * 8, cudaMemcpyDeviceToHost));
  CAL_CUDA(cudaMemcpyAsync(pinned, d.as<void>(), n * 8, cudaMemcpyDeviceToHost, s));
  CAL_CUDA(cudaStreamSynchronize(s));
  std::int64_t item = -1;
  CAL_CUDA(cudaMemcpy(&item, d.as<void>(), 8, cudaMemcpyDeviceToHost));
  const bool ok = pageable == ids && std::equal(ids.begin(), ids.end(), pinned) && item == ids[0];
  cudaFreeHost(pinned);
  CheckResult r{"d2h", "256 int64 ids, pageable, pinned, item", ok ? 0.0 : INFINITY, ok};
  std::printf("  check %-14s %-58s %s\n", r.kernel.c_str(), r.shape.c_str(), ok ? "ok" : "FAIL");
  out.push_back(r);
  return out;
}

// ---------------------------------------------------------------------------------------
// Sweeps

CsvTable sweep_prefill(const std::vector<PrefillPoint>& pts, const TimingOptions& t, cudaStream_t s, Summary& sum) {
  auto table = make_table("attention_prefill.csv");
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const auto& p = pts[i];
    const std::size_t nq = std::size_t(p.batch) * p.seq * p.heads * p.head_dim;
    const std::size_t nkv = std::size_t(p.batch) * p.seq * p.kv_heads * p.head_dim;
    DeviceBuffer q(nq * 2), k(nkv * 2), v(nkv * 2), o(nq * 2);
    fill(q, s, 2.0f);
    fill(k, s);
    fill(v, s);
    const PrefillArgs a{q.as<bf16_t>(), k.as<bf16_t>(), v.as<bf16_t>(), o.as<bf16_t>(), p.batch, p.heads,
                        p.kv_heads, p.head_dim, p.seq, p.seq, p.causal};
    const double ms = time_per_call_ms([&](cudaStream_t st) { CAL_CUDA(attention_prefill(a, st)); }, s, t);
    const double tflops = attention_flops(p.batch, p.heads, p.head_dim, p.seq, p.seq, p.causal) / (ms * 1e-3) / 1e12;
    progress("prefill", i, pts.size(),
             fmt("h%d kv%d d%d b%d seq%d %s: %.4f ms, %.0f TFLOP/s", p.heads, p.kv_heads, p.head_dim, p.batch, p.seq,
                 p.causal ? "causal" : "full", ms, tflops));
    table.rows.push_back({std::to_string(p.heads), std::to_string(p.kv_heads), std::to_string(p.head_dim),
                          std::to_string(p.batch), std::to_string(p.seq), format_bool(p.causal), format_ms(ms)});
    if (p.seq == 16384) {
      const std::string key = fmt("prefill_%s_16k_kv%d_d%d_TFLOPs", p.causal ? "causal" : "full", p.kv_heads, p.head_dim);
      sum[key] = tflops;
    }
    auto& best = sum["prefill_TFLOPs_max"];
    best = std::max(best, tflops);
  }
  return table;
}

CsvTable sweep_slice(const std::vector<SlicePoint>& pts, const TimingOptions& t, cudaStream_t s, Summary&) {
  auto table = make_table("attention_slice.csv");
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const auto& p = pts[i];
    const int kv_len = p.slice + p.prefix;
    const std::size_t nq = std::size_t(p.slice) * p.heads * p.head_dim;
    const std::size_t nkv = std::size_t(kv_len) * p.heads * p.head_dim;
    DeviceBuffer q(nq * 2), k(nkv * 2), v(nkv * 2), o(nq * 2);
    fill(q, s, 2.0f);
    fill(k, s);
    fill(v, s);
    const PrefillArgs a{q.as<bf16_t>(), k.as<bf16_t>(), v.as<bf16_t>(), o.as<bf16_t>(), 1, p.heads, p.heads,
                        p.head_dim, p.slice, kv_len, true};
    const double ms = time_per_call_ms([&](cudaStream_t st) { CAL_CUDA(attention_prefill(a, st)); }, s, t);
    progress("slice", i, pts.size(), fmt("h%d d%d slice%d prefix%d: %.4f ms", p.heads, p.head_dim, p.slice, p.prefix, ms));
    table.rows.push_back({std::to_string(p.heads), std::to_string(p.head_dim), std::to_string(p.slice),
                          std::to_string(p.prefix), format_ms(ms)});
  }
  return table;
}

CsvTable sweep_decode(const std::vector<DecodePoint>& pts, int sm_count, const TimingOptions& t, cudaStream_t s,
                      Summary& sum) {
  auto table = make_table("attention_decode.csv");
  constexpr int kPage = 16;
  std::mt19937_64 rng(505);
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const auto& p = pts[i];
    const int max_pages = (p.kv_len + kPage - 1) / kPage;
    const int pages = p.batch * max_pages;
    // Pages in a shuffled order, as a block manager hands them out over time.
    std::vector<std::int32_t> block_table(pages);
    std::iota(block_table.begin(), block_table.end(), 0);
    std::shuffle(block_table.begin(), block_table.end(), rng);
    const std::vector<std::int32_t> lens(p.batch, p.kv_len);
    const std::size_t cache = std::size_t(pages) * kPage * p.kv_heads * p.head_dim;
    const int splits = decode_num_splits(p.batch, p.heads, p.kv_heads, p.kv_len, sm_count);
    DeviceBuffer q(std::size_t(p.batch) * p.heads * p.head_dim * 2), o(q.bytes()), k(cache * 2), v(cache * 2);
    DeviceBuffer table_d(block_table.size() * 4), lens_d(lens.size() * 4);
    DeviceBuffer part(decode_partial_floats(p.batch, p.heads, p.head_dim, splits) * 4);
    fill(q, s, 2.0f);
    fill(k, s);
    fill(v, s);
    upload(table_d, block_table);
    upload(lens_d, lens);
    const DecodeArgs a{q.as<bf16_t>(), k.as<bf16_t>(), v.as<bf16_t>(), table_d.as<std::int32_t>(),
                       lens_d.as<std::int32_t>(), o.as<bf16_t>(), part.as<float>(), p.batch, p.heads, p.kv_heads,
                       p.head_dim, kPage, max_pages, p.kv_len, splits};
    const double ms = time_per_call_ms([&](cudaStream_t st) { CAL_CUDA(attention_decode(a, st)); }, s, t);
    const double tbps = decode_min_bytes(p) / (ms * 1e-3) / 1e12;
    progress("decode", i, pts.size(),
             fmt("h%d kv%d d%d b%d kv_len%d splits%d: %.4f ms, %.2f TB/s", p.heads, p.kv_heads, p.head_dim, p.batch,
                 p.kv_len, splits, ms, tbps));
    table.rows.push_back({std::to_string(p.heads), std::to_string(p.kv_heads), std::to_string(p.head_dim),
                          std::to_string(p.batch), std::to_string(p.kv_len), format_ms(ms)});
    auto& best = sum["decode_TBps_max"];
    best = std::max(best, tbps);
    if (double(p.batch) * p.kv_len >= 64.0 * 16384) {
      auto& big = sum["decode_TBps_min_at_batch_x_len_ge_1M"];
      big = big == 0 ? tbps : std::min(big, tbps);
    }
  }
  return table;
}

CsvTable sweep_elementwise(const std::vector<ElementwisePoint>& pts, const TimingOptions& t, cudaStream_t s,
                           Summary& sum) {
  auto table = make_table("elementwise.csv");
  const auto rope_cs = rope_table(8192, 128);
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const auto& p = pts[i];
    double ms = 0;
    const std::size_t rows = p.tokens;
    if (p.op == "rmsnorm") {
      DeviceBuffer x(rows * p.hidden * 2), w(std::size_t(p.hidden) * 2), y(x.bytes());
      fill(x, s);
      fill(w, s);
      ms = time_per_call_ms([&](cudaStream_t st) { CAL_CUDA(rmsnorm(x.as<bf16_t>(), w.as<bf16_t>(), y.as<bf16_t>(), p.tokens, p.hidden, 1e-6f, st)); }, s, t);
    } else if (p.op == "residual_add") {
      DeviceBuffer x(rows * p.hidden * 2), r(x.bytes()), y(x.bytes());
      fill(x, s);
      fill(r, s);
      ms = time_per_call_ms([&](cudaStream_t st) { CAL_CUDA(residual_add(x.as<bf16_t>(), r.as<bf16_t>(), y.as<bf16_t>(), rows * p.hidden, st)); }, s, t);
    } else if (p.op == "silu_mul") {
      DeviceBuffer gu(rows * 2 * p.ffn * 2), y(rows * p.ffn * 2);
      fill(gu, s, 4.0f);
      ms = time_per_call_ms([&](cudaStream_t st) { CAL_CUDA(silu_mul(gu.as<bf16_t>(), y.as<bf16_t>(), p.tokens, p.ffn, st)); }, s, t);
    } else if (p.op == "rope") {
      if (p.head_dim != 128 || p.tokens > 8192) throw std::invalid_argument("rope sweep: head_dim 128 and <= 8192 tokens");
      std::vector<std::int32_t> pos(p.tokens);
      std::iota(pos.begin(), pos.end(), 0);
      DeviceBuffer x(rows * p.heads * p.head_dim * 2), y(x.bytes()), pd(pos.size() * 4), cs(rope_cs.size() * 4);
      fill(x, s);
      upload(pd, pos);
      upload(cs, rope_cs);
      ms = time_per_call_ms([&](cudaStream_t st) { CAL_CUDA(rope(x.as<bf16_t>(), y.as<bf16_t>(), pd.as<std::int32_t>(), cs.as<float>(), p.tokens, p.heads, p.head_dim, st)); }, s, t);
    } else {
      throw std::invalid_argument("unknown elementwise op " + p.op);
    }
    const auto bytes = elementwise_min_bytes(p);
    const double tbps = double(bytes) / (ms * 1e-3) / 1e12;
    progress("elementwise", i, pts.size(), fmt("%s tokens%d: %.4f ms, %.2f TB/s", p.op.c_str(), p.tokens, ms, tbps));
    table.rows.push_back({p.op, std::to_string(p.tokens), std::to_string(p.hidden), std::to_string(p.ffn),
                          std::to_string(p.heads), std::to_string(p.head_dim), format_ms(ms), std::to_string(bytes)});
    if (p.tokens == 8192) sum["elementwise_" + p.op + "_8192_TBps"] = tbps;
  }
  return table;
}

CsvTable sweep_gemm(const std::vector<GemmPoint>& pts, Gemm& gemm, const TimingOptions& t, cudaStream_t s,
                    Summary& sum) {
  auto table = make_table("gemm.csv");
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const auto& p = pts[i];
    DeviceBuffer x(std::size_t(p.m) * p.k * 2), w(std::size_t(p.n) * p.k * 2), y(std::size_t(p.m) * p.n * 2);
    fill(x, s);
    fill(w, s);
    gemm.prepare(p.m, p.k, p.n);
    const double ms = time_per_call_ms([&](cudaStream_t st) { CAL_CUDA(gemm.run(x.as<bf16_t>(), w.as<bf16_t>(), y.as<bf16_t>(), p.m, p.k, p.n, st)); }, s, t);
    const double tflops = 2.0 * p.m * p.k * p.n / (ms * 1e-3) / 1e12;
    progress("gemm", i, pts.size(), fmt("%s M%d K%d N%d: %.4f ms, %.0f TFLOP/s", p.op.c_str(), p.m, p.k, p.n, ms, tflops));
    table.rows.push_back({p.op, std::to_string(p.m), std::to_string(p.k), std::to_string(p.n), format_ms(ms)});
    auto& best = sum["gemm_TFLOPs_max"];
    best = std::max(best, tflops);
  }
  return table;
}

CsvTable sweep_d2h(const std::vector<D2hPoint>& pts, cudaStream_t s) {
  auto table = make_table("d2h.csv");
  constexpr int kWarm = 100, kIters = 2000;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const auto& p = pts[i];
    DeviceBuffer d(std::size_t(p.batch) * 8);
    CAL_CUDA(cudaMemsetAsync(d.as<void>(), 1, d.bytes(), s));
    std::vector<std::int64_t> host(p.batch);
    std::int64_t* pinned = nullptr;
    CAL_CUDA(cudaMallocHost(reinterpret_cast<void**>(&pinned), std::size_t(p.batch) * 8));
    std::vector<double> us;
    try {
      for (int it = 0; it < kWarm + kIters; ++it) {
        CAL_CUDA(cudaDeviceSynchronize());
        const auto t0 = std::chrono::steady_clock::now();
        if (p.mode == "pageable") {
          CAL_CUDA(cudaMemcpy(host.data(), d.as<void>(), d.bytes(), cudaMemcpyDeviceToHost));
        } else if (p.mode == "pinned") {
          CAL_CUDA(cudaMemcpyAsync(pinned, d.as<void>(), d.bytes(), cudaMemcpyDeviceToHost, s));
          CAL_CUDA(cudaStreamSynchronize(s));
        } else if (p.mode == "item") {
          CAL_CUDA(cudaMemcpy(host.data(), d.as<void>(), 8, cudaMemcpyDeviceToHost));
        } else {
          throw std::invalid_argument("unknown d2h mode " + p.mode);
        }
        const auto t1 = std::chrono::steady_clock::now();
        if (it >= kWarm) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
    } catch (...) {
      cudaFreeHost(pinned);
      throw;
    }
    cudaFreeHost(pinned);
    std::sort(us.begin(), us.end());
    const double med = median(us), p99 = us[static_cast<std::size_t>(0.99 * (us.size() - 1))];
    progress("d2h", i, pts.size(), fmt("batch%d %s: median %.2f us, p99 %.2f us", p.batch, p.mode.c_str(), med, p99));
    table.rows.push_back({std::to_string(p.batch), p.mode, format_us(med), format_us(p99)});
  }
  return table;
}

CsvTable measure_ceilings(Gemm& gemm, const TimingOptions& t, cudaStream_t s, Summary& sum) {
  auto table = make_table("ceilings.csv");
  {
    const std::size_t bytes = std::size_t(2) << 30;  // 2 GiB each way: far past the L2
    DeviceBuffer a(bytes), b(bytes);
    fill(a, s);
    const double ms = time_per_call_ms([&](cudaStream_t st) { CAL_CUDA(cudaMemcpyAsync(b.as<void>(), a.as<void>(), bytes, cudaMemcpyDeviceToDevice, st)); }, s, t);
    const double tbps = 2.0 * bytes / (ms * 1e-3) / 1e12;
    std::printf("  [ceilings] device copy: %.4f TB/s (read + write)\n", tbps);
    table.rows.push_back({"copy_TBps_read_plus_write", format_decimal(tbps, 4)});
    sum["copy_TBps"] = tbps;
  }
  {
    const int n = 8192;
    DeviceBuffer x(std::size_t(n) * n * 2), w(x.bytes()), y(x.bytes());
    fill(x, s);
    fill(w, s);
    gemm.prepare(n, n, n);
    const double ms = time_per_call_ms([&](cudaStream_t st) { CAL_CUDA(gemm.run(x.as<bf16_t>(), w.as<bf16_t>(), y.as<bf16_t>(), n, n, n, st)); }, s, t);
    const double tflops = 2.0 * n * double(n) * n / (ms * 1e-3) / 1e12;
    std::printf("  [ceilings] bf16 GEMM 8192^3: %.2f TFLOP/s\n", tflops);
    table.rows.push_back({"gemm_bf16_TFLOPs_8192cubed", format_decimal(tflops, 2)});
    sum["gemm_8192_TFLOPs"] = tflops;
  }
  return table;
}

}  // namespace sluice::calib::gpu
