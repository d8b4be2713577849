// CPU unit tests of the calibration harness: the float64 references against naive
// formulations and known properties, the sweep planner, the table writer and metadata.
// No GPU needed.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include "bf16.h"
#include "calibration/csv_table.h"
#include "plan.h"
#include "reference.h"
#include "tables.h"

using namespace sluice::calib;
namespace fs = std::filesystem;

namespace {

// Attention written the long way: the full score matrix with -inf where masked, exp without
// a max shift, K/V heads repeated to every query head.
std::vector<double> naive_attention(const AttentionDims& d, const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v) {
  const int D = d.head_dim;
  std::vector<double> out(q.size(), 0.0);
  for (int b = 0; b < d.batch; ++b)
    for (int h = 0; h < d.heads; ++h) {
      const int kvh = h * d.kv_heads / d.heads;
      std::vector<std::vector<double>> s(d.q_len, std::vector<double>(d.kv_len));
      for (int i = 0; i < d.q_len; ++i)
        for (int j = 0; j < d.kv_len; ++j) {
          const bool visible = !d.causal || j - (d.kv_len - d.q_len) <= i;
          double dot = 0;
          for (int x = 0; x < D; ++x)
            dot += double(q[((b * d.q_len + i) * d.heads + h) * D + x]) * k[((b * d.kv_len + j) * d.kv_heads + kvh) * D + x];
          s[i][j] = visible ? std::exp(dot / std::sqrt(double(D))) : 0.0;
        }
      for (int i = 0; i < d.q_len; ++i) {
        const double sum = std::accumulate(s[i].begin(), s[i].end(), 0.0);
        for (int j = 0; j < d.kv_len; ++j)
          for (int x = 0; x < D; ++x)
            out[((b * d.q_len + i) * d.heads + h) * D + x] +=
                s[i][j] / sum * v[((b * d.kv_len + j) * d.kv_heads + kvh) * D + x];
      }
    }
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

struct Inputs {
  std::vector<float> q, k, v;
};

Inputs random_inputs(const AttentionDims& d, unsigned seed) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.q = random_bf16_values(size_t(d.batch) * d.q_len * d.heads * d.head_dim, rng);
  in.k = random_bf16_values(size_t(d.batch) * d.kv_len * d.kv_heads * d.head_dim, rng);
  in.v = random_bf16_values(size_t(d.batch) * d.kv_len * d.kv_heads * d.head_dim, rng);
  return in;
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("sluice_calibrate_cpu_" + std::to_string(::getpid()));
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("bf16 rounds to nearest even and keeps NaN") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(bf16_to_float(0x3f80) == 1.0f);
  CHECK(round_bf16(1.0f + std::ldexp(1.0f, -8)) == 1.0f);                                // tie -> even
  CHECK(round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 1.0f + std::ldexp(1.0f, -6));   // tie -> even
  CHECK(round_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12)) == 1.0f + std::ldexp(1.0f, -7));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  CHECK(std::isnan(bf16_to_float(0xffff)));  // the poison the GPU checks fill outputs with
}

TEST_CASE("random inputs are bf16-exact, bounded and never zero") {
  std::mt19937_64 rng(7);
  const auto v = random_bf16_values(10000, rng, 2.0f);
  for (float x : v) {
    CHECK(x != 0.0f);
    CHECK(std::abs(x) <= 2.0f);
    CHECK(round_bf16(x) == x);
  }
  CHECK(std::count_if(v.begin(), v.end(), [](float x) { return x < 0; }) > 4000);
}

TEST_CASE("reference attention equals a naive softmax for MHA, GQA, MQA, causal, full and sliced") {
  const std::vector<AttentionDims> cases = {
      {2, 4, 4, 16, 9, 9, true},   {1, 4, 2, 8, 7, 7, false},  {1, 6, 1, 16, 5, 5, true},
      {2, 4, 2, 16, 3, 11, true},  {1, 2, 2, 64, 1, 13, true}, {1, 8, 4, 32, 6, 6, false},
  };
  unsigned seed = 1;
  for (const auto& d : cases) {
    CAPTURE(d.heads);
    CAPTURE(d.kv_heads);
    CAPTURE(d.q_len);
    CAPTURE(d.kv_len);
    CAPTURE(d.causal);
    const auto in = random_inputs(d, seed++);
    CHECK(max_abs_diff(attention_ref(d, in.q, in.k, in.v), naive_attention(d, in.q, in.k, in.v)) < 1e-12);
  }
}

TEST_CASE("causal masks: the first query sees only the first key — a slice is the tail of the full prefill") {
  AttentionDims full{1, 2, 2, 16, 12, 12, true};
  const auto in = random_inputs(full, 3);
  const auto out = attention_ref(full, in.q, in.k, in.v);
  for (int h = 0; h < 2; ++h)
    for (int x = 0; x < 16; ++x) CHECK(out[h * 16 + x] == doctest::Approx(in.v[h * 16 + x]).epsilon(1e-12));

  // The last 5 queries after a prefix of 7, alone, give the same rows as the full causal run.
  AttentionDims slice{1, 2, 2, 16, 5, 12, true};
  std::vector<float> q_tail(in.q.begin() + 7 * 2 * 16, in.q.end());
  const auto tail = attention_ref(slice, q_tail, in.k, in.v);
  const std::vector<double> expect(out.begin() + 7 * 2 * 16, out.end());
  CHECK(max_abs_diff(tail, expect) < 1e-12);

  // Without the mask the first query sees every key, so its output differs.
  full.causal = false;
  const auto nc = attention_ref(full, in.q, in.k, in.v);
  CHECK(std::abs(nc[0] - out[0]) > 1e-6);
}

TEST_CASE("GQA equals MHA with each KV head repeated over its group") {
  const AttentionDims gqa{2, 8, 2, 16, 6, 6, true};
  const auto in = random_inputs(gqa, 11);
  AttentionDims mha = gqa;
  mha.kv_heads = 8;
  std::vector<float> k(size_t(2) * 6 * 8 * 16), v(k.size());
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 6; ++t)
      for (int h = 0; h < 8; ++h)
        for (int x = 0; x < 16; ++x) {
          k[((b * 6 + t) * 8 + h) * 16 + x] = in.k[((b * 6 + t) * 2 + h / 4) * 16 + x];
          v[((b * 6 + t) * 8 + h) * 16 + x] = in.v[((b * 6 + t) * 2 + h / 4) * 16 + x];
        }
  CHECK(max_abs_diff(attention_ref(gqa, in.q, in.k, in.v), attention_ref(mha, in.q, k, v)) < 1e-12);
  AttentionDims bad = gqa;
  bad.kv_heads = 3;
  CHECK_THROWS_AS(attention_ref(bad, in.q, in.k, in.v), std::invalid_argument);
}

TEST_CASE("a paged cache gathers to the contiguous one, and paged decode equals contiguous attention") {
  const int batch = 3, kvh = 2, D = 8, page = 4, heads = 6;
  const std::vector<int> lens = {5, 12, 1};
  std::mt19937_64 rng(5);
  PagedKv kv;
  kv.page_size = page;
  kv.kv_heads = kvh;
  kv.head_dim = D;
  kv.max_pages = 3;
  const int pages = batch * kv.max_pages;
  std::vector<int> perm(pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  kv.block_table.assign(perm.begin(), perm.end());
  const size_t row = size_t(kvh) * D;
  kv.k = random_bf16_values(pages * page * row, rng);
  kv.v = random_bf16_values(pages * page * row, rng);
  const auto q = random_bf16_values(size_t(batch) * heads * D, rng);
  const auto out = decode_ref(heads, kv, lens, q);
  for (int b = 0; b < batch; ++b) {
    // Contiguous copy built by walking pages by hand.
    std::vector<float> kc, vc;
    for (int t = 0; t < lens[b]; ++t) {
      const int p = perm[b * kv.max_pages + t / page];
      const size_t off = (size_t(p) * page + t % page) * row;
      kc.insert(kc.end(), kv.k.begin() + off, kv.k.begin() + off + row);
      vc.insert(vc.end(), kv.v.begin() + off, kv.v.begin() + off + row);
    }
    CHECK(paged_gather(kv, kv.k, b, lens[b]) == kc);
    const AttentionDims d{1, heads, kvh, D, 1, lens[b], true};
    const std::vector<float> qb(q.begin() + b * heads * D, q.begin() + (b + 1) * heads * D);
    const auto ref = attention_ref(d, qb, kc, vc);
    const std::vector<double> got(out.begin() + b * heads * D, out.begin() + (b + 1) * heads * D);
    CHECK(max_abs_diff(got, ref) < 1e-12);
  }
  // A sequence of one token returns its value row.
  CHECK(out[2 * heads * D] == doctest::Approx(paged_gather(kv, kv.v, 2, 1)[0]).epsilon(1e-12));
  CHECK_THROWS_AS(paged_gather(kv, kv.k, 0, 13), std::invalid_argument);
}

TEST_CASE("rmsnorm has unit rms with unit weight and ignores the scale of its input") {
  std::mt19937_64 rng(9);
  const int hidden = 64;
  auto x = random_bf16_values(3 * hidden, rng);
  std::vector<float> w(hidden, 1.0f);
  const auto y = rmsnorm_ref(x, w, hidden, 1e-12);
  for (int r = 0; r < 3; ++r) {
    double ss = 0;
    for (int i = 0; i < hidden; ++i) ss += y[r * hidden + i] * y[r * hidden + i];
    CHECK(std::sqrt(ss / hidden) == doctest::Approx(1.0).epsilon(1e-9));
  }
  std::vector<float> x2(x.size());
  std::transform(x.begin(), x.end(), x2.begin(), [](float v) { return 4 * v; });
  CHECK(max_abs_diff(rmsnorm_ref(x2, w, hidden, 1e-12), y) < 1e-9);
  std::vector<float> w2(hidden, 0.5f);
  CHECK(rmsnorm_ref(x, w2, hidden, 1e-12)[5] == doctest::Approx(y[5] / 2));
}

TEST_CASE("rope: position 0 is the identity, norms are kept, and q.k depends only on the distance") {
  std::mt19937_64 rng(13);
  const int heads = 2, D = 16;
  const auto q = random_bf16_values(heads * D, rng), k = random_bf16_values(heads * D, rng);
  const std::vector<int> p0 = {0};
  const auto r0 = rope_ref(q, p0, heads, D, 10000);
  for (int i = 0; i < heads * D; ++i) CHECK(r0[i] == doctest::Approx(q[i]));
  auto rot = [&](const std::vector<float>& x, int pos) { return rope_ref(x, std::vector<int>{pos}, heads, D, 10000); };
  auto dot = [&](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (int i = 0; i < D; ++i) s += a[i] * b[i];  // head 0
    return s;
  };
  const auto q7 = rot(q, 7);
  double n0 = 0, n7 = 0;
  for (int i = 0; i < D; ++i) n0 += double(q[i]) * q[i], n7 += q7[i] * q7[i];
  CHECK(n7 == doctest::Approx(n0).epsilon(1e-12));
  CHECK(dot(rot(q, 10), rot(k, 3)) == doctest::Approx(dot(rot(q, 107), rot(k, 100))).epsilon(1e-9));
  CHECK(dot(rot(q, 10), rot(k, 3)) != doctest::Approx(dot(rot(q, 10), rot(k, 4))).epsilon(1e-9));
}

TEST_CASE("silu_mul, residual_add and gemm references give known values") {
  const std::vector<float> gu = {1.0f, -20.0f, 2.0f, 3.0f};  // one row, ffn 2: g = (1, -20), u = (2, 3)
  const auto y = silu_mul_ref(gu, 2);
  REQUIRE(y.size() == 2);
  CHECK(y[0] == doctest::Approx(2.0 / (1.0 + std::exp(-1.0))));
  CHECK(std::abs(y[1]) < 1e-6);
  CHECK(residual_add_ref(std::vector<float>{1.5f, -2.0f}, std::vector<float>{0.25f, 2.0f}) ==
        std::vector<double>{1.75, 0.0});
  // x [2][3], W [2][3]: y = x W^T.
  const std::vector<float> x = {1, 2, 3, 4, 5, 6}, w = {1, 0, -1, 2, 1, 0};
  CHECK(gemm_ref(x, w, 2, 3, 2) == std::vector<double>{-2, 4, -2, 13});
}

TEST_CASE("relative error is zero when equal, known when off, and infinite on NaN") {
  const std::vector<double> ref = {3, 4};
  CHECK(relative_error(std::vector<float>{3, 4}, ref) == 0.0);
  CHECK(relative_error(std::vector<float>{3, 4.5f}, ref) == doctest::Approx(0.1));
  CHECK(std::isinf(relative_error(std::vector<float>{3, std::nanf("")}, ref)));
  CHECK(std::isinf(relative_error(std::vector<float>{3}, ref)));
  CHECK(has_non_finite(std::vector<float>{1, INFINITY}));
  CHECK_FALSE(has_non_finite(std::vector<float>{1, 2}));
}

TEST_CASE("the planner covers the reference points and skips invalid ones with a reason") {
  const auto plan = make_plan({});
  auto has_prefill = [&](PrefillPoint p) {
    return std::any_of(plan.prefill.begin(), plan.prefill.end(), [&](const PrefillPoint& x) {
      return x.heads == p.heads && x.kv_heads == p.kv_heads && x.head_dim == p.head_dim && x.seq == p.seq &&
             x.causal == p.causal && x.batch == p.batch;
    });
  };
  CHECK(has_prefill({32, 8, 128, 1, 16384, true}));
  CHECK(has_prefill({32, 1, 64, 1, 550, false}));
  CHECK(plan.prefill.size() == 2 * 3 * 2 * 7);
  CHECK(plan.slice.size() == 36);
  CHECK(plan.elementwise.size() == 24);
  CHECK(plan.d2h.size() == 12);
  // MHA at batch 128 over 32k tokens needs about 69 GB of KV cache: over the 60 GB budget.
  auto decode_has = [&](int kvh, int d, int b, int l) {
    return std::any_of(plan.decode.begin(), plan.decode.end(), [&](const DecodePoint& x) {
      return x.kv_heads == kvh && x.head_dim == d && x.batch == b && x.kv_len == l;
    });
  };
  CHECK(decode_has(8, 128, 128, 32768));
  CHECK(decode_has(32, 128, 128, 16384));
  CHECK_FALSE(decode_has(32, 128, 128, 32768));
  REQUIRE(plan.skipped.size() == 1);
  CHECK(plan.skipped[0].find("memory budget") != std::string::npos);
  CHECK(plan.skipped[0].find("kv_len=32768") != std::string::npos);
  // With a larger budget the point is planned.
  PlanOptions big;
  big.memory_budget_bytes = 100e9;
  CHECK(make_plan(big).skipped.empty());

  CHECK(why_invalid(PrefillPoint{32, 5, 128, 1, 128, true}, 1e12) == "kv_heads does not divide heads");
  CHECK(why_invalid(DecodePoint{32, 8, 96, 1, 128}, 1e12) == "head_dim must be 64 or 128");
  CHECK(why_invalid(SlicePoint{32, 128, 0, 16}, 1e12).find("slice must be positive") == 0);
  CHECK(why_invalid(DecodePoint{32, 8, 128, 8, 1024}, 1e12).empty());

  // Every point appears once.
  std::set<std::tuple<int, int, int, int, int>> seen;
  for (const auto& p : plan.decode) CHECK(seen.insert({p.kv_heads, p.head_dim, p.batch, p.kv_len, p.heads}).second);

  const auto quick = make_plan({true, 60e9});
  CHECK(quick.prefill.size() < plan.prefill.size() / 4);
  CHECK_FALSE(quick.gemm.empty());
}

TEST_CASE("catalog GEMM shapes follow the models and tensor parallelism") {
  const auto shapes = catalog_linear_shapes();
  auto find = [&](const std::string& op) {
    auto it = std::find_if(shapes.begin(), shapes.end(), [&](const LinearShape& s) { return s.op == op; });
    REQUIRE(it != shapes.end());
    return *it;
  };
  CHECK(find("llama7b.qkv").n == 3 * 4096);
  CHECK(find("llama8b.qkv").n == (32 + 2 * 8) * 128);
  CHECK(find("llama70b.tp8.qkv").n == 1280);
  CHECK(find("llama70b.tp4.down").k == 7168);
  CHECK(find("lm_head32k").n == 32000);
  const auto plan = make_plan({});
  CHECK(plan.gemm.size() == shapes.size() * 7);
}

TEST_CASE("attention FLOPs count only visible pairs — min bytes match the reference tables") {
  CHECK(attention_flops(1, 1, 1, 4, 4, false) == 4.0 * 16);
  CHECK(attention_flops(1, 1, 1, 4, 4, true) == 4.0 * 10);   // 1 + 2 + 3 + 4
  CHECK(attention_flops(1, 1, 1, 2, 5, true) == 4.0 * 9);    // 4 + 5
  CHECK(attention_flops(2, 32, 128, 16384, 16384, true) == doctest::Approx(2 * 4.0 * 32 * 128 * 16384.0 * 16385 / 2));
  // min_bytes of the h200-torch elementwise table at one token.
  CHECK(elementwise_min_bytes({"rmsnorm", 1, 4096, 11008, 32, 128}) == 16384);
  CHECK(elementwise_min_bytes({"residual_add", 1, 4096, 11008, 32, 128}) == 24576);
  CHECK(elementwise_min_bytes({"silu_mul", 1, 4096, 11008, 32, 128}) == 66048);
  CHECK(elementwise_min_bytes({"rope", 8192, 4096, 11008, 32, 128}) == 134217728);
  CHECK(decode_min_bytes({32, 8, 128, 1, 1024}) == 2.0 * 1024 * 8 * 128 * 2 + 2.0 * 32 * 128 * 2);
}

TEST_CASE("the writer emits the reference CSV columns, meta.json and README.md atomically") {
  CHECK(format_ms(0.0318) == "0.0318");
  CHECK(format_ms(3.458048) == "3.458048");
  CHECK(format_ms(0.00723849) == "0.007238");
  CHECK(format_ms(2.0) == "2.0");
  CHECK(format_us(11.6244) == "11.624");
  CHECK(format_bool(true) == "True");
  CHECK_THROWS_AS(format_ms(std::nan("")), std::invalid_argument);

  // The header lines of results/calibration/h200-torch, verbatim.
  const std::map<std::string, std::string> reference_headers = {
      {"attention_decode.csv", "heads,kv_heads,head_dim,batch,kv_len,ms"},
      {"attention_prefill.csv", "heads,kv_heads,head_dim,batch,seq,causal,ms"},
      {"attention_slice.csv", "heads,head_dim,slice,prefix,ms"},
      {"ceilings.csv", "metric,value"},
      {"d2h.csv", "batch,mode,us_median,us_p99"},
      {"elementwise.csv", "op,tokens,hidden,ffn,heads,head_dim,ms,min_bytes"},
      {"gemm.csv", "op,M,K,N,ms"},
  };
  CHECK(table_schemas().size() == reference_headers.size());

  std::vector<std::pair<std::string, CsvTable>> tables;
  for (const auto& [file, cols] : table_schemas()) tables.emplace_back(file, make_table(file));
  auto& prefill = tables[2].second;
  prefill.rows.push_back({"32", "8", "128", "1", "16384", format_bool(true), format_ms(3.4)});
  auto& d2h = tables[6].second;
  d2h.rows.push_back({"1", "pinned", format_us(12.0), format_us(30.25)});

  Metadata meta;
  meta.device_name = "NVIDIA H200";
  meta.sm_count = 132;
  meta.driver_version = "580.159";
  meta.cuda_runtime_version = "13.0";
  meta.date_utc = utc_now_iso8601();
  meta.summary["decode_best_TBps"] = 3.9;
  meta.checks.push_back({{"kernel", "prefill"}, {"rel_error", "0.004"}, {"pass", "true"}});
  TempDir tmp;
  write_tables_dir(tmp.path, tables, meta);

  for (const auto& [file, header] : reference_headers) {
    std::ifstream in(tmp.path / file);
    std::string first;
    std::getline(in, first);
    CHECK(first == header);
  }
  const auto back = sluice::calibration::read_csv(tmp.path / "attention_prefill.csv");
  REQUIRE(back.rows.size() == 1);
  CHECK(back.rows[0][5] == "True");
  CHECK(back.rows[0][6] == "3.4");
  std::ifstream mj(tmp.path / "meta.json");
  std::stringstream ss;
  ss << mj.rdbuf();
  const std::string json = ss.str();
  for (const char* key : {"\"device\"", "\"name\": \"NVIDIA H200\"", "\"sm_count\": 132", "\"driver_version\": \"580.159\"",
                          "\"cuda_runtime_version\": \"13.0\"", "\"date_utc\"", "\"sm_clock_mhz\"", "\"decode_best_TBps\": 3.9",
                          "\"attention_prefill.csv\": 1", "\"checks\""})
    CHECK_MESSAGE(json.find(key) != std::string::npos, key);
  CHECK(fs::exists(tmp.path / "README.md"));
  for (const auto& e : fs::directory_iterator(tmp.path)) CHECK(e.path().extension() != ".tmp");

  // A row that does not fit its table is refused, and nothing is half-written.
  prefill.rows.push_back({"32", "8"});
  CHECK_THROWS_AS(write_tables_dir(tmp.path / "bad", tables, meta), std::invalid_argument);
  CHECK_FALSE(fs::exists(tmp.path / "bad"));
  CHECK_THROWS_AS(make_table("nope.csv"), std::invalid_argument);
}

TEST_CASE("device names become directory names") {
  CHECK(device_slug("NVIDIA H200") == "h200");
  CHECK(device_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3");
  CHECK(device_slug("  ") == "unknown-device");
  CHECK(device_slug("Tesla V100-SXM2-16GB") == "tesla-v100-sxm2-16gb");
}
