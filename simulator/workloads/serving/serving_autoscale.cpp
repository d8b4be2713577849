// Autoscaling a serving deployment: the pool runs between autoscaling.min_replicas and
// deployment.replicas. Every `interval` the policy compares its signal with its target:
//   queue:        requests waiting (not yet admitted) per serving replica;
//   concurrency:  requests in flight (waiting, running, swapped) per serving replica;
//   utilization:  the serving replicas' busy fraction over the last interval.
// It wants ceil(serving x signal / target) replicas, within [min, most]. Growing starts
// replicas that serve after provision + model_load (a replica being provisioned counts toward
// the pool, so the policy does not order it twice); shrinking drains the highest-numbered
// serving replicas (routers skip them, they finish what they hold) and turns each off once
// it is empty. After either, the policy waits `cooldown` before changing again. Every replica
// provisioning, serving or draining is paid: replica-seconds integrate their count.
// Disaggregated (prefill/decode pools), each pool is scaled on its own signal, between its own
// fewest (prefill_min_replicas, min_replicas) and most (prefill_replicas, the rest).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "workloads/serving/serving_sim.h"

namespace sluice::serving {

void ServingSim::scale_account(int64_t now) {
  if (now <= scale_last_ns_) return;
  scale_.replica_s += static_cast<double>(scale_paid_) * static_cast<double>(now - scale_last_ns_) / 1e9;
  scale_.replica_on_s.resize(scale_state_.size(), 0.0);
  for (size_t r = 0; r < scale_state_.size(); ++r)
    if (scale_state_[r] != Scale::Off) scale_.replica_on_s[r] += static_cast<double>(now - scale_last_ns_) / 1e9;
  if (pool_split_ > 0) {  // each pool's replicas, and with replicas of two sizes their GPUs, counted apart
    int gpus = 0, prefill = 0;
    for (size_t r = 0; r < scale_state_.size(); ++r) {
      if (scale_state_[r] == Scale::Off) continue;
      gpus += tp_of(static_cast<int>(r));
      prefill += static_cast<int>(r) < pool_split_;
    }
    scale_.gpu_s += static_cast<double>(gpus) * static_cast<double>(now - scale_last_ns_) / 1e9;
    scale_.prefill_replica_s += static_cast<double>(prefill) * static_cast<double>(now - scale_last_ns_) / 1e9;
  }
  scale_last_ns_ = now;
  scale_.accounted_s = static_cast<double>(now) / 1e9;
}

void ServingSim::scale_start() {
  if (pp_ != 1 || faults_enabled_)
    throw std::runtime_error("autoscaling does not yet take pipeline-parallel deployments, or failures");
  const auto& a = cfg_.autoscaling;
  const int n = cfg_.replicas;
  // Disaggregated, each pool is scaled on its own: the prefill pool's signal is its own
  // replicas', the decode pool's theirs.
  scale_groups_.clear();
  if (pool_split_ > 0) scale_groups_.push_back(ScaleGroup{0, pool_split_, a.prefill_min_replicas, a.prefill_target > 0 ? a.prefill_target : a.target});
  scale_groups_.push_back(ScaleGroup{pool_split_, n, a.min_replicas, a.target});
  scale_group_changed_ns_.assign(scale_groups_.size(), -1);
  scale_state_.assign(static_cast<size_t>(n), Scale::Off);
  scale_busy_mark_.assign(static_cast<size_t>(n), 0);
  scale_paid_ = 0;
  for (const auto& g : scale_groups_)
    for (int r = g.begin; r < g.end; ++r) {
      if (r - g.begin < g.min) {
        scale_state_[static_cast<size_t>(r)] = Scale::Serving;
        ++scale_paid_;
      } else {
        replicas_[static_cast<size_t>(r)]->set_health(false);  // off: nothing routed, nothing run
      }
    }
  scale_.most = scale_paid_;
  scale_last_ns_ = engine_.now().count_ns();
  scale_.timeline.emplace_back(scale_last_ns_, scale_paid_);
  engine_.schedule_in(SimTime::ns(a.interval_ns), Priority::Stats, this, kScale);
}

void ServingSim::scale_tick() {
  const int64_t now = engine_.now().count_ns();
  // Draining replicas that emptied (nothing queued or running, no KV copy on its way to them)
  // are turned off.
  for (size_t r = 0; r < scale_state_.size(); ++r) {
    Replica& rep = *replicas_[r];
    if (scale_state_[r] == Scale::Draining && rep.outstanding() == 0 && !busy_[r] && rep.incoming == 0 &&
        (handoff_wait_.empty() || handoff_wait_[r].empty())) {
      scale_account(now);
      scale_state_[r] = Scale::Off;
      rep.set_draining(false);
      rep.set_health(false);
      --scale_paid_;
      scale_.timeline.emplace_back(now, scale_paid_);
    }
  }
  for (size_t gi = 0; gi < scale_groups_.size(); ++gi) scale_group(scale_groups_[gi], gi, now);
}

void ServingSim::scale_group(const ScaleGroup& g, size_t gi, int64_t now) {
  const auto& a = cfg_.autoscaling;
  const int64_t since = now - scale_group_changed_ns_[gi];
  int serving = 0, provisioning = 0;
  double waiting = 0, in_flight = 0, busy = 0;
  for (size_t r = static_cast<size_t>(g.begin); r < static_cast<size_t>(g.end); ++r) {
    if (scale_state_[r] == Scale::Provisioning) ++provisioning;
    if (scale_state_[r] != Scale::Serving) {
      scale_busy_mark_[r] = rstats_[r].busy_ns;
      continue;
    }
    ++serving;
    waiting += static_cast<double>(replicas_[r]->waiting.size());
    in_flight += static_cast<double>(replicas_[r]->outstanding());
    busy += static_cast<double>(rstats_[r].busy_ns - scale_busy_mark_[r]);
    scale_busy_mark_[r] = rstats_[r].busy_ns;
  }
  if (serving == 0) return;
  using P = ServingConfig::Autoscaling::Policy;
  const double signal = a.policy == P::Queue         ? waiting / serving
                        : a.policy == P::Concurrency ? in_flight / serving
                                                     : busy / (static_cast<double>(a.interval_ns) * serving);
  const int most = g.end - g.begin;
  const int want = std::clamp(static_cast<int>(std::ceil(serving * signal / g.target - 1e-9)), g.min, most);
  const int pool = serving + provisioning;
  if (signal > g.target && pool < most) scale_.under_provisioned_ns += a.interval_ns;
  if (scale_group_changed_ns_[gi] >= 0 && since < a.cooldown_ns) return;
  if (want > pool) {
    // Grow: draining replicas serve again first (they are paid for and loaded), then the
    // lowest-numbered replicas that are off start provisioning.
    int add = want - pool;
    scale_account(now);
    for (size_t r = static_cast<size_t>(g.begin); r < static_cast<size_t>(g.end) && add > 0; ++r) {
      if (scale_state_[r] != Scale::Draining) continue;
      scale_state_[r] = Scale::Serving;
      replicas_[r]->set_draining(false);
      --add;
    }
    for (size_t r = static_cast<size_t>(g.begin); r < static_cast<size_t>(g.end) && add > 0; ++r) {
      if (scale_state_[r] != Scale::Off) continue;
      scale_state_[r] = Scale::Provisioning;
      ++scale_paid_;
      --add;
      engine_.schedule_in(SimTime::ns(a.provision_ns + a.model_load_ns), Priority::Fault, this, kScaledUp, static_cast<uint32_t>(r));
    }
    ++scale_.scale_ups;
    scale_group_changed_ns_[gi] = now;
    scale_.most = std::max<int64_t>(scale_.most, scale_paid_);
    scale_.timeline.emplace_back(now, scale_paid_);
  } else if (want < serving && provisioning == 0) {
    // Shrink: the highest-numbered serving replicas drain.
    int drop = serving - want;
    for (size_t r = static_cast<size_t>(g.end); r-- > static_cast<size_t>(g.begin) && drop > 0;) {
      if (scale_state_[r] != Scale::Serving) continue;
      scale_state_[r] = Scale::Draining;
      replicas_[r]->set_draining(true);
      --drop;
    }
    ++scale_.scale_downs;
    scale_group_changed_ns_[gi] = now;
  }
}

void ServingSim::scaled_up(int r) {
  const int64_t now = engine_.now().count_ns();
  if (scale_state_[static_cast<size_t>(r)] != Scale::Provisioning) return;
  scale_state_[static_cast<size_t>(r)] = Scale::Serving;
  Replica& rep = *replicas_[static_cast<size_t>(r)];
  rep.set_draining(false);
  rep.set_health(true);
  kv_last_ns_[static_cast<size_t>(r)] = now;
  scale_busy_mark_[static_cast<size_t>(r)] = rstats_[static_cast<size_t>(r)].busy_ns;
}

}  // namespace sluice::serving
