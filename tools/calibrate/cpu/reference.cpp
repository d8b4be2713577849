#include "reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "bf16.h"

namespace sluice::calib {

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

void check_dims(const AttentionDims& d) {
  require(d.batch > 0 && d.heads > 0 && d.kv_heads > 0 && d.head_dim > 0 && d.q_len > 0 && d.kv_len > 0,
          "attention dims must be positive");
  require(d.heads % d.kv_heads == 0, "kv_heads must divide heads");
  require(d.q_len <= d.kv_len, "q_len must not exceed kv_len (the new tokens are part of the KV)");
}

}  // namespace

std::vector<double> attention_ref(const AttentionDims& d, std::span<const float> q, std::span<const float> k,
                                  std::span<const float> v) {
  check_dims(d);
  const std::size_t D = d.head_dim;
  require(q.size() == std::size_t(d.batch) * d.q_len * d.heads * D, "q has the wrong size");
  require(k.size() == std::size_t(d.batch) * d.kv_len * d.kv_heads * D, "k has the wrong size");
  require(v.size() == k.size(), "v has the wrong size");
  const int group = d.heads / d.kv_heads;
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> out(q.size());
  std::vector<double> s(d.kv_len);
  for (int b = 0; b < d.batch; ++b)
    for (int i = 0; i < d.q_len; ++i)
      for (int h = 0; h < d.heads; ++h) {
        const int kvh = h / group;
        const float* qr = &q[((std::size_t(b) * d.q_len + i) * d.heads + h) * D];
        const int last = d.causal ? d.kv_len - d.q_len + i : d.kv_len - 1;  // last visible key
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j <= last; ++j) {
          const float* kr = &k[((std::size_t(b) * d.kv_len + j) * d.kv_heads + kvh) * D];
          double dot = 0;
          for (std::size_t x = 0; x < D; ++x) dot += double(qr[x]) * double(kr[x]);
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j <= last; ++j) {
          s[j] = std::exp(s[j] - mx);
          sum += s[j];
        }
        double* o = &out[((std::size_t(b) * d.q_len + i) * d.heads + h) * D];
        for (int j = 0; j <= last; ++j) {
          const float* vr = &v[((std::size_t(b) * d.kv_len + j) * d.kv_heads + kvh) * D];
          const double p = s[j] / sum;
          for (std::size_t x = 0; x < D; ++x) o[x] += p * double(vr[x]);
        }
      }
  return out;
}

std::vector<float> paged_gather(const PagedKv& kv, std::span<const float> cache, int b, int len) {
  require(len >= 0 && len <= kv.max_pages * kv.page_size, "sequence longer than its block table");
  const std::size_t row = std::size_t(kv.kv_heads) * kv.head_dim;
  std::vector<float> out(std::size_t(len) * row);
  for (int t = 0; t < len; ++t) {
    const int page = kv.block_table[std::size_t(b) * kv.max_pages + t / kv.page_size];
    const std::size_t src = (std::size_t(page) * kv.page_size + t % kv.page_size) * row;
    require(src + row <= cache.size(), "block table points past the cache");
    std::copy_n(cache.begin() + src, row, out.begin() + std::size_t(t) * row);
  }
  return out;
}

std::vector<double> decode_ref(int heads, const PagedKv& kv, std::span<const int> lens, std::span<const float> q) {
  const int batch = static_cast<int>(lens.size());
  const std::size_t D = kv.head_dim;
  require(q.size() == std::size_t(batch) * heads * D, "q has the wrong size");
  std::vector<double> out(q.size());
  for (int b = 0; b < batch; ++b) {
    require(lens[b] > 0, "every sequence needs at least one cached token");
    AttentionDims d{1, heads, kv.kv_heads, kv.head_dim, 1, lens[b], true};
    const auto kb = paged_gather(kv, kv.k, b, lens[b]);
    const auto vb = paged_gather(kv, kv.v, b, lens[b]);
    const auto o = attention_ref(d, q.subspan(std::size_t(b) * heads * D, heads * D), kb, vb);
    std::copy(o.begin(), o.end(), out.begin() + std::size_t(b) * heads * D);
  }
  return out;
}

std::vector<double> rmsnorm_ref(std::span<const float> x, std::span<const float> w, int hidden, double eps) {
  require(hidden > 0 && x.size() % hidden == 0 && w.size() == std::size_t(hidden), "rmsnorm shapes");
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / hidden; ++r) {
    double ss = 0;
    for (int i = 0; i < hidden; ++i) ss += double(x[r * hidden + i]) * x[r * hidden + i];
    const double inv = 1.0 / std::sqrt(ss / hidden + eps);
    for (int i = 0; i < hidden; ++i) y[r * hidden + i] = double(x[r * hidden + i]) * inv * w[i];
  }
  return y;
}

std::vector<double> rope_ref(std::span<const float> x, std::span<const int> pos, int heads, int head_dim,
                             double base) {
  require(head_dim % 2 == 0 && x.size() == pos.size() * heads * head_dim, "rope shapes");
  const int half = head_dim / 2;
  std::vector<double> y(x.size());
  for (std::size_t t = 0; t < pos.size(); ++t)
    for (int h = 0; h < heads; ++h) {
      const std::size_t o = (t * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const double ang = pos[t] * std::pow(base, -2.0 * i / head_dim);
        const double c = std::cos(ang), s = std::sin(ang);
        const double a = x[o + i], b = x[o + i + half];
        y[o + i] = a * c - b * s;
        y[o + i + half] = b * c + a * s;
      }
    }
  return y;
}

std::vector<double> silu_mul_ref(std::span<const float> gu, int ffn) {
  require(ffn > 0 && gu.size() % (2 * std::size_t(ffn)) == 0, "silu_mul shapes");
  const std::size_t rows = gu.size() / (2 * std::size_t(ffn));
  std::vector<double> y(rows * ffn);
  for (std::size_t r = 0; r < rows; ++r)
    for (int i = 0; i < ffn; ++i) {
      const double g = gu[r * 2 * ffn + i], u = gu[r * 2 * ffn + ffn + i];
      y[r * ffn + i] = g / (1.0 + std::exp(-g)) * u;
    }
  return y;
}

std::vector<double> residual_add_ref(std::span<const float> x, std::span<const float> r) {
  require(x.size() == r.size(), "residual_add shapes");
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = double(x[i]) + double(r[i]);
  return y;
}

std::vector<double> gemm_ref(std::span<const float> x, std::span<const float> w, int m, int k, int n) {
  require(x.size() == std::size_t(m) * k && w.size() == std::size_t(n) * k, "gemm shapes");
  std::vector<double> y(std::size_t(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int p = 0; p < k; ++p) acc += double(x[std::size_t(i) * k + p]) * double(w[std::size_t(j) * k + p]);
      y[std::size_t(i) * n + j] = acc;
    }
  return y;
}

double relative_error(std::span<const float> out, std::span<const double> ref) {
  if (out.size() != ref.size() || has_non_finite(out)) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  if (den == 0) return num == 0 ? 0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

bool has_non_finite(std::span<const float> v) {
  return std::any_of(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
}

std::vector<float> random_bf16_values(std::size_t n, std::mt19937_64& rng, float scale) {
  std::uniform_real_distribution<float> mag(scale / 64, scale);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> out(n);
  for (auto& x : out) {
    const float m = mag(rng);
    x = round_bf16(sign(rng) ? m : -m);
  }
  return out;
}

}  // namespace sluice::calib
