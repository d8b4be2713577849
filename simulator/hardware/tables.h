// Measured kernel cost tables (the CSV format of results/calibration/<device>/) and how the
// cost model reads between and beyond their rows.
//
// Interpolation, the same rule everywhere unless a table says otherwise:
//  * Along a size axis (GEMM rows M, prefill length, slice length) the measured time divided
//    by the roofline time of that point (the kernel's inefficiency) is interpolated
//    piecewise-linearly in log(size)-log(ratio) between the neighbouring measured points and
//    multiplied back by the roofline: exact at every measured point, clamped between the two
//    neighbours (so monotone between them), and it follows the knee where a kernel turns from
//    bandwidth- to compute-bound. For purely bandwidth-bound ops (elementwise, d2h) this is
//    the same as log-log interpolation of time, which is what those tables use.
//  * Along a KV-length axis (decode attention) time is piecewise-linear in the length itself:
//    the work grows linearly with it, plus a fixed part; between prefixes of a slice, linear
//    in the prefix.
//  * Beyond the measured range of an axis, the nearest measured point is scaled by the ratio
//    of roofline times (max(FLOPs / F, bytes / B)) of the wanted and the measured point, so a
//    memory-bound edge scales by bytes and a compute-bound one by FLOPs. A shape that is not in
//    a table at all (another model's GEMM, another head count) is scaled the same way from the
//    nearest measured shape, or mapped to the measured shape that moves the same bytes.
//    Scaled results never go below the shortest kernel the table measured (launch floor).
#pragma once
#include <map>
#include <string>
#include <vector>

namespace sluice::costtab {

// The rate limits that scale a measured point to an unmeasured one.
struct Ceilings {
  double flops = 0;        // FLOP/s
  double bytes_per_s = 0;  // memory traffic, bytes/s
};
// max(FLOPs / F, bytes / B) in nanoseconds.
double roof_ns(double flops, double bytes, const Ceilings& c);

// A CSV file as text cells, with the line of each row for error messages.
struct Csv {
  std::string path;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<int> lines;
  int col(const std::string& name) const;             // throws if absent
  double num(size_t row, int col) const;               // throws naming path:line when not a number
  const std::string& text(size_t row, int col) const;
};
Csv read_csv(const std::string& path);

// A curve through measured points (x ascending, duplicates averaged).
class Curve {
 public:
  enum class Space { LogLog, Linear };
  Curve() = default;
  Curve(std::vector<double> x, std::vector<double> y, Space space);
  bool empty() const { return x_.empty(); }
  bool covers(double x) const { return !x_.empty() && x >= x_.front() && x <= x_.back(); }
  double x_min() const { return x_.front(); }
  double x_max() const { return x_.back(); }
  double clamp(double x) const { return x < x_.front() ? x_.front() : x > x_.back() ? x_.back() : x; }
  // Interpolated inside the knots. Outside: LogLog returns the end value; Linear extends the
  // end segment (never below half the end value).
  double eval(double x) const;
  const std::vector<double>& xs() const { return x_; }
  const std::vector<double>& ys() const { return y_; }

 private:
  std::vector<double> x_, y_, lx_, ly_;
  Space space_ = Space::LogLog;
};

// An estimate with where it came from: inside the measured axes, or scaled from them.
struct Estimate {
  double ns = 0;
  bool scaled = false;
};

// gemm.csv: y[M,N] = x[M,K] . W[N,K]^T, curves over M per (K, N) shape.
class GemmTable {
 public:
  struct Shape {
    std::string op;
    double K = 0, N = 0;
    Curve t_ns;  // over M, log-log
  };
  static GemmTable from_csv(const Csv& csv, long skip_row = -1);
  // The measured shape to use for (K, N): exact if measured, else the nearest in log K + log N
  // whose weight size is within `max_ratio` of it; -1 if none.
  int nearest(double K, double N, double max_ratio) const;
  bool exact(int shape, double K, double N) const;
  Estimate estimate(int shape, double M, double K, double N, double elem_bytes, const Ceilings& c) const;
  double predict_row(const Csv& csv, size_t row, const Ceilings& c) const;
  const std::vector<Shape>& shapes() const { return shapes_; }
  double floor_ns() const { return floor_ns_; }

 private:
  std::vector<Shape> shapes_;
  double floor_ns_ = 0;
};

// attention_decode.csv: one query token per sequence over kv_len cached tokens. Per head
// group, one row per measured batch size; each row gives a sequence's share t(b, l) / b,
// piecewise-linear in l. A batch of n sequences of mixed lengths costs the sum of the shares
// of its sequences at the batch row(s) around n (geometric blend in log n between two rows),
// and never less than its longest sequence alone (the batch-1 row at the longest length): a
// mean length would be wrong because the kernel's work is per sequence and its floor is per
// batch. For equal lengths this reproduces the 2-D table exactly.
class DecodeTable {
 public:
  struct Row {
    double batch = 0;
    std::vector<double> knot;  // kv_len ascending
    std::vector<double> a, b;  // share(l) = a[s] + b[s] * l on segment s (first/last extended)
    double floor_ns = 0;       // half the group's shortest kernel over the row's batch
  };
  struct Group {
    int heads = 0, kv_heads = 0, head_dim = 0;
    std::vector<Row> rows;  // batch ascending
    double min_ns = 0;  // shortest kernel measured: no batch is faster
  };
  // Which group a (heads, kv_heads, head_dim) layout uses, and the factor that maps its KV
  // length to the group's KV length moving the same bytes (kv_heads * head_dim ratio).
  struct Plan {
    int group = -1;
    double len_scale = 1;
    bool exact = false;
  };
  static DecodeTable from_csv(const Csv& csv, long skip_row = -1);
  Plan plan(double heads, double kv_heads, double head_dim) const;
  // Time of one decode attention over a batch of kv lengths (already scaled by len_scale).
  // `scaled` is set when the batch or a length lies outside the measured axes.
  double batch_ns(const Plan& p, const double* lens, long n, bool* scaled) const;
  static double share(const Row& r, double l) {
    size_t s = 0;
    const size_t last = r.a.size() - 1;
    while (s < last && l > r.knot[s + 1]) ++s;
    const double v = r.a[s] + r.b[s] * l;
    return v > r.floor_ns ? v : r.floor_ns;
  }
  // The floor of a batch whose longest sequence is lmax: that sequence alone (the batch-1 row),
  // but never more than a whole batch of n sequences of lmax (measurements are noisy at the
  // launch floor, where a batch can measure faster than one sequence).
  static double longest_alone(const Group& g, const Row& lo, const Row& hi, double w, double n, double lmax);
  // max(t, longest_alone(...)), the same value, without the whole-batch bound's logarithms
  // when the sequence alone is already below t (then so is their minimum).
  static double at_least_longest_alone(double t, const Group& g, const Row& lo, const Row& hi, double w, double n, double lmax) {
    const double alone = share(g.rows[0], lmax) * g.rows[0].batch;
    if (!(alone > t)) return t;
    const double v = longest_alone(g, lo, hi, w, n, lmax);
    return t > v ? t : v;
  }
  // Batch rows around n and the log-space weight of the upper one.
  void bracket(const Group& g, double n, size_t* lo, size_t* hi, double* w) const;
  const std::vector<Group>& groups() const { return groups_; }
  double predict_row(const Csv& csv, size_t row) const;

 private:
  std::vector<Group> groups_;
};

// attention_prefill.csv (causal or not, prefix 0) and attention_slice.csv (a slice of l new
// tokens after c cached ones, causal): t(l, c).
class PrefillTable {
 public:
  struct Group {
    int heads = 0, kv_heads = 0, head_dim = 0, batch = 1;
    bool causal = true;
    Curve t_ns;  // over seq, log-log
    double min_ns = 0;
  };
  static PrefillTable from_csv(const Csv& csv, long skip_row = -1);
  // The causal batch-1 group nearest in KV sharing to `kv_ratio` = heads / kv_heads; -1 if none.
  int plan(double kv_ratio, bool causal = true) const;
  // Time of attention over `l` tokens for the group's shape.
  Estimate estimate(int group, double l, const Ceilings& c) const;
  const std::vector<Group>& groups() const { return groups_; }
  double predict_row(const Csv& csv, size_t row, const Ceilings& c) const;
  double min_ns() const { return min_ns_; }  // the shortest measured: floor of scaled estimates

 private:
  std::vector<Group> groups_;
  double min_ns_ = 0;
};

class SliceTable {
 public:
  struct Row {
    double prefix = 0;
    Curve t_ns;  // over slice length, log-log
  };
  int heads = 0, head_dim = 0;
  std::vector<Row> rows;  // prefix ascending
  double min_ns = 0;
  static SliceTable from_csv(const Csv& csv, long skip_row = -1);
  bool empty() const { return rows.empty(); }
  // t(l, c): log-log in l within a row, linear in c between rows, roofline-scaled beyond.
  Estimate estimate(double l, double c, const Ceilings& ceil) const;
  double predict_row(const Csv& csv, size_t row, const Ceilings& c) const;
};

// elementwise.csv: per-op curves over tokens; an op of another width is read at the token
// count that moves the same bytes (tokens x bytes_per_token / the table's bytes per token).
class ElementwiseTable {
 public:
  struct Op {
    Curve t_ns;                  // over tokens, log-log
    double bytes_per_token = 0;  // min_bytes / tokens as measured
    double min_ns = 0;
  };
  static ElementwiseTable from_csv(const Csv& csv, long skip_row = -1);
  const Op* find(const std::string& op) const;
  // Time of `op` over `tokens` rows moving `bytes_per_token` each.
  Estimate estimate(const Op& op, double tokens, double bytes_per_token) const;
  double predict_row(const Csv& csv, size_t row) const;

 private:
  std::map<std::string, Op> ops_;
};

// d2h.csv: per-mode curves of host wall time over batch (used by the serving last mile;
// here for its leave-one-out error).
class D2hTable {
 public:
  static D2hTable from_csv(const Csv& csv, long skip_row = -1);
  double us_median(const std::string& mode, double batch) const;  // -1 if the mode is absent
  double predict_row(const Csv& csv, size_t row) const;

 private:
  std::map<std::string, Curve> modes_;
};

// Leave-one-out error of one table: each measured row predicted from all the others.
struct LooStats {
  std::string file;
  long rows = 0;
  double median = 0, p90 = 0, max = 0;  // relative errors |pred - meas| / meas
  std::string worst;                    // the row with the largest error, as text
};
// Leave one shape out of gemm.csv: every row of a (K, N) shape predicted from the other shapes
// alone (the nearest within `max_ratio` of its weight size, scaled by the roofline), as a
// model whose GEMM shapes are not measured is costed. Rows with no shape near enough are skipped.
LooStats gemm_leave_shape_out(const Csv& csv, const Ceilings& c, double max_ratio);
// For every known CSV present in `dir`, in a fixed order (gemm.csv also by shape). Ceilings
// scale beyond the axes.
std::vector<LooStats> leave_one_out(const std::string& dir, const Ceilings& c);

}  // namespace sluice::costtab
