// Reading and interpolating the measured cost tables; see tables.h for the rules.
#include "hardware/tables.h"

#include "config/paths.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sluice::costtab {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kMsToNs = 1e6;

bool same(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(a)); }

// FLOPs and bytes of one attention call: l queries over c cached keys plus their own l keys
// (causal: each query sees the prefix and the new keys up to itself).
double attn_roof_ns(double l, double c, double heads, double kv_heads, double head_dim, bool causal, const Ceilings& ce) {
  const double pairs = causal ? l * c + l * (l + 1) / 2 : l * (c + l);
  const double flops = 4 * head_dim * heads * pairs;
  const double bytes = 2 * head_dim * (2 * l * heads + 2 * (c + l) * kv_heads);
  return roof_ns(flops, bytes, ce);
}

double gemm_roof_ns(double M, double K, double N, double elem_bytes, const Ceilings& c) {
  return roof_ns(2 * M * K * N, elem_bytes * (M * K + K * N + M * N), c);
}

// Roofline-normalised interpolation over a size axis: the measured time over the roofline
// time (the kernel's inefficiency, which varies slowly) is interpolated in log-log between
// the neighbouring knots and multiplied back by the roofline at x. This follows the knee
// where a kernel turns from bandwidth- to compute-bound, which plain log-log interpolation
// of time cuts across (gemm.csv M=512: 26% -> 3% error). The result is clamped between
// the neighbours' measured times, so it is exact at the knots and monotone between them.
// Beyond the knots the end ratio is held: the roofline-ratio scaling of the edge point.
template <class Roof>
double roof_interp(const Curve& c, double x, Roof roof, bool* outside) {
  const auto& xs = c.xs();
  const auto& ys = c.ys();
  const size_t n = xs.size();
  if (x < xs.front() || x > xs.back()) {
    *outside = true;
    const size_t e = x < xs.front() ? 0 : n - 1;
    return ys[e] * roof(x) / roof(xs[e]);
  }
  if (n == 1) return ys[0];
  const size_t i = std::min(n - 2, static_cast<size_t>(std::upper_bound(xs.begin(), xs.end(), x) - xs.begin()) - 1);
  if (x == xs[i]) return ys[i];
  if (x == xs[i + 1]) return ys[i + 1];
  const double e0 = std::log(ys[i] / roof(xs[i])), e1 = std::log(ys[i + 1] / roof(xs[i + 1]));
  const double u = std::log(x / xs[i]) / std::log(xs[i + 1] / xs[i]);
  const double t = roof(x) * std::exp(e0 + u * (e1 - e0));
  return std::clamp(t, std::min(ys[i], ys[i + 1]), std::max(ys[i], ys[i + 1]));
}
}  // namespace

double roof_ns(double flops, double bytes, const Ceilings& c) {
  const double a = c.flops > 0 ? flops / c.flops : 0;
  const double b = c.bytes_per_s > 0 ? bytes / c.bytes_per_s : 0;
  return 1e9 * std::max(a, b);
}

// ---------------------------------------------------------------- CSV

int Csv::col(const std::string& name) const {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return static_cast<int>(i);
  throw std::runtime_error(fmt::format("{}: no column '{}' (columns: {})", path, name, fmt::join(header, ", ")));
}

const std::string& Csv::text(size_t row, int c) const { return rows.at(row).at(static_cast<size_t>(c)); }

// Columns the cost model narrows to int (shapes, counts), and the timing columns: a hostile
// or corrupt table must fail here, naming its file and line, not as undefined behaviour in a
// cast or an infinite kernel time mid-run.
static bool is_count_column(const std::string& c) {
  for (const char* n : {"heads", "kv_heads", "head_dim", "batch", "M", "K", "N", "seq", "kv_len", "slice", "prefix",
                        "tokens", "hidden", "ffn"})
    if (c == n) return true;
  return false;
}
static bool is_time_column(const std::string& c) { return c == "ms" || c == "us_median" || c == "us_p99"; }

double Csv::num(size_t row, int c) const {
  const std::string& t = text(row, c);
  const std::string& name = header[static_cast<size_t>(c)];
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  // strtod also reads hex floats, "inf" and "nan"; a table holds plain decimals.
  const bool decimal = !t.empty() && t.find_first_not_of("0123456789.eE+-") == std::string::npos;
  if (!decimal || end != t.c_str() + t.size() || !std::isfinite(v))
    throw std::runtime_error(fmt::format("{}:{}: column '{}' is '{}', not a number", path, lines[row], name, t));
  constexpr double kMaxCount = 1 << 24;  // beyond any head count, head size, batch or token count measured
  if (is_count_column(name) && (std::floor(v) != v || v > kMaxCount))
    throw std::runtime_error(fmt::format("{}:{}: column '{}' is {}, but must be a whole number at most {:.0f}", path,
                                         lines[row], name, t, kMaxCount));
  const double max_time = name == "ms" ? 3.6e6 : 3.6e9;  // one hour, in ms or us
  if (is_time_column(name) && v > max_time)
    throw std::runtime_error(fmt::format("{}:{}: column '{}' is {}, more than an hour for one kernel", path, lines[row],
                                         name, t));
  // Times and sizes are positive; only a cached prefix may be zero. A zero time would turn
  // into 0 or NaN in the log-space interpolation.
  const bool zero_ok = header[static_cast<size_t>(c)] == "prefix";
  if (v < 0 || (v == 0 && !zero_ok))
    throw std::runtime_error(fmt::format("{}:{}: column '{}' is {}, but must be {}", path, lines[row],
                                         header[static_cast<size_t>(c)], t, zero_ok ? ">= 0" : "> 0"));
  return v;
}

Csv read_csv(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || std::filesystem::file_size(path, ec) > (256u << 20))
    throw std::runtime_error(fmt::format("cannot read cost table {}: not a regular file of at most 256 MiB", path));
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot read cost table {}", path));
  Csv csv;
  csv.path = path;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    if (line.back() == ',') cells.emplace_back();
    if (csv.header.empty()) {
      csv.header = std::move(cells);
      continue;
    }
    if (cells.size() != csv.header.size())
      throw std::runtime_error(fmt::format("{}:{}: {} cells, the header has {}", path, n, cells.size(), csv.header.size()));
    csv.rows.push_back(std::move(cells));
    csv.lines.push_back(n);
  }
  if (csv.header.empty()) throw std::runtime_error(fmt::format("{}: empty cost table", path));
  // Two rows of one point with different timings: which one the interpolation used would be
  // an accident of order (identical repeats are harmless).
  std::unordered_map<std::string, size_t> seen;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    std::string key, value;
    for (size_t c = 0; c < csv.header.size(); ++c)
      (is_time_column(csv.header[c]) || csv.header[c] == "min_bytes" || csv.header[c] == "value" ? value : key) += csv.rows[r][c] + ",";
    const auto [it, fresh] = seen.emplace(key, r);
    if (!fresh && csv.rows[it->second] != csv.rows[r])
      throw std::runtime_error(fmt::format("{}:{}: the same point as line {} with a different timing", path, csv.lines[r],
                                           csv.lines[it->second]));
  }
  return csv;
}

// ---------------------------------------------------------------- Curve

Curve::Curve(std::vector<double> x, std::vector<double> y, Space space) : space_(space) {
  std::vector<std::pair<double, double>> p;
  for (size_t i = 0; i < x.size(); ++i) p.emplace_back(x[i], y[i]);
  std::sort(p.begin(), p.end());
  for (size_t i = 0; i < p.size();) {
    size_t j = i;
    double sum = 0;
    while (j < p.size() && p[j].first == p[i].first) sum += p[j++].second;
    x_.push_back(p[i].first);
    y_.push_back(sum / static_cast<double>(j - i));
    i = j;
  }
  if (space_ == Space::LogLog)
    for (size_t i = 0; i < x_.size(); ++i) {
      lx_.push_back(std::log(x_[i]));
      ly_.push_back(std::log(y_[i]));
    }
}

double Curve::eval(double x) const {
  if (x_.empty()) return kNaN;
  const size_t n = x_.size();
  if (n == 1) return y_[0];
  if (space_ == Space::LogLog) {
    if (x <= x_[0]) return y_[0];
    if (x >= x_[n - 1]) return y_[n - 1];
    const size_t i = static_cast<size_t>(std::upper_bound(x_.begin(), x_.end(), x) - x_.begin()) - 1;
    const double u = (std::log(x) - lx_[i]) / (lx_[i + 1] - lx_[i]);
    return std::exp(ly_[i] + u * (ly_[i + 1] - ly_[i]));
  }
  size_t i = 0;
  if (x >= x_[n - 1]) i = n - 2;
  else if (x > x_[0]) i = static_cast<size_t>(std::upper_bound(x_.begin(), x_.end(), x) - x_.begin()) - 1;
  const double v = y_[i] + (x - x_[i]) * (y_[i + 1] - y_[i]) / (x_[i + 1] - x_[i]);
  const double end = x < x_[0] ? y_[0] : x > x_[n - 1] ? y_[n - 1] : 0;
  return std::max(v, 0.5 * end);
}

// ---------------------------------------------------------------- GEMM

namespace {
// Sorts (x, y) by x and makes y non-decreasing: a larger problem never costs less. Measured
// tables carry noise at the launch floor (llama8b.qkv: M=1 14.9 us, M=8 13.9 us) that exact
// interpolation would otherwise copy into a cost that falls as a batch grows.
void make_monotone(std::vector<double>& x, std::vector<double>& y) {
  std::vector<size_t> idx(x.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> xs, ys;
  for (size_t i : idx) {
    xs.push_back(x[i]);
    ys.push_back(ys.empty() ? y[i] : std::max(ys.back(), y[i]));
  }
  x = std::move(xs);
  y = std::move(ys);
}
}  // namespace

GemmTable GemmTable::from_csv(const Csv& csv, long skip_row) {
  const int op = csv.col("op"), cm = csv.col("M"), ck = csv.col("K"), cn = csv.col("N"), ms = csv.col("ms");
  struct Acc {
    std::string op;
    double K, N;
    std::vector<double> m, t;
  };
  std::vector<Acc> acc;
  GemmTable g;
  g.floor_ns_ = std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    if (static_cast<long>(r) == skip_row) continue;
    const double K = csv.num(r, ck), N = csv.num(r, cn), t = csv.num(r, ms) * kMsToNs;
    auto it = std::find_if(acc.begin(), acc.end(), [&](const Acc& a) { return same(a.K, K) && same(a.N, N); });
    if (it == acc.end()) {
      acc.push_back({csv.text(r, op), K, N, {}, {}});
      it = acc.end() - 1;
    }
    it->m.push_back(csv.num(r, cm));
    it->t.push_back(t);
    g.floor_ns_ = std::min(g.floor_ns_, t);
  }
  for (auto& a : acc) {
    make_monotone(a.m, a.t);
    g.shapes_.push_back({a.op, a.K, a.N, Curve(a.m, a.t, Curve::Space::LogLog)});
  }
  return g;
}

int GemmTable::nearest(double K, double N, double max_ratio) const {
  int best = -1;
  double best_d = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < shapes_.size(); ++i) {
    const auto& s = shapes_[i];
    if (same(s.K, K) && same(s.N, N)) return static_cast<int>(i);
    const double ratio = (K * N) / (s.K * s.N);
    if (ratio > max_ratio || ratio < 1 / max_ratio) continue;
    const double d = std::fabs(std::log(K / s.K)) + std::fabs(std::log(N / s.N));
    if (d < best_d) {
      best_d = d;
      best = static_cast<int>(i);
    }
  }
  return best;
}

bool GemmTable::exact(int shape, double K, double N) const {
  return shape >= 0 && same(shapes_[static_cast<size_t>(shape)].K, K) && same(shapes_[static_cast<size_t>(shape)].N, N);
}

Estimate GemmTable::estimate(int shape, double M, double K, double N, double elem_bytes, const Ceilings& c) const {
  const Shape& s = shapes_.at(static_cast<size_t>(shape));
  Estimate e;
  e.ns = roof_interp(s.t_ns, M, [&](double m) { return gemm_roof_ns(m, s.K, s.N, elem_bytes, c); }, &e.scaled);
  if (!exact(shape, K, N)) {  // another shape: scale the nearest measured one by the roofline
    e.ns *= gemm_roof_ns(M, K, N, elem_bytes, c) / gemm_roof_ns(M, s.K, s.N, elem_bytes, c);
    e.scaled = true;
  }
  if (e.scaled) e.ns = std::max(e.ns, floor_ns_);
  return e;
}

double GemmTable::predict_row(const Csv& csv, size_t row, const Ceilings& c) const {
  const double M = csv.num(row, csv.col("M")), K = csv.num(row, csv.col("K")), N = csv.num(row, csv.col("N"));
  const int s = nearest(K, N, 16);
  return s < 0 ? kNaN : estimate(s, M, K, N, 2, c).ns;
}

// ---------------------------------------------------------------- decode attention

DecodeTable DecodeTable::from_csv(const Csv& csv, long skip_row) {
  const int ch = csv.col("heads"), ckv = csv.col("kv_heads"), cd = csv.col("head_dim"), cb = csv.col("batch"),
            cl = csv.col("kv_len"), ms = csv.col("ms");
  struct Acc {
    int h, kv, d;
    std::map<double, std::vector<std::pair<double, double>>> by_batch;
  };
  std::vector<Acc> acc;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    if (static_cast<long>(r) == skip_row) continue;
    const int h = static_cast<int>(csv.num(r, ch)), kv = static_cast<int>(csv.num(r, ckv)), d = static_cast<int>(csv.num(r, cd));
    auto it = std::find_if(acc.begin(), acc.end(), [&](const Acc& a) { return a.h == h && a.kv == kv && a.d == d; });
    if (it == acc.end()) {
      acc.push_back({h, kv, d, {}});
      it = acc.end() - 1;
    }
    it->by_batch[csv.num(r, cb)].emplace_back(csv.num(r, cl), csv.num(r, ms) * kMsToNs);
  }
  DecodeTable t;
  for (auto& a : acc) {
    Group g{a.h, a.kv, a.d, {}, std::numeric_limits<double>::infinity()};
    for (auto& [batch, pts] : a.by_batch) {
      std::vector<double> x, y;
      for (auto& [l, ns] : pts) {
        x.push_back(l);
        y.push_back(ns / batch);
        g.min_ns = std::min(g.min_ns, ns);
      }
      Curve c(x, y, Curve::Space::Linear);  // sorts and merges duplicates
      Row row;
      row.batch = batch;
      row.knot = c.xs();
      const auto& v = c.ys();
      if (v.size() == 1) {
        row.a = {v[0]};
        row.b = {0};
      } else {
        for (size_t s = 0; s + 1 < v.size(); ++s) {
          const double slope = (v[s + 1] - v[s]) / (row.knot[s + 1] - row.knot[s]);
          row.b.push_back(slope);
          row.a.push_back(v[s] - slope * row.knot[s]);
        }
      }
      g.rows.push_back(std::move(row));
    }
    // A share extended below the shortest measured length stops at half the group's
    // shortest kernel spread over the row's batch.
    for (auto& row : g.rows) row.floor_ns = 0.5 * g.min_ns / row.batch;
    t.groups_.push_back(std::move(g));
  }
  return t;
}

DecodeTable::Plan DecodeTable::plan(double heads, double kv_heads, double head_dim) const {
  Plan p;
  double best = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < groups_.size(); ++i) {
    const auto& g = groups_[i];
    if (same(g.heads, heads) && same(g.kv_heads, kv_heads) && same(g.head_dim, head_dim))
      return Plan{static_cast<int>(i), 1.0, true};
    // KV bytes per token first (decode attention is bandwidth-bound), then the GQA ratio.
    const double d = std::fabs(std::log(kv_heads * head_dim / (g.kv_heads * g.head_dim))) +
                     0.5 * std::fabs(std::log((heads / kv_heads) / (static_cast<double>(g.heads) / g.kv_heads))) +
                     0.25 * std::fabs(std::log(heads * head_dim / (g.heads * g.head_dim)));
    if (d < best) {
      best = d;
      p = Plan{static_cast<int>(i), kv_heads * head_dim / (g.kv_heads * g.head_dim), false};
    }
  }
  return p;
}

double DecodeTable::longest_alone(const Group& g, const Row& lo, const Row& hi, double w, double n, double lmax) {
  const double alone = share(g.rows[0], lmax) * g.rows[0].batch;
  const double a = n * share(lo, lmax), b = n * share(hi, lmax);
  const double uniform = w > 0 ? std::exp((1 - w) * std::log(a) + w * std::log(b)) : a;
  return std::min(alone, uniform);
}

void DecodeTable::bracket(const Group& g, double n, size_t* lo, size_t* hi, double* w) const {
  const size_t last = g.rows.size() - 1;
  *w = 0;
  if (n <= g.rows[0].batch) {
    *lo = *hi = 0;
    return;
  }
  if (n >= g.rows[last].batch) {
    *lo = *hi = last;
    return;
  }
  size_t k = 0;
  while (g.rows[k + 1].batch <= n) ++k;
  *lo = k;
  *hi = k + 1;
  *w = std::log(n / g.rows[k].batch) / std::log(g.rows[k + 1].batch / g.rows[k].batch);
}

double DecodeTable::batch_ns(const Plan& p, const double* lens, long n, bool* scaled) const {
  if (n <= 0) return 0;
  const Group& g = groups_[static_cast<size_t>(p.group)];
  size_t lo = 0, hi = 0;
  double w = 0;
  bracket(g, static_cast<double>(n), &lo, &hi, &w);
  const Row& rl = g.rows[lo];
  const Row& rh = g.rows[hi];
  double s_lo = 0, s_hi = 0, lmax = 0;
  for (long i = 0; i < n; ++i) {
    const double l = lens[i];
    s_lo += share(rl, l);
    s_hi += share(rh, l);
    lmax = std::max(lmax, l);
  }
  double t = w > 0 ? std::exp((1 - w) * std::log(s_lo) + w * std::log(s_hi)) : s_lo;
  t = std::max({t, longest_alone(g, rl, rh, w, static_cast<double>(n), lmax), g.min_ns});
  if (scaled) {
    bool out = !p.exact || static_cast<double>(n) > g.rows.back().batch;
    for (long i = 0; i < n && !out; ++i)
      out = lens[i] < rl.knot.front() || lens[i] > rl.knot.back() || lens[i] < rh.knot.front() || lens[i] > rh.knot.back();
    *scaled = out;
  }
  return t;
}

double DecodeTable::predict_row(const Csv& csv, size_t row) const {
  const double h = csv.num(row, csv.col("heads")), kv = csv.num(row, csv.col("kv_heads")),
               d = csv.num(row, csv.col("head_dim")), b = csv.num(row, csv.col("batch")),
               l = csv.num(row, csv.col("kv_len"));
  const Plan p = plan(h, kv, d);
  if (p.group < 0) return kNaN;
  std::vector<double> lens(static_cast<size_t>(b), l * p.len_scale);
  return batch_ns(p, lens.data(), static_cast<long>(lens.size()), nullptr);
}

// ---------------------------------------------------------------- prefill attention

PrefillTable PrefillTable::from_csv(const Csv& csv, long skip_row) {
  const int ch = csv.col("heads"), ckv = csv.col("kv_heads"), cd = csv.col("head_dim"), cb = csv.col("batch"),
            cs = csv.col("seq"), cc = csv.col("causal"), ms = csv.col("ms");
  struct Acc {
    Group g;
    std::vector<double> x, y;
  };
  std::vector<Acc> acc;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    if (static_cast<long>(r) == skip_row) continue;
    Group key;
    key.heads = static_cast<int>(csv.num(r, ch));
    key.kv_heads = static_cast<int>(csv.num(r, ckv));
    key.head_dim = static_cast<int>(csv.num(r, cd));
    key.batch = static_cast<int>(csv.num(r, cb));
    const std::string& c = csv.text(r, cc);
    key.causal = c == "True" || c == "true" || c == "1";
    auto it = std::find_if(acc.begin(), acc.end(), [&](const Acc& a) {
      return a.g.heads == key.heads && a.g.kv_heads == key.kv_heads && a.g.head_dim == key.head_dim &&
             a.g.batch == key.batch && a.g.causal == key.causal;
    });
    if (it == acc.end()) {
      acc.push_back({key, {}, {}});
      it = acc.end() - 1;
    }
    it->x.push_back(csv.num(r, cs));
    it->y.push_back(csv.num(r, ms) * kMsToNs);
  }
  PrefillTable t;
  t.min_ns_ = std::numeric_limits<double>::infinity();
  for (auto& a : acc) {
    a.g.t_ns = Curve(a.x, a.y, Curve::Space::LogLog);
    a.g.min_ns = *std::min_element(a.y.begin(), a.y.end());
    t.min_ns_ = std::min(t.min_ns_, a.g.min_ns);
    t.groups_.push_back(std::move(a.g));
  }
  return t;
}

int PrefillTable::plan(double kv_ratio, bool causal) const {
  int best = -1;
  double best_d = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < groups_.size(); ++i) {
    const auto& g = groups_[i];
    if (g.causal != causal || g.batch != 1) continue;
    const double d = std::fabs(std::log(kv_ratio / (static_cast<double>(g.heads) / g.kv_heads)));
    if (d < best_d) {
      best_d = d;
      best = static_cast<int>(i);
    }
  }
  return best;
}

Estimate PrefillTable::estimate(int group, double l, const Ceilings& c) const {
  const Group& g = groups_.at(static_cast<size_t>(group));
  Estimate e;
  e.ns = roof_interp(g.t_ns, l, [&](double x) { return attn_roof_ns(x, 0, g.heads, g.kv_heads, g.head_dim, g.causal, c); },
                     &e.scaled);
  if (e.scaled) e.ns = std::max(e.ns, min_ns_);
  return e;
}

double PrefillTable::predict_row(const Csv& csv, size_t row, const Ceilings& c) const {
  const int h = static_cast<int>(csv.num(row, csv.col("heads"))), kv = static_cast<int>(csv.num(row, csv.col("kv_heads"))),
            d = static_cast<int>(csv.num(row, csv.col("head_dim"))), b = static_cast<int>(csv.num(row, csv.col("batch")));
  const std::string& cs = csv.text(row, csv.col("causal"));
  const bool causal = cs == "True" || cs == "true" || cs == "1";
  for (size_t i = 0; i < groups_.size(); ++i) {
    const auto& g = groups_[i];
    if (g.heads == h && g.kv_heads == kv && g.head_dim == d && g.batch == b && g.causal == causal)
      return estimate(static_cast<int>(i), csv.num(row, csv.col("seq")), c).ns;
  }
  return kNaN;
}

SliceTable SliceTable::from_csv(const Csv& csv, long skip_row) {
  const int ch = csv.col("heads"), cd = csv.col("head_dim"), cs = csv.col("slice"), cp = csv.col("prefix"),
            ms = csv.col("ms");
  std::map<double, std::pair<std::vector<double>, std::vector<double>>> by_prefix;
  SliceTable t;
  t.min_ns = std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    if (static_cast<long>(r) == skip_row) continue;
    const int h = static_cast<int>(csv.num(r, ch)), d = static_cast<int>(csv.num(r, cd));
    if (t.heads == 0) {
      t.heads = h;
      t.head_dim = d;
    } else if (h != t.heads || d != t.head_dim) {
      throw std::runtime_error(fmt::format("{}:{}: one head shape per slice table is supported ({}x{} and {}x{})",
                                           csv.path, csv.lines[r], t.heads, t.head_dim, h, d));
    }
    auto& [x, y] = by_prefix[csv.num(r, cp)];
    x.push_back(csv.num(r, cs));
    y.push_back(csv.num(r, ms) * kMsToNs);
    t.min_ns = std::min(t.min_ns, y.back());
  }
  // Monotone in the slice length within a row, and in the prefix across rows (the measured
  // 64-token slice after 4096 cached tokens took longer than after 8192).
  std::map<double, double> prev;  // slice length -> time at the previous prefix
  for (auto& [p, xy] : by_prefix) {
    make_monotone(xy.first, xy.second);
    for (size_t i = 0; i < xy.first.size(); ++i) {
      auto it = prev.find(xy.first[i]);
      if (it != prev.end()) xy.second[i] = std::max(xy.second[i], it->second);
    }
    make_monotone(xy.first, xy.second);
    for (size_t i = 0; i < xy.first.size(); ++i) prev[xy.first[i]] = xy.second[i];
    t.rows.push_back({p, Curve(xy.first, xy.second, Curve::Space::LogLog)});
  }
  return t;
}

Estimate SliceTable::estimate(double l, double c, const Ceilings& ce) const {
  Estimate e;
  auto roof = [&](double ll, double cc) { return attn_roof_ns(ll, cc, heads, heads, head_dim, true, ce); };
  auto row_at = [&](const Row& r, double ll) {
    return roof_interp(r.t_ns, ll, [&](double x) { return roof(x, r.prefix); }, &e.scaled);
  };
  const double cc = std::clamp(c, rows.front().prefix, rows.back().prefix);
  size_t k = 0;
  while (k + 1 < rows.size() && rows[k + 1].prefix <= cc) ++k;
  double t = row_at(rows[k], l);
  if (k + 1 < rows.size() && cc > rows[k].prefix) {
    const double u = (cc - rows[k].prefix) / (rows[k + 1].prefix - rows[k].prefix);
    t = (1 - u) * t + u * row_at(rows[k + 1], l);
  }
  if (cc != c) {
    t *= roof(l, c) / roof(l, cc);
    e.scaled = true;
  }
  e.ns = e.scaled ? std::max(t, min_ns) : t;
  return e;
}

double SliceTable::predict_row(const Csv& csv, size_t row, const Ceilings& c) const {
  if (rows.empty()) return kNaN;
  return estimate(csv.num(row, csv.col("slice")), csv.num(row, csv.col("prefix")), c).ns;
}

// ---------------------------------------------------------------- elementwise

ElementwiseTable ElementwiseTable::from_csv(const Csv& csv, long skip_row) {
  const int co = csv.col("op"), ct = csv.col("tokens"), ms = csv.col("ms"), cb = csv.col("min_bytes");
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> pts;
  std::map<std::string, double> bpt;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    if (static_cast<long>(r) == skip_row) continue;
    const std::string& op = csv.text(r, co);
    const double tok = csv.num(r, ct);
    pts[op].first.push_back(tok);
    pts[op].second.push_back(csv.num(r, ms) * kMsToNs);
    bpt[op] = csv.num(r, cb) / tok;
  }
  ElementwiseTable t;
  for (auto& [op, xy] : pts)
    t.ops_[op] = Op{Curve(xy.first, xy.second, Curve::Space::LogLog), bpt[op],
                    *std::min_element(xy.second.begin(), xy.second.end())};
  return t;
}

const ElementwiseTable::Op* ElementwiseTable::find(const std::string& op) const {
  auto it = ops_.find(op);
  return it == ops_.end() ? nullptr : &it->second;
}

Estimate ElementwiseTable::estimate(const Op& op, double tokens, double bytes_per_token) const {
  const double teq = tokens * bytes_per_token / op.bytes_per_token;  // same traffic
  Estimate e{0, !same(bytes_per_token, op.bytes_per_token)};
  const double tc = op.t_ns.clamp(teq);
  e.ns = op.t_ns.eval(tc);
  if (tc != teq) {
    e.scaled = true;
    if (teq > tc) e.ns *= teq / tc;  // bandwidth-bound beyond the largest measured size
  }
  return e;
}

double ElementwiseTable::predict_row(const Csv& csv, size_t row) const {
  const Op* op = find(csv.text(row, csv.col("op")));
  if (!op) return kNaN;
  return estimate(*op, csv.num(row, csv.col("tokens")), op->bytes_per_token).ns;
}

// ---------------------------------------------------------------- d2h

D2hTable D2hTable::from_csv(const Csv& csv, long skip_row) {
  const int cb = csv.col("batch"), cm = csv.col("mode"), cu = csv.col("us_median");
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> pts;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    if (static_cast<long>(r) == skip_row) continue;
    auto& [x, y] = pts[csv.text(r, cm)];
    x.push_back(csv.num(r, cb));
    y.push_back(csv.num(r, cu));
  }
  D2hTable t;
  for (auto& [m, xy] : pts) t.modes_[m] = Curve(xy.first, xy.second, Curve::Space::LogLog);
  return t;
}

double D2hTable::us_median(const std::string& mode, double batch) const {
  auto it = modes_.find(mode);
  return it == modes_.end() ? -1 : it->second.eval(batch);
}

double D2hTable::predict_row(const Csv& csv, size_t row) const {
  const double v = us_median(csv.text(row, csv.col("mode")), csv.num(row, csv.col("batch")));
  return v < 0 ? kNaN : v;
}

// ---------------------------------------------------------------- leave-one-out

namespace {
// Fills a leave-one-out summary's row count, median, p90 and max from its relative errors.
LooStats with_errors(LooStats s, std::vector<double> errs) {
  s.rows = static_cast<long>(errs.size());
  if (errs.empty()) return s;
  std::sort(errs.begin(), errs.end());
  const size_t n = errs.size();
  s.median = n % 2 ? errs[n / 2] : 0.5 * (errs[n / 2 - 1] + errs[n / 2]);
  s.p90 = errs[static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n))) - 1];
  s.max = errs.back();
  return s;
}
template <class Build, class Predict>
LooStats loo(const Csv& csv, const std::string& file, const std::string& measured_col, double to_pred_unit, Build build,
             Predict predict) {
  LooStats s;
  s.file = file;
  std::vector<double> errs;
  const int cm = csv.col(measured_col);
  double worst = -1;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    const auto table = build(static_cast<long>(r));
    const double pred = predict(table, r);
    const double meas = csv.num(r, cm) * to_pred_unit;
    if (!std::isfinite(pred) || meas <= 0) continue;
    const double err = std::fabs(pred - meas) / meas;
    errs.push_back(err);
    if (err > worst) {
      worst = err;
      std::string row;
      for (size_t c = 0; c < csv.header.size(); ++c)
        row += fmt::format("{}{}={}", c ? " " : "", csv.header[c], csv.rows[r][c]);
      s.worst = fmt::format("{} (predicted {:.6g})", row, pred / to_pred_unit);
    }
  }
  return with_errors(std::move(s), std::move(errs));
}
}  // namespace

LooStats gemm_leave_shape_out(const Csv& csv, const Ceilings& c, double max_ratio) {
  LooStats s;
  s.file = "gemm.csv by shape";
  const int ck = csv.col("K"), cn = csv.col("N"), cm = csv.col("M"), ms = csv.col("ms"), co = csv.col("op");
  std::vector<double> errs;
  double worst = -1;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    const double K = csv.num(r, ck), N = csv.num(r, cn), M = csv.num(r, cm);
    Csv others = csv;
    others.rows.clear();
    others.lines.clear();
    for (size_t q = 0; q < csv.rows.size(); ++q)
      if (!(same(csv.num(q, ck), K) && same(csv.num(q, cn), N))) {
        others.rows.push_back(csv.rows[q]);
        others.lines.push_back(csv.lines[q]);
      }
    const GemmTable t = GemmTable::from_csv(others);
    const int shape = t.nearest(K, N, max_ratio);
    if (shape < 0) continue;  // no measured shape near enough: the roofline would answer
    const double pred = t.estimate(shape, M, K, N, 2, c).ns, meas = csv.num(r, ms) * kMsToNs;
    const double err = std::fabs(pred - meas) / meas;
    errs.push_back(err);
    if (err > worst) {
      worst = err;
      s.worst = fmt::format("op={} M={} K={} N={} ms={} (predicted {:.6g} from {})", csv.text(r, co), csv.text(r, cm),
                            csv.text(r, ck), csv.text(r, cn), csv.text(r, ms), pred / kMsToNs,
                            t.shapes()[static_cast<size_t>(shape)].op);
    }
  }
  return with_errors(std::move(s), std::move(errs));
}

std::vector<LooStats> leave_one_out(const std::string& dir, const Ceilings& c) {
  namespace fs = std::filesystem;
  std::vector<LooStats> out;
  auto path = [&](const char* f) { return (fs::path(dir) / f).string(); };
  auto have = [&](const char* f) { return sluice::path_exists(path(f)); };
  if (have("gemm.csv")) {
    const Csv csv = read_csv(path("gemm.csv"));
    out.push_back(loo(csv, "gemm.csv", "ms", kMsToNs, [&](long r) { return GemmTable::from_csv(csv, r); },
                      [&](const GemmTable& t, size_t r) { return t.predict_row(csv, r, c); }));
    out.push_back(gemm_leave_shape_out(csv, c, 16));
  }
  if (have("attention_decode.csv")) {
    const Csv csv = read_csv(path("attention_decode.csv"));
    out.push_back(loo(csv, "attention_decode.csv", "ms", kMsToNs, [&](long r) { return DecodeTable::from_csv(csv, r); },
                      [&](const DecodeTable& t, size_t r) { return t.predict_row(csv, r); }));
  }
  if (have("attention_prefill.csv")) {
    const Csv csv = read_csv(path("attention_prefill.csv"));
    out.push_back(loo(csv, "attention_prefill.csv", "ms", kMsToNs,
                      [&](long r) { return PrefillTable::from_csv(csv, r); },
                      [&](const PrefillTable& t, size_t r) { return t.predict_row(csv, r, c); }));
  }
  if (have("attention_slice.csv")) {
    const Csv csv = read_csv(path("attention_slice.csv"));
    out.push_back(loo(csv, "attention_slice.csv", "ms", kMsToNs, [&](long r) { return SliceTable::from_csv(csv, r); },
                      [&](const SliceTable& t, size_t r) { return t.predict_row(csv, r, c); }));
  }
  if (have("elementwise.csv")) {
    const Csv csv = read_csv(path("elementwise.csv"));
    out.push_back(loo(csv, "elementwise.csv", "ms", kMsToNs,
                      [&](long r) { return ElementwiseTable::from_csv(csv, r); },
                      [&](const ElementwiseTable& t, size_t r) { return t.predict_row(csv, r); }));
  }
  if (have("d2h.csv")) {
    const Csv csv = read_csv(path("d2h.csv"));
    out.push_back(loo(csv, "d2h.csv", "us_median", 1.0, [&](long r) { return D2hTable::from_csv(csv, r); },
                      [&](const D2hTable& t, size_t r) { return t.predict_row(csv, r); }));
  }
  return out;
}

}  // namespace sluice::costtab
