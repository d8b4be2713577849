#include "workloads/cluster/pod_stream.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <deque>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/engine.h"

namespace sluice::cluster {

namespace {

// The event-driven pod: arrivals, slice starts and ends, host failures and repairs.
class PodSim final : public EventHandler {
 public:
  enum Kind : uint32_t { kArrive = 0, kFinish = 1, kFail = 2, kRepair = 3, kEnd = 4 };
  PodSim(const PodRunConfig& c, const std::vector<PodJob>& jobs, uint64_t seed)
      : cfg_(c), jobs_(jobs), alloc_(c.grid, c.ocs, c.placement), engine_(seed), n_(alloc_.cube_count()) {
    all_ = n_ == 64 ? ~uint64_t{0} : (uint64_t{1} << n_) - 1;
    free_ = all_;
    failed_hosts_.assign(static_cast<size_t>(n_), 0);
    state_.resize(jobs.size());
    res_.jobs = static_cast<long>(jobs.size());
    res_.cubes = n_;
    res_.horizon_ns = c.horizon_ns;
    res_.probe_ns.assign(c.probes.size(), 0);
    res_.classes.resize(static_cast<size_t>(std::max(1, c.classes)));
    for (const auto& j : jobs) {
      if (j.job_class < 0 || j.job_class >= static_cast<int>(res_.classes.size()))
        throw std::invalid_argument(fmt::format("pod job of class {}: the run has {} classes", j.job_class, res_.classes.size()));
      if (j.iterations > 0 && !c.iteration_ns) throw std::invalid_argument("pod run: training jobs need an iteration time");
    }
  }

  // A failure or repair drawn past the horizon never happens in the run; capping the delay
  // there keeps a huge MTBF (100000d) from overflowing the clock.
  SimTime draw(RngStream& rng, int64_t mean_ns) const {
    const double d = rng.exponential(static_cast<double>(mean_ns));
    return SimTime::ns(d >= static_cast<double>(cfg_.horizon_ns) ? cfg_.horizon_ns + 1 : static_cast<int64_t>(std::llround(d)));
  }

  PodRunResult run() {
    const SimTime horizon = SimTime::ns(cfg_.horizon_ns);
    for (size_t j = 0; j < jobs_.size(); ++j)
      if (jobs_[j].arrival_ns <= cfg_.horizon_ns)
        engine_.schedule_at(SimTime::ns(jobs_[j].arrival_ns), Priority::Arrival, this, kArrive, static_cast<uint32_t>(j));
    if (cfg_.host_mtbf_ns > 0) {
      const int hosts = n_ * cfg_.hosts_per_cube;
      host_rng_.reserve(static_cast<size_t>(hosts));
      for (int h = 0; h < hosts; ++h) {
        host_rng_.emplace_back(engine_.rng(fmt::format("pod.host.{}", h)));
        engine_.schedule_at(draw(host_rng_.back(), cfg_.host_mtbf_ns), Priority::Fault, this, kFail, static_cast<uint32_t>(h));
      }
    }
    engine_.schedule_at(horizon, Priority::Stats, this, kEnd, 0);
    engine_.run(horizon);
    advance(cfg_.horizon_ns);
    const double T = cfg_.horizon_ns > 0 ? static_cast<double>(cfg_.horizon_ns) : 1;
    const double cube_T = T * n_;
    // Integer sums, each at most its capacity: the ratios cannot exceed 1.
    res_.utilization = static_cast<double>(res_.busy_cube_ns) / cube_T;
    res_.healthy_fraction = static_cast<double>(res_.healthy_cube_ns) / cube_T;
    res_.fragmentation = static_cast<double>(res_.frag_ns) / T;
    res_.stranded_fraction = static_cast<double>(res_.stranded_cube_ns) / cube_T;
    res_.probe_availability.assign(res_.probe_ns.size(), 0);
    for (size_t i = 0; i < res_.probe_ns.size(); ++i) res_.probe_availability[i] = static_cast<double>(res_.probe_ns[i]) / T;
    for (size_t j = 0; j < jobs_.size(); ++j) {
      const PodJob& job = jobs_[j];
      auto& st = state_[j];
      if (job.arrival_ns > cfg_.horizon_ns) continue;
      auto& k = res_.classes[static_cast<size_t>(job.job_class)];
      ++k.jobs;
      if (!st.started && !st.rejected) ++res_.never_ran;
      if (job.iterations > 0 && st.started && !st.finished) {
        // Progress of a job still going at the horizon (or waiting to restart): its whole iterations.
        double progress = st.progress;
        if (st.running) progress += segment_progress(st, cfg_.horizon_ns);
        k.iterations_done += static_cast<int64_t>(std::floor(std::min(1.0, progress) * static_cast<double>(job.iterations) + 1e-9));
      }
    }
    res_.never_ran += res_.rejected;
    check_pod_invariants(res_);
    return res_;
  }

  void on_event(Engine& e, uint32_t kind, uint32_t arg) override {
    advance(e.now().count_ns());
    switch (kind) {
      case kArrive:
        if (!alloc_.feasible(jobs_[arg].shape)) {
          state_[arg].rejected = true;
          ++res_.rejected;
          break;
        }
        queue_.push_back(arg);
        break;
      case kFinish: {
        auto& st = state_[arg];
        if (!st.running || !(e.event_generation() == Generation(st.gen))) return;
        st.running = false;
        st.finished = true;
        free_ |= st.mask;
        ++res_.completed;
        auto& k = res_.classes[static_cast<size_t>(jobs_[arg].job_class)];
        ++k.completed;
        k.iterations_done += jobs_[arg].iterations;
        break;
      }
      case kFail: fail_host(static_cast<int>(arg)); break;
      case kRepair: repair_host(static_cast<int>(arg)); break;
      case kEnd: return;
    }
    schedule();
    update_flags();
  }

  void init_flags() { update_flags(); }

 private:
  struct JobState {
    bool started = false, running = false, rejected = false, finished = false;
    uint64_t mask = 0;
    double progress = 0;       // fraction of the job's work done (kept across restarts)
    int64_t redo_ns = 0;       // work to redo before progress resumes (restart penalties)
    int64_t work_ns = 0;       // the whole job's work on its current slice (iterations x iteration time, or the duration)
    int64_t iteration_ns = 0;  // on its current slice (training jobs)
    int64_t work_start_ns = 0;
    uint32_t gen = 0;
  };

  uint64_t healthy() const {
    uint64_t h = 0;
    for (int c = 0; c < n_; ++c)
      if (failed_hosts_[static_cast<size_t>(c)] == 0) h |= uint64_t{1} << c;
    return h;
  }

  // Integrates the time-weighted sums up to `t`.
  void advance(int64_t t) {
    const int64_t dt = t - last_ns_;
    if (dt <= 0) return;
    res_.busy_cube_ns += dt * std::popcount(all_ & ~free_);
    res_.healthy_cube_ns += dt * healthy_count_;
    if (head_fragmented_) res_.frag_ns += dt;
    if (!queue_.empty()) res_.stranded_cube_ns += dt * std::popcount(free_ & healthy_mask_);
    for (size_t i = 0; i < probe_ok_.size(); ++i)
      if (probe_ok_[i]) res_.probe_ns[i] += dt;
    last_ns_ = t;
  }

  void update_flags() {
    healthy_mask_ = healthy();
    healthy_count_ = std::popcount(healthy_mask_);
    head_fragmented_ = false;
    if (!queue_.empty()) {
      const auto& s = jobs_[queue_.front()].shape;
      head_fragmented_ = std::popcount(free_ & healthy_mask_) >= s.cubes();
    }
    probe_ok_.resize(cfg_.probes.size());
    for (size_t i = 0; i < cfg_.probes.size(); ++i) probe_ok_[i] = alloc_.place(cfg_.probes[i], healthy_mask_).has_value();
  }

  // The fraction of the job's work a running segment did by `t` (after its redo).
  double segment_progress(const JobState& st, int64_t t) const {
    const int64_t elapsed = std::max<int64_t>(0, t - st.work_start_ns);
    const int64_t useful = std::max<int64_t>(0, elapsed - st.redo_ns);
    return st.work_ns > 0 ? static_cast<double>(useful) / static_cast<double>(st.work_ns) : 1.0;
  }

  void start(uint32_t j, uint64_t mask) {
    auto& st = state_[j];
    const PodJob& job = jobs_[j];
    auto& k = res_.classes[static_cast<size_t>(job.job_class)];
    const int64_t now = engine_.now().count_ns();
    if (!st.started) {
      st.started = true;
      ++res_.started;
      ++k.started;
      res_.queue_delay_ns.push_back(now - job.arrival_ns);
      k.queue_delay_ns.push_back(now - job.arrival_ns);
    }
    st.running = true;
    st.mask = mask;
    free_ &= ~mask;
    if (job.iterations > 0) {
      st.iteration_ns = cfg_.iteration_ns(job.job_class, mask);
      if (st.iteration_ns <= 0) throw std::logic_error(fmt::format("pod job {}: iteration time {} ns on its slice", j, st.iteration_ns));
      k.iteration_ns.push_back(st.iteration_ns);
      const double w = static_cast<double>(job.iterations) * static_cast<double>(st.iteration_ns);
      st.work_ns = w >= 9e18 ? int64_t{9'000'000'000'000'000'000} : static_cast<int64_t>(w);
    } else {
      st.work_ns = job.duration_ns;
    }
    st.work_start_ns = now + (cfg_.ocs ? cfg_.reconfig_ns : 0);
    st.gen = (st.gen + 1) & Generation::kMask;
    // The rest of the work: what is left after the progress so far, plus the redo. A finish
    // beyond the horizon is not scheduled (the run ends first).
    const double left = std::ceil((1.0 - st.progress) * static_cast<double>(st.work_ns)) + static_cast<double>(st.redo_ns);
    const double end = static_cast<double>(st.work_start_ns) + left;
    if (end <= static_cast<double>(cfg_.horizon_ns))
      engine_.schedule_at(SimTime::ns(static_cast<int64_t>(end)), Priority::Compute, this, kFinish, j, Generation(st.gen));
  }

  void schedule() {
    const uint64_t avail = free_ & healthy();
    uint64_t left = avail;
    for (auto it = queue_.begin(); it != queue_.end();) {
      auto m = alloc_.place(jobs_[*it].shape, left);
      if (m) {
        const uint32_t j = *it;
        it = queue_.erase(it);
        start(j, *m);
        left &= ~*m;
        continue;
      }
      if (!cfg_.backfill) break;
      ++it;
    }
  }

  void fail_host(int h) {
    const int cube = h / cfg_.hosts_per_cube;
    ++res_.host_failures;
    ++failed_hosts_[static_cast<size_t>(cube)];
    const uint64_t bit = uint64_t{1} << cube;
    const int64_t now = engine_.now().count_ns();
    for (size_t j = 0; j < state_.size(); ++j) {
      auto& st = state_[j];
      if (!st.running || !(st.mask & bit)) continue;
      auto& k = res_.classes[static_cast<size_t>(jobs_[j].job_class)];
      const int64_t elapsed = std::max<int64_t>(0, now - st.work_start_ns);
      st.progress = std::min(1.0, st.progress + segment_progress(st, now));
      st.redo_ns = std::max<int64_t>(0, st.redo_ns - elapsed) + cfg_.restart_penalty_ns;
      k.lost_ns += cfg_.restart_penalty_ns;
      if (st.iteration_ns > 0)
        k.lost_iterations += static_cast<double>(cfg_.restart_penalty_ns) / static_cast<double>(st.iteration_ns);
      st.running = false;
      free_ |= st.mask;
      ++res_.interruptions;
      ++k.interruptions;
      queue_.push_front(static_cast<uint32_t>(j));
    }
    engine_.schedule_at(engine_.now() + draw(host_rng_[static_cast<size_t>(h)], cfg_.host_repair_ns), Priority::Fault, this, kRepair,
                        static_cast<uint32_t>(h));
  }

  void repair_host(int h) {
    --failed_hosts_[static_cast<size_t>(h / cfg_.hosts_per_cube)];
    engine_.schedule_at(engine_.now() + draw(host_rng_[static_cast<size_t>(h)], cfg_.host_mtbf_ns), Priority::Fault, this, kFail,
                        static_cast<uint32_t>(h));
  }

  const PodRunConfig& cfg_;
  const std::vector<PodJob>& jobs_;
  net::PodAllocator alloc_;
  Engine engine_;
  int n_;
  uint64_t all_ = 0, free_ = 0, healthy_mask_ = 0;
  int healthy_count_ = 0;
  std::vector<int> failed_hosts_;
  std::vector<JobState> state_;
  std::deque<uint32_t> queue_;
  std::vector<RngStream> host_rng_;
  PodRunResult res_;
  int64_t last_ns_ = 0;
  bool head_fragmented_ = false;
  std::vector<char> probe_ok_;
};

[[noreturn]] void violated(const std::string& name, const std::string& what) {
  throw std::logic_error(fmt::format("pod invariant violated: {}: {}", name, what));
}

void in_unit(const std::string& name, double v) {
  if (!(v >= 0 && v <= 1)) violated(name, fmt::format("{} is outside [0, 1]", v));
}

}  // namespace

void check_pod_invariants(const PodRunResult& r) {
  const int64_t T = r.horizon_ns;
  if (T < 0) violated("horizon", fmt::format("{} ns is negative", T));
  // Integer capacities: cube-time fits int64 for horizons up to the schema's bound.
  const int64_t cube_T = T * r.cubes;
  auto within = [&](const std::string& name, int64_t v, int64_t cap) {
    if (v < 0 || v > cap) violated(name, fmt::format("{} ns is outside [0, {}] ns", v, cap));
  };
  within("busy cube-time within capacity", r.busy_cube_ns, cube_T);
  within("healthy cube-time within capacity", r.healthy_cube_ns, cube_T);
  within("stranded cube-time within capacity", r.stranded_cube_ns, cube_T);
  within("fragmented time within the horizon", r.frag_ns, T);
  for (size_t i = 0; i < r.probe_ns.size(); ++i) within(fmt::format("probe {} formable time within the horizon", i), r.probe_ns[i], T);
  in_unit("utilization in [0, 1]", r.utilization);
  in_unit("healthy fraction in [0, 1]", r.healthy_fraction);
  in_unit("fragmentation in [0, 1]", r.fragmentation);
  in_unit("stranded fraction in [0, 1]", r.stranded_fraction);
  for (size_t i = 0; i < r.probe_availability.size(); ++i) in_unit(fmt::format("probe {} availability in [0, 1]", i), r.probe_availability[i]);
  for (int64_t q : r.queue_delay_ns)
    if (q < 0) violated("queue delay >= 0", fmt::format("a job started {} ns before it arrived", -q));
  if (r.completed > r.started || r.started > r.jobs) violated("jobs completed <= started <= jobs", fmt::format("{} <= {} <= {}", r.completed, r.started, r.jobs));
  long started = 0, completed = 0;
  for (size_t k = 0; k < r.classes.size(); ++k) {
    const auto& c = r.classes[k];
    started += c.started;
    completed += c.completed;
    for (int64_t q : c.queue_delay_ns)
      if (q < 0) violated("queue delay >= 0", fmt::format("a job of class {} started {} ns before it arrived", k, -q));
    for (int64_t t : c.iteration_ns)
      if (t <= 0) violated("iteration time > 0", fmt::format("class {}: {} ns", k, t));
    if (c.iterations_done < 0 || c.lost_ns < 0 || c.lost_iterations < 0) violated("work done and lost >= 0", fmt::format("class {}", k));
  }
  if (started != r.started || completed != r.completed)
    violated("per-class counts add up", fmt::format("started {} vs {}, completed {} vs {}", started, r.started, completed, r.completed));
}

PodRunResult run_pod(const PodRunConfig& cfg, const std::vector<PodJob>& jobs, uint64_t seed) {
  PodSim sim(cfg, jobs, seed);
  sim.init_flags();
  return sim.run();
}

}  // namespace sluice::cluster
