// The availability study (category "study", name "availability"): slice formability and job
// goodput on a TPU v4 pod under host failures, with OCS against a static torus. The hosts'
// up/down processes are an event loop over their next transition times (a heap ordered by
// time, then host); the cube-health mask changes only at those instants, and between them
// every job's progress (restart, work, checkpoint writes) follows by arithmetic, so a job
// needs no events of its own and its lost work is exact to the nanosecond.
#include "network/availability.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <queue>
#include <stdexcept>

#include <fmt/format.h>

#include "config/binding.h"
#include "engine/rng.h"
#include "recorder/availability_results.h"
#include "recorder/availability_report.h"
#include "run/scenario.h"
#include "run/study.h"

namespace sluice::net {

double ocs_formable_probability(int n_cubes, int hosts_per_cube, double a, int need) {
  if (need <= 0) return 1;
  if (need > n_cubes) return 0;
  const double p = std::pow(a, hosts_per_cube);
  if (p >= 1) return 1;
  if (p <= 0) return 0;
  double sum = 0;
  for (int k = need; k <= n_cubes; ++k)
    sum += std::exp(std::lgamma(n_cubes + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n_cubes - k + 1.0) + k * std::log(p) +
                    (n_cubes - k) * std::log1p(-p));
  return std::min(1.0, sum);
}

double student_t975(int df) {
  static constexpr double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                      2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                      2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045};
  if (df < 1) return std::numeric_limits<double>::quiet_NaN();
  if (df < 30) return kTable[df - 1];
  // Cornish–Fisher expansion about the normal quantile; within 1e-4 of the exact value from df = 30.
  const double z = 1.959963984540054, v = df;
  const double z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z;
  return z + (z3 + z) / (4 * v) + (5 * z5 + 16 * z3 + 3 * z) / (96 * v * v) + (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * v * v * v);
}

std::pair<double, double> mean_ci95(const std::vector<double>& v) {
  if (v.empty()) return {0, 0};
  const double n = static_cast<double>(v.size());
  double mean = 0;
  for (double x : v) mean += x;
  mean /= n;
  if (v.size() < 2) return {mean, 0};
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, student_t975(static_cast<int>(v.size()) - 1) * std::sqrt(ss / (n - 1) / n)};
}

CubeShape tpu_v4_slice_shape(int cubes) {
  // Doublings go to z, then y, then x: 1x1x1, 1x1x2, 1x2x2, 2x2x2, 2x2x4, 2x4x4, 4x4x4.
  if (cubes < 1 || !std::has_single_bit(static_cast<unsigned>(cubes)))
    throw std::invalid_argument(fmt::format("a TPU v4 slice has a power-of-two number of cubes, not {}", cubes));
  CubeShape s;
  int* axis[3] = {&s.z, &s.y, &s.x};
  for (int i = 0; (1 << i) < cubes; ++i) *axis[i % 3] *= 2;
  return s;
}

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// A draw in ns, at least 1 (every period takes time, so the loop always advances).
int64_t draw_ns(const faults::Distribution& d, RngStream& rng, bool residual) {
  double s;
  if (residual && d.kind == faults::DistKind::Fixed) s = rng.uniform() * d.mean_s;  // equilibrium residual of a fixed period
  else s = d.draw(rng);  // exact residual for the exponential; a fresh period otherwise (warmup removes the bias)
  const double ns = s * 1e9;
  if (!(ns < 4e18)) return 4'000'000'000'000'000'000;
  return std::max<int64_t>(1, std::llround(ns));
}

// Every host's alternating up/down process, each with its own stream.
class RandomHosts {
 public:
  RandomHosts(const AvailabilityConfig& cfg, uint64_t seed, int hosts, int64_t end_ns) : cfg_(cfg), end_(end_ns) {
    const double up = cfg.lifetime.mean(), down = cfg.repair.mean();
    const double p_down = down / (up + down);
    rng_.reserve(static_cast<size_t>(hosts));
    down_.assign(static_cast<size_t>(hosts), 0);
    for (int h = 0; h < hosts; ++h) {
      rng_.emplace_back(seed, fmt::format("availability/host/{}", h));
      down_[static_cast<size_t>(h)] = rng_.back().uniform() < p_down;
      push(0, h, true);
    }
  }
  const std::vector<uint8_t>& initial_down() const { return down_; }
  int64_t peek() const { return heap_.empty() ? kNever : heap_.top().first; }
  HostEvent pop() {
    const auto [t, h] = heap_.top();
    heap_.pop();
    auto& d = down_[static_cast<size_t>(h)];
    d = !d;
    push(t, h, false);
    return HostEvent{t, h, !d};
  }

 private:
  // Schedules host h's next transition from t (none past the end of the run).
  void push(int64_t t, int h, bool residual) {
    const bool down = down_[static_cast<size_t>(h)];
    const int64_t dt = draw_ns(down ? cfg_.repair : cfg_.lifetime, rng_[static_cast<size_t>(h)], residual);
    if (dt <= end_ - t) heap_.push({t + dt, h});
  }
  const AvailabilityConfig& cfg_;
  int64_t end_;
  std::vector<RngStream> rng_;
  std::vector<uint8_t> down_;  // the state the heap's next event leaves
  std::priority_queue<std::pair<int64_t, int>, std::vector<std::pair<int64_t, int>>, std::greater<>> heap_;
};

// A given trace, in order.
class TraceHosts {
 public:
  explicit TraceHosts(const std::vector<HostEvent>& ev) : ev_(ev) {}
  int64_t peek() const { return i_ < ev_.size() ? ev_[i_].t_ns : kNever; }
  HostEvent pop() { return ev_[i_++]; }

 private:
  const std::vector<HostEvent>& ev_;
  size_t i_ = 0;
};

// The pod's cube health, the formability flags and one job per slice and fabric.
class AvailabilitySim {
 public:
  AvailabilitySim(const AvailabilityConfig& cfg, std::vector<uint8_t> down)
      : cfg_(cfg), alloc_{PodAllocator(cfg.grid, true, PlacementPolicy::FirstFit), PodAllocator(cfg.grid, false, PlacementPolicy::FirstFit)},
        n_(alloc_[0].cube_count()), down_(std::move(down)), failed_(static_cast<size_t>(n_), 0) {
    if (cfg_.checkpoint_interval_ns <= 0) throw std::invalid_argument("the checkpoint interval must be positive");
    for (size_t h = 0; h < down_.size(); ++h)
      if (down_[h]) ++failed_[h / static_cast<size_t>(cfg_.hosts_per_cube)];
    res_.formable_ns.assign(cfg_.slices.size(), {0, 0});
    res_.jobs.assign(cfg_.slices.size(), {});
    jobs_.assign(cfg_.slices.size(), {});
    ok_.assign(cfg_.slices.size(), {false, false});
  }

  template <class Source>
  AvailabilityRunResult run(Source& src, int64_t start_ns) {
    const int64_t end = start_ns + cfg_.horizon_ns;
    while (src.peek() <= start_ns) apply(src.pop(), false);
    mask_ = healthy();
    update_flags();
    for (size_t i = 0; i < jobs_.size(); ++i)
      for (int f = 0; f < 2; ++f) jobs_[i][static_cast<size_t>(f)].wait_since = start_ns;
    update_jobs(start_ns);
    int64_t last = start_ns;
    while (src.peek() < end) {
      const int64_t t = src.peek();
      if (t < last) throw std::logic_error("availability: host events out of time order");
      integrate(t - last);
      last = t;
      while (src.peek() == t) apply(src.pop(), true);
      const uint64_t m = healthy();
      if (m != mask_) {
        mask_ = m;
        update_flags();
        update_jobs(t);
      }
    }
    integrate(end - last);
    for (size_t i = 0; i < jobs_.size(); ++i)
      for (size_t f = 0; f < 2; ++f) finish(i, f, end);
    return res_;
  }

 private:
  struct Job {
    bool running = false;
    uint64_t cubes = 0;
    int64_t since = 0;       // start of this placement
    int64_t wait_since = 0;  // start of the current wait
  };

  void apply(const HostEvent& e, bool counted) {
    if (e.host < 0 || static_cast<size_t>(e.host) >= down_.size())
      throw std::invalid_argument(fmt::format("availability: host {} is not in the pod (0 to {})", e.host, down_.size() - 1));
    auto& d = down_[static_cast<size_t>(e.host)];
    if (d == !e.up) return;  // already in that state
    d = !e.up;
    auto& f = failed_[static_cast<size_t>(e.host / cfg_.hosts_per_cube)];
    f += e.up ? -1 : 1;
    if (!e.up && counted) ++res_.host_failures;
  }

  uint64_t healthy() const {
    uint64_t m = 0;
    for (int c = 0; c < n_; ++c)
      if (failed_[static_cast<size_t>(c)] == 0) m |= uint64_t{1} << c;
    return m;
  }

  void update_flags() {
    const int healthy_cubes = std::popcount(mask_);
    for (size_t i = 0; i < cfg_.slices.size(); ++i) {
      ok_[i][0] = healthy_cubes >= cfg_.slices[i].cubes();
      ok_[i][1] = ok_[i][0] && alloc_[1].place(cfg_.slices[i], mask_).has_value();
    }
  }

  void integrate(int64_t dt) {
    if (dt <= 0) return;
    res_.healthy_cube_s += static_cast<double>(dt) * 1e-9 * std::popcount(mask_);
    for (size_t i = 0; i < ok_.size(); ++i)
      for (size_t f = 0; f < 2; ++f)
        if (ok_[i][f]) res_.formable_ns[i][f] += dt;
  }

  // A placement's time from its start: restart, then cycles of work and a checkpoint write.
  // Cut by a failure, the work since the last checkpoint is lost; at the end of the horizon it counts.
  void account(SliceJobTime& j, int64_t elapsed, bool failed) const {
    const int64_t r = cfg_.restart_ns;
    if (elapsed <= r) {
      j.restart_ns += elapsed;
      return;
    }
    j.restart_ns += r;
    const int64_t e = elapsed - r, work = cfg_.checkpoint_interval_ns, cycle = work + cfg_.checkpoint_cost_ns;
    const int64_t k = e / cycle, rem = e % cycle;
    j.useful_ns += k * work;
    j.checkpoint_ns += k * cfg_.checkpoint_cost_ns;
    const int64_t undone = std::min(rem, work);  // work past the last committed checkpoint
    (failed ? j.lost_ns : j.useful_ns) += undone;
    j.checkpoint_ns += rem - undone;  // a write in progress (lost with its interval on a failure)
  }

  void update_jobs(int64_t t) {
    for (size_t i = 0; i < jobs_.size(); ++i)
      for (size_t f = 0; f < 2; ++f) {
        Job& job = jobs_[i][f];
        SliceJobTime& acc = res_.jobs[i][f];
        if (job.running && (job.cubes & ~mask_) != 0) {
          account(acc, t - job.since, true);
          ++acc.interruptions;
          job.running = false;
          job.wait_since = t;
        }
        if (!job.running && ok_[i][f]) {
          // With OCS any healthy cubes (spares are wired in at once); static: a healthy block.
          const auto m = alloc_[f].place(cfg_.slices[i], mask_);
          if (!m) throw std::logic_error("availability: a formable slice could not be placed");
          acc.waiting_ns += t - job.wait_since;
          ++acc.starts;
          job.running = true;
          job.cubes = *m;
          job.since = t;
        }
      }
  }

  void finish(size_t i, size_t f, int64_t end) {
    const Job& job = jobs_[i][f];
    SliceJobTime& acc = res_.jobs[i][f];
    if (job.running) account(acc, end - job.since, false);
    else acc.waiting_ns += end - job.wait_since;
  }

  const AvailabilityConfig& cfg_;
  std::array<PodAllocator, 2> alloc_;  // OCS, static
  int n_;
  std::vector<uint8_t> down_;
  std::vector<int> failed_;  // failed hosts per cube
  uint64_t mask_ = 0;        // wholly healthy cubes
  std::vector<std::array<bool, 2>> ok_;
  std::vector<std::array<Job, 2>> jobs_;
  AvailabilityRunResult res_;
};

int host_count(const AvailabilityConfig& cfg) { return cfg.grid[0] * cfg.grid[1] * cfg.grid[2] * cfg.hosts_per_cube; }

}  // namespace

AvailabilityRunResult run_availability(const AvailabilityConfig& cfg, uint64_t seed) {
  const int64_t end = cfg.warmup_ns + cfg.horizon_ns;
  RandomHosts src(cfg, seed, host_count(cfg), end);
  AvailabilitySim sim(cfg, src.initial_down());
  return sim.run(src, cfg.warmup_ns);
}

AvailabilityRunResult run_availability_trace(const AvailabilityConfig& cfg, const std::vector<HostEvent>& trace) {
  for (size_t i = 1; i < trace.size(); ++i)
    if (trace[i].t_ns < trace[i - 1].t_ns) throw std::invalid_argument("availability: the host trace is not sorted by time");
  if (!trace.empty() && trace.front().t_ns < 0) throw std::invalid_argument("availability: the host trace starts before 0");
  TraceHosts src(trace);
  AvailabilitySim sim(cfg, std::vector<uint8_t>(static_cast<size_t>(host_count(cfg)), 0));
  // Events at 0 would be folded into the initial state; the trace starts from all hosts up.
  AvailabilityRunResult r = sim.run(src, 0);
  return r;
}

namespace {

// ---------------------------------------------------------------- the study

// A list parameter, or its default when absent (list defaults cannot be schema defaults).
Node list_or(const Params& p, const std::string& key, const std::string& fallback) {
  if (p.has(key)) return p.node(key);
  return load_yaml_string(fallback, "(default)");
}

std::optional<long long> int_of(const Node& n) { return n.is_scalar() ? parse_int(n.scalar) : std::nullopt; }

// The repair schema with a default mean, so that a scenario without `repair:` runs.
std::shared_ptr<Schema> repair_schema() {
  auto base = faults::distribution_schema(false);
  auto s = std::make_shared<Schema>();
  for (const ParamSpec& spec : base->params()) {
    ParamSpec& p = s->add(spec.name, spec.type, spec.doc);
    p = spec;
    if (p.name == "mean") {
      p.optional_ = false;
      p.def("24h");
    }
  }
  return s;
}

// What the study's own keys fill. The lists (pod.cubes, slices, availabilities) and the
// repair and lifetime sections are read by logic: lists are checked and converted item by
// item, and the lifetime's mean follows from each availability.
struct AvailabilitySettings {
  AvailabilityConfig cfg;  // pod.hosts_per_cube, horizon, warmup, job.*
  int cube_edge = 4;
  int seeds = 5;
};

// The bindings of the top-level keys and of the `pod` and `job` sections.
struct AvailabilityKeys {
  Binding<AvailabilitySettings> top, pod, job;
  AvailabilitySettings make(const Params& p) const {
    AvailabilitySettings st = top.make(p);
    pod.fill(p.section("pod"), st);
    job.fill(p.section("job"), st);
    return st;
  }
};

class AvailabilityStudy final : public Study {
 public:
  AvailabilityStudy(const StudyContext& ctx, const AvailabilityKeys& keys) : base_seed_(ctx.seed) {
    const Params& p = ctx.params;
    const AvailabilitySettings st = keys.make(p);
    cfg_ = st.cfg;
    edge_ = st.cube_edge;
    chips_per_cube_ = edge_ * edge_ * edge_;
    seeds_ = st.seeds;
    const Params& pod = p.section("pod");
    const Node cubes = list_or(pod, "cubes", "[4, 4, 4]");
    if (!cubes.is_seq() || cubes.seq.size() != 3) pod.fail("cubes", "expected cubes along x, y, z", "a list such as [4, 4, 4]");
    for (size_t i = 0; i < 3; ++i) {
      const auto v = int_of(cubes.seq[i]);
      if (!v || *v < 1 || *v > 64)
        throw ConfigError(cubes.seq[i].origin, fmt::format("pod.cubes[{}]", i), cubes.seq[i].brief(), "not a valid extent", "an integer in [1, 64]");
      cfg_.grid[i] = static_cast<int>(*v);
    }
    const int n_cubes = cfg_.grid[0] * cfg_.grid[1] * cfg_.grid[2];
    if (n_cubes > 64) pod.fail("cubes", fmt::format("{} cubes", n_cubes), "at most 64 cubes (a TPU v4 pod has 4×4×4)");

    // Slices: chips (the TPU v4 shape for that many cubes) or a shape in chips.
    const PodAllocator fit(cfg_.grid, false, PlacementPolicy::FirstFit);
    if (p.has("slices")) {
      const Node& sl = p.node("slices");
      if (!sl.is_seq() || sl.seq.empty()) p.fail("slices", "expected a non-empty list", "chips per slice, e.g. [64, 512, 4096], or shapes such as [8, 8, 16]");
      if (sl.seq.size() > 32) p.fail("slices", fmt::format("{} slices", sl.seq.size()), "at most 32");
      for (size_t i = 0; i < sl.seq.size(); ++i) add_slice(sl.seq[i], fmt::format("slices[{}]", i), fit);
    } else {
      for (int c = 1; c <= n_cubes; c *= 2) {
        const CubeShape s = tpu_v4_slice_shape(c);
        if (fit.feasible(s)) slices_.push_back(s);
      }
    }
    cfg_.slices = slices_;

    const Node av = list_or(p, "availabilities", "[0.99, 0.995, 0.999]");
    if (!av.is_seq() || av.seq.empty()) p.fail("availabilities", "expected a non-empty list", "host availabilities, e.g. [0.99, 0.995, 0.999]");
    if (av.seq.size() > 32) p.fail("availabilities", fmt::format("{} availabilities", av.seq.size()), "at most 32");
    for (size_t i = 0; i < av.seq.size(); ++i) {
      const Node& n = av.seq[i];
      const auto v = n.is_scalar() ? parse_real(n.scalar) : std::nullopt;
      if (!v || !(*v > 0) || !(*v < 1))
        throw ConfigError(n.origin, fmt::format("availabilities[{}]", i), n.brief(), "not an availability", "a number in (0, 1), e.g. 0.995");
      availabilities_.push_back(*v);
    }

    cfg_.repair = faults::distribution_from_params(p.section("repair"));
    const Params& life = p.section("lifetime");
    for (const char* k : {"mean", "scale"})
      if (life.given(k))
        life.fail(k, "the time to failure follows from the availability: MTBF = A/(1-A) · MTTR",
                  "leave it out and set `availabilities`; only dist (and a Weibull's shape) are read");
    const faults::Distribution lf = faults::distribution_fields(life);
    life_kind_ = lf.kind;
    life_shape_ = lf.shape;

    // Refuse a run that would take hours before drawing anything: its host transitions.
    const double mttr = cfg_.repair.mean(), hosts = static_cast<double>(n_cubes) * cfg_.hosts_per_cube;
    const double span_s = static_cast<double>(cfg_.warmup_ns + cfg_.horizon_ns) * 1e-9;
    double transitions = 0;
    for (double a : availabilities_) transitions += seeds_ * hosts * 2 * span_s / (mttr / (1 - a));
    constexpr double kMaxTransitions = 2e8;
    if (transitions > kMaxTransitions)
      p.fail("horizon", fmt::format("{:.3g} host failures and repairs in all ({} seeds, {} hosts, {} availabilities); at most {:.0e} are simulated",
                                    transitions, seeds_, hosts, availabilities_.size(), kMaxTransitions),
             "a shorter horizon or warmup, fewer seeds, or a longer repair time");
  }

  void run(RunEnv& env) override {
    AvailabilityResults res;
    res.cubes = cfg_.grid;
    res.chips_per_cube = chips_per_cube_;
    res.hosts_per_cube = cfg_.hosts_per_cube;
    res.repair = cfg_.repair.describe();
    res.mttr_s = cfg_.repair.mean();
    res.horizon_ns = cfg_.horizon_ns;
    res.warmup_ns = cfg_.warmup_ns;
    res.seeds = seeds_;
    res.checkpoint_interval_s = static_cast<double>(cfg_.checkpoint_interval_ns) * 1e-9;
    res.checkpoint_cost_s = static_cast<double>(cfg_.checkpoint_cost_ns) * 1e-9;
    res.restart_s = static_cast<double>(cfg_.restart_ns) * 1e-9;
    res.lifetime = life_kind_ == faults::DistKind::Weibull ? fmt::format("Weibull k={:.3g}", life_shape_)
                   : life_kind_ == faults::DistKind::Fixed   ? "fixed"
                                                             : "exponential";
    const int n_cubes = cfg_.grid[0] * cfg_.grid[1] * cfg_.grid[2];
    const double H = static_cast<double>(cfg_.horizon_ns);
    size_t done = 0;
    for (double a : availabilities_) {
      AvailabilityConfig c = cfg_;
      c.lifetime = lifetime_for(a);
      const size_t ns = c.slices.size();
      std::vector<std::array<std::vector<double>, 2>> formable(ns), goodput(ns), lost(ns), restart(ns), ckpt(ns), wait(ns), intr(ns);
      std::vector<double> healthy, failures;
      for (int s = 0; s < seeds_; ++s) {
        const AvailabilityRunResult r = run_availability(c, seed_of(s));
        healthy.push_back(r.healthy_cube_s * 1e9 / (H * n_cubes));
        failures.push_back(static_cast<double>(r.host_failures));
        for (size_t i = 0; i < ns; ++i)
          for (size_t f = 0; f < 2; ++f) {
            const SliceJobTime& j = r.jobs[i][f];
            formable[i][f].push_back(static_cast<double>(r.formable_ns[i][f]) / H);
            goodput[i][f].push_back(static_cast<double>(j.useful_ns) / H);
            lost[i][f].push_back(static_cast<double>(j.lost_ns) / H);
            restart[i][f].push_back(static_cast<double>(j.restart_ns) / H);
            ckpt[i][f].push_back(static_cast<double>(j.checkpoint_ns) / H);
            wait[i][f].push_back(static_cast<double>(j.waiting_ns) / H);
            intr[i][f].push_back(static_cast<double>(j.interruptions));
          }
        if (env.progress) env.progress(static_cast<double>(++done) / static_cast<double>(availabilities_.size() * static_cast<size_t>(seeds_)));
      }
      res.levels.push_back(AvailabilityLevel{.availability = a,
                                             .mtbf_s = c.lifetime.mean(),
                                             .cube_healthy_probability = std::pow(a, cfg_.hosts_per_cube),
                                             .healthy_cube_fraction = mean_ci95(healthy).first,
                                             .host_failures = mean_ci95(failures).first});
      for (size_t i = 0; i < ns; ++i)
        for (size_t f = 0; f < 2; ++f) {
          const CubeShape& s = c.slices[i];
          AvailabilityRow row;
          row.availability = a;
          row.cubes = s.cubes();
          row.chips = s.cubes() * chips_per_cube_;
          row.shape = fmt::format("{}x{}x{}", s.x * edge_, s.y * edge_, s.z * edge_);
          row.ocs = f == 0;
          std::tie(row.formable_mean, row.formable_ci95) = mean_ci95(formable[i][f]);
          std::tie(row.goodput_mean, row.goodput_ci95) = mean_ci95(goodput[i][f]);
          if (row.ocs) row.formula = ocs_formable_probability(n_cubes, cfg_.hosts_per_cube, a, s.cubes());
          row.lost_fraction = mean_ci95(lost[i][f]).first;
          row.restart_fraction = mean_ci95(restart[i][f]).first;
          row.checkpoint_fraction = mean_ci95(ckpt[i][f]).first;
          row.waiting_fraction = mean_ci95(wait[i][f]).first;
          row.interruptions = mean_ci95(intr[i][f]).first;
          res.rows.push_back(std::move(row));
        }
    }
    report_availability(res, env.recorder);
  }

 private:
  void add_slice(const Node& n, const std::string& path, const PodAllocator& fit) {
    CubeShape s;
    if (n.is_seq()) {
      if (n.seq.size() != 3) throw ConfigError(n.origin, path, n.brief(), "expected a shape of 3 extents", "a list such as [8, 8, 16]");
      int* e[3] = {&s.x, &s.y, &s.z};
      for (size_t k = 0; k < 3; ++k) {
        const auto v = int_of(n.seq[k]);
        if (!v || *v < edge_ || *v > 64 * edge_ || *v % edge_ != 0)
          throw ConfigError(n.seq[k].origin, fmt::format("{}[{}]", path, k), n.seq[k].brief(), "not a slice extent",
                            fmt::format("a multiple of the cube edge ({}), e.g. {} or {}", edge_, edge_, 2 * edge_));
        *e[k] = static_cast<int>(*v / edge_);
      }
    } else {
      const auto v = int_of(n);
      const long long per = chips_per_cube_;
      if (!v || *v < per || *v > 64 * per || *v % per != 0 || !std::has_single_bit(static_cast<unsigned long long>(*v / per)))
        throw ConfigError(n.origin, path, n.brief(), "not a TPU v4 slice size",
                          fmt::format("chips: {} times a power of two, e.g. {}, {}, ... {}", per, per, 2 * per, 64 * per));
      s = tpu_v4_slice_shape(static_cast<int>(*v / per));
    }
    if (!fit.feasible(s))
      throw ConfigError(n.origin, path, n.brief(), fmt::format("the slice ({}x{}x{} cubes) does not fit the pod of {}x{}x{} cubes", s.x, s.y, s.z,
                                                               cfg_.grid[0], cfg_.grid[1], cfg_.grid[2]),
                        "a slice whose cube extents fit the pod's in some orientation");
    slices_.push_back(s);
  }

  // The lifetime whose mean makes the host availability a: MTBF = a/(1-a) · MTTR.
  faults::Distribution lifetime_for(double a) const {
    faults::Distribution d;
    d.kind = life_kind_;
    const double mtbf = a / (1 - a) * cfg_.repair.mean();
    if (d.kind == faults::DistKind::Weibull) {
      d.shape = life_shape_;
      d.scale_s = mtbf / std::tgamma(1 + 1 / life_shape_);
    } else {
      d.mean_s = mtbf;
    }
    return d;
  }

  // Seed of replicate s: derived from the scenario seed, so replicates of nearby seeds do not coincide.
  uint64_t seed_of(int s) const { return splitmix64(base_seed_ ^ splitmix64(static_cast<uint64_t>(s) + 1)); }

  uint64_t base_seed_;
  AvailabilityConfig cfg_;
  int edge_ = 4, chips_per_cube_ = 64, seeds_ = 5;
  std::vector<CubeShape> slices_;
  std::vector<double> availabilities_;
  faults::DistKind life_kind_ = faults::DistKind::Exponential;
  double life_shape_ = 1;
};

// The study's schema, with the bindings of its keys.
std::pair<Schema, AvailabilityKeys> availability_schema() {
  using S = AvailabilitySettings;
  using C = AvailabilityConfig;
  Schema s = common_study_schema();
  auto pod = std::make_shared<Schema>();
  Binding<S> pod_keys(*pod);
  Binding<C> pod_cfg(*pod);
  pod->add("cubes", ParamType::List, "cubes along x, y, z, at most 64 cubes (default [4, 4, 4])").optional();
  pod_keys.integer("cube_edge", &S::cube_edge, "chips along a cube edge").def("4").range(1, 16);
  pod_cfg.integer("hosts_per_cube", &C::hosts_per_cube, "hosts per cube (TPU v4: 16 hosts of 4 chips); a cube is healthy when all are up")
      .def("16")
      .range(1, 64);
  pod_keys.nest(&S::cfg, pod_cfg);
  s.section("pod", pod, "the pod");
  s.add("availabilities", ParamType::List, "host availabilities A = MTBF/(MTBF+MTTR), each in (0, 1) (default [0.99, 0.995, 0.999])").optional();
  s.section("repair", repair_schema(), "host repair time (MTTR = its mean)");
  s.section("lifetime", faults::distribution_schema(true),
            "host time to failure: only its kind (and a Weibull's shape); its mean follows from each availability");
  s.add("slices", ParamType::List,
        "slice sizes: chips (the TPU v4 shape: 64 4x4x4, 128 4x4x8, 256 4x8x8, 512 8x8x8, 1024 8x8x16, 2048 8x16x16, 4096 16x16x16) or shapes in chips "
        "(default every power of two of cubes that fits the pod)")
      .optional();
  Binding<S> keys(s);
  Binding<C> cfg(s);
  cfg.time_ns("horizon", &C::horizon_ns, "measured wall time per run (at most 100 years)").def("3650d").range(1e9, 3.15e18);
  cfg.time_ns("warmup", &C::warmup_ns, "simulated before measuring (hosts start in their stationary state; this removes what remains of the start)")
      .def("0s")
      .range(0, 3.15e18);
  keys.nest(&S::cfg, cfg);
  keys.integer("seeds", &S::seeds, "independent runs per availability, for the 95% confidence intervals (Student t)").def("10").range(2, 1000);
  auto job = std::make_shared<Schema>();
  Binding<C> job_cfg(*job);
  job_cfg.time_ns("checkpoint_interval", &C::checkpoint_interval_ns, "useful work between checkpoints").def("1h").range(1, 3.15e18);
  job_cfg.time_ns("checkpoint_cost", &C::checkpoint_cost_ns, "time to write one checkpoint").def("1min").range(0, 3.15e18);
  job_cfg.time_ns("restart", &C::restart_ns, "time from placing the slice to work resuming (reload from the checkpoint)").def("10min").range(0, 3.15e18);
  Binding<S> job_keys(*job);
  job_keys.nest(&S::cfg, job_cfg);
  s.section("job", job, "the job that needs each slice: goodput = useful work / wall time");
  return {std::move(s), AvailabilityKeys{std::move(keys), std::move(pod_keys), std::move(job_keys)}};
}

}  // namespace

SLUICE_REGISTER(study, availability_study) {
  auto [schema, keys] = availability_schema();
  reg.add("study", "availability",
          "TPU v4 pod under host failures: fraction of time each slice size can be formed and the goodput of a job on it, OCS vs static torus",
          std::move(schema),
          StudyFactory([keys = std::move(keys)](const StudyContext& c) -> std::unique_ptr<Study> { return std::make_unique<AvailabilityStudy>(c, keys); }));
}

}  // namespace sluice::net
