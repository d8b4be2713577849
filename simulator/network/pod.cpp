#include "network/pod.h"

#include <algorithm>
#include <bit>
#include <deque>
#include <limits>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

namespace sluice::net {

const char* placement_name(PlacementPolicy p) { return p == PlacementPolicy::FirstFit ? "first-fit" : "best-fit"; }

PodAllocator::PodAllocator(std::array<int, 3> grid, bool ocs, PlacementPolicy policy)
    : grid_(grid), n_(grid[0] * grid[1] * grid[2]), ocs_(ocs), policy_(policy) {
  if (n_ < 1 || n_ > 64) throw std::invalid_argument(fmt::format("a pod of {} cubes: the allocator handles 1 to 64", n_));
  nbr_.assign(static_cast<size_t>(n_), 0);
  auto idx = [&](int x, int y, int z) { return x + grid_[0] * (y + grid_[1] * z); };
  for (int z = 0; z < grid_[2]; ++z)
    for (int y = 0; y < grid_[1]; ++y)
      for (int x = 0; x < grid_[0]; ++x) {
        uint64_t m = 0;
        const int c[3] = {x, y, z};
        for (int d = 0; d < 3; ++d)
          for (int s : {-1, 1}) {
            int q[3] = {c[0], c[1], c[2]};
            q[d] = (q[d] + s + grid_[static_cast<size_t>(d)]) % grid_[static_cast<size_t>(d)];
            const int j = idx(q[0], q[1], q[2]);
            if (j != idx(x, y, z)) m |= uint64_t{1} << j;
          }
        nbr_[static_cast<size_t>(idx(x, y, z))] = m;
      }
}

const std::vector<PodAllocator::Candidate>& PodAllocator::blocks(const CubeShape& s) const {
  auto it = cache_.find(s);
  if (it != cache_.end()) return it->second;
  // Every orientation and origin (wrapping round the torus), deduplicated, in order of the
  // lowest cube index so that first-fit is well defined.
  std::set<uint64_t> seen;
  std::vector<std::pair<int, Candidate>> found;
  std::array<int, 3> e{s.x, s.y, s.z};
  std::sort(e.begin(), e.end());
  do {
    if (e[0] > grid_[0] || e[1] > grid_[1] || e[2] > grid_[2]) continue;
    for (int oz = 0; oz < grid_[2]; ++oz)
      for (int oy = 0; oy < grid_[1]; ++oy)
        for (int ox = 0; ox < grid_[0]; ++ox) {
          uint64_t m = 0;
          for (int dz = 0; dz < e[2]; ++dz)
            for (int dy = 0; dy < e[1]; ++dy)
              for (int dx = 0; dx < e[0]; ++dx) {
                const int x = (ox + dx) % grid_[0], y = (oy + dy) % grid_[1], z = (oz + dz) % grid_[2];
                m |= uint64_t{1} << (x + grid_[0] * (y + grid_[1] * z));
              }
          if (!seen.insert(m).second) continue;
          uint64_t nb = 0;
          for (uint64_t r = m; r; r &= r - 1) nb |= nbr_[static_cast<size_t>(std::countr_zero(r))];
          found.push_back({ox + grid_[0] * (oy + grid_[1] * oz), Candidate{m, nb & ~m}});
        }
  } while (std::next_permutation(e.begin(), e.end()));
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Candidate> out;
  for (auto& f : found) out.push_back(f.second);
  return cache_.emplace(s, std::move(out)).first->second;
}

bool PodAllocator::feasible(const CubeShape& s) const {
  const uint64_t all = n_ == 64 ? ~uint64_t{0} : (uint64_t{1} << n_) - 1;
  return place(s, all).has_value();
}

std::optional<uint64_t> PodAllocator::place(const CubeShape& s, uint64_t free) const {
  const int need = s.cubes();
  if (need > n_ || std::popcount(free) < need) return std::nullopt;
  if (ocs_) {
    std::vector<int> cand;
    for (uint64_t r = free; r; r &= r - 1) cand.push_back(std::countr_zero(r));
    if (policy_ == PlacementPolicy::BestFit) {
      std::stable_sort(cand.begin(), cand.end(), [&](int a, int b) {
        return std::popcount(nbr_[static_cast<size_t>(a)] & ~free) > std::popcount(nbr_[static_cast<size_t>(b)] & ~free);
      });
    }
    uint64_t m = 0;
    for (int i = 0; i < need; ++i) m |= uint64_t{1} << cand[static_cast<size_t>(i)];
    return m;
  }
  const auto& bl = blocks(s);
  std::optional<uint64_t> best;
  int best_score = -1;
  for (const auto& c : bl) {
    if ((c.mask & ~free) != 0) continue;
    if (policy_ == PlacementPolicy::FirstFit) return c.mask;
    const int score = std::popcount(c.neighbours & ~free);
    if (score > best_score) { best_score = score; best = c.mask; }
  }
  return best;
}

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
    res_.probe_availability.assign(c.probes.size(), 0);
    probe_time_.assign(c.probes.size(), 0);
  }

  // A failure or repair drawn past the horizon never happens in the run; capping the delay
  // there keeps a huge MTBF (100000d) from overflowing the clock.
  double beyond_horizon(double delay_s) const { return std::min(delay_s, cfg_.horizon_s + 1); }

  PodRunResult run() {
    const SimTime horizon = SimTime::seconds(cfg_.horizon_s);
    for (size_t j = 0; j < jobs_.size(); ++j)
      if (jobs_[j].arrival_s <= cfg_.horizon_s)
        engine_.schedule_at(SimTime::seconds(jobs_[j].arrival_s), Priority::Arrival, this, kArrive, static_cast<uint32_t>(j));
    if (cfg_.host_mtbf_s > 0) {
      const int hosts = n_ * cfg_.hosts_per_cube;
      host_rng_.reserve(static_cast<size_t>(hosts));
      for (int h = 0; h < hosts; ++h) {
        host_rng_.emplace_back(engine_.rng(fmt::format("pod.host.{}", h)));
        engine_.schedule_at(SimTime::seconds(beyond_horizon(host_rng_.back().exponential(cfg_.host_mtbf_s))), Priority::Fault, this, kFail,
                            static_cast<uint32_t>(h));
      }
    }
    engine_.schedule_at(horizon, Priority::Stats, this, kEnd, 0);
    engine_.run(horizon);
    advance(horizon.to_seconds());
    const double T = cfg_.horizon_s > 0 ? cfg_.horizon_s : 1;
    res_.utilization = busy_chip_s_ / (T * n_ * cfg_.chips_per_cube);
    res_.healthy_fraction = healthy_cube_s_ / (T * n_);
    res_.fragmentation = frag_s_ / T;
    res_.stranded_fraction = stranded_cube_s_ / (T * n_);
    for (size_t i = 0; i < probe_time_.size(); ++i) res_.probe_availability[i] = probe_time_[i] / T;
    for (size_t j = 0; j < jobs_.size(); ++j)
      if (jobs_[j].arrival_s <= cfg_.horizon_s && !state_[j].started && !state_[j].rejected) ++res_.never_ran;
    res_.never_ran += res_.rejected;
    return res_;
  }

  void on_event(Engine& e, uint32_t kind, uint32_t arg) override {
    advance(e.now().to_seconds());
    switch (kind & 7u) {
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
        if (!st.running || (kind >> 3) != st.gen) return;
        st.running = false;
        free_ |= st.mask;
        ++res_.completed;
        break;
      }
      case kFail: fail_host(static_cast<int>(arg)); break;
      case kRepair: repair_host(static_cast<int>(arg)); break;
      case kEnd: return;
    }
    schedule();
    update_flags();
  }

 private:
  struct JobState {
    bool started = false, running = false, rejected = false;
    uint64_t mask = 0;
    double remaining_s = 0, work_start_s = 0;
    uint32_t gen = 0;
  };

  uint64_t healthy() const {
    uint64_t h = 0;
    for (int c = 0; c < n_; ++c)
      if (failed_hosts_[static_cast<size_t>(c)] == 0) h |= uint64_t{1} << c;
    return h;
  }

  // Integrates the time-weighted metrics up to `t`.
  void advance(double t) {
    const double dt = t - last_s_;
    if (dt <= 0) return;
    busy_chip_s_ += dt * std::popcount(all_ & ~free_) * cfg_.chips_per_cube;
    healthy_cube_s_ += dt * healthy_count_;
    if (head_fragmented_) frag_s_ += dt;
    if (!queue_.empty()) stranded_cube_s_ += dt * std::popcount(free_ & healthy_mask_);
    for (size_t i = 0; i < probe_ok_.size(); ++i)
      if (probe_ok_[i]) probe_time_[i] += dt;
    last_s_ = t;
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

  void start(uint32_t j, uint64_t mask) {
    auto& st = state_[j];
    const double now = engine_.now().to_seconds();
    if (!st.started) {
      st.started = true;
      ++res_.started;
      res_.queue_delay_s.push_back(now - jobs_[j].arrival_s);
      st.remaining_s = jobs_[j].duration_s;
    }
    st.running = true;
    st.mask = mask;
    free_ &= ~mask;
    st.work_start_s = now + (cfg_.ocs ? cfg_.reconfig_s : 0);
    st.gen = (st.gen + 1) & 0x0FFFFFFF;
    engine_.schedule_at(SimTime::seconds(st.work_start_s + st.remaining_s), Priority::Compute, this, kFinish | (st.gen << 3), j);
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
    for (size_t j = 0; j < state_.size(); ++j) {
      auto& st = state_[j];
      if (!st.running || !(st.mask & bit)) continue;
      const double now = engine_.now().to_seconds();
      st.remaining_s -= std::max(0.0, now - st.work_start_s);
      st.remaining_s = std::max(0.0, st.remaining_s) + cfg_.restart_penalty_s;
      st.running = false;
      free_ |= st.mask;
      ++res_.interruptions;
      queue_.push_front(static_cast<uint32_t>(j));
    }
    engine_.schedule_in(SimTime::seconds(beyond_horizon(host_rng_[static_cast<size_t>(h)].exponential(cfg_.host_repair_s))), Priority::Fault, this, kRepair,
                        static_cast<uint32_t>(h));
  }

  void repair_host(int h) {
    --failed_hosts_[static_cast<size_t>(h / cfg_.hosts_per_cube)];
    engine_.schedule_in(SimTime::seconds(beyond_horizon(host_rng_[static_cast<size_t>(h)].exponential(cfg_.host_mtbf_s))), Priority::Fault, this, kFail,
                        static_cast<uint32_t>(h));
  }

  const PodRunConfig& cfg_;
  const std::vector<PodJob>& jobs_;
  PodAllocator alloc_;
  Engine engine_;
  int n_;
  uint64_t all_ = 0, free_ = 0, healthy_mask_ = 0;
  int healthy_count_ = 0;
  std::vector<int> failed_hosts_;
  std::vector<JobState> state_;
  std::deque<uint32_t> queue_;
  std::vector<RngStream> host_rng_;
  PodRunResult res_;
  double last_s_ = 0, busy_chip_s_ = 0, healthy_cube_s_ = 0, frag_s_ = 0, stranded_cube_s_ = 0;
  bool head_fragmented_ = false;
  std::vector<char> probe_ok_;
  std::vector<double> probe_time_;

 public:
  void init_flags() { update_flags(); }
};

}  // namespace

PodRunResult run_pod(const PodRunConfig& cfg, const std::vector<PodJob>& jobs, uint64_t seed) {
  PodSim sim(cfg, jobs, seed);
  sim.init_flags();
  return sim.run();
}

}  // namespace sluice::net
